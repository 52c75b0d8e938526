/* echo_obs_stats.c - hderp-echo observe's windows (rings of fixed-length time slots, each a
 * histogram and loss counts), their summaries and the alert checks. Runs on the observer's
 * shard (and on the main thread for --once, after the runtime stopped). */
#include <string.h>

#include "echo_obs.h"

/* The ring slot for now_ms, reset when it still holds an older slot's figures. */
static struct echo_obs_window *slot_of(struct echo_obs_window *ring, unsigned slots,
                                       uint32_t slot_ms, uint64_t now_ms)
{
    uint64_t slot = now_ms / slot_ms;
    struct echo_obs_window *w = &ring[slot % slots];
    if (w->slot != slot) {
        hd_hist_init(&w->rtt_ns);
        w->sent = w->received = w->lost = 0;
        w->slot = slot;
    }
    return w;
}

void echo_obs_window_note(struct echo_obs_window *ring, unsigned slots, uint32_t slot_ms,
                          uint64_t now_ms, int what, uint64_t rtt_ns)
{
    struct echo_obs_window *w = slot_of(ring, slots, slot_ms, now_ms);
    if (what == ECHO_OBS_NOTE_SENT) {
        w->sent++;
    } else if (what == ECHO_OBS_NOTE_ECHO) {
        w->received++;
        hd_hist_record(&w->rtt_ns, rtt_ns);
    } else {
        w->lost++;
    }
}

void echo_obs_summarise(const struct echo_obs_window *ring, unsigned slots, uint32_t slot_ms,
                        uint64_t now_ms, unsigned last_slots, struct echo_obs_summary *out)
{
    memset(out, 0, sizeof(*out));
    hd_hist_init(&out->rtt_ns);
    uint64_t now_slot = now_ms / slot_ms;
    for (unsigned i = 0; i < slots; i++) {
        const struct echo_obs_window *w = &ring[i];
        if (w->slot > now_slot || now_slot - w->slot >= last_slots)
            continue;
        if (w->sent == 0 && w->received == 0 && w->lost == 0)
            continue;
        hd_hist_merge(&out->rtt_ns, &w->rtt_ns);
        out->sent += w->sent;
        out->received += w->received;
        out->lost += w->lost;
    }
}

double echo_obs_loss_pct(uint64_t received, uint64_t lost)
{
    uint64_t decided = received + lost;
    return decided ? 100.0 * (double)lost / (double)decided : 0.0;
}

double echo_obs_ms(uint64_t ns)
{
    return (double)ns / 1e6;
}

/* One threshold of one path: log when it is crossed and when it is back under. */
static void judge(struct echo_obs_path *p, bool *alerting, bool over, bool known, const char *what,
                  double value, double limit, unsigned window_s)
{
    if (!known)
        return;
    if (over && !*alerting) {
        *alerting = true;
        hd_log(HD_LOG_WARN, "observe: ALERT %s: %s %.3f over %.3f (last %us)", p->label, what,
               value, limit, window_s);
    } else if (!over && *alerting) {
        *alerting = false;
        hd_log(HD_LOG_WARN, "observe: RECOVERED %s: %s %.3f under %.3f (last %us)", p->label, what,
               value, limit, window_s);
    }
}

void echo_obs_alerts_check(struct echo_obs *ob, uint64_t now_ms)
{
    const struct echo_obs_opts *o = ob->o;
    if (o->alert_p99_ms <= 0 && o->alert_loss_pct <= 0)
        return;
    unsigned last =
        (o->alert_window_s * 1000 + ECHO_OBS_SHORT_SLOT_MS - 1) / ECHO_OBS_SHORT_SLOT_MS;
    for (unsigned i = 0; i < ob->paths_count; i++) {
        struct echo_obs_path *p = &ob->paths[i];
        struct echo_obs_summary sum;
        echo_obs_summarise(p->short_w, ECHO_OBS_SHORT_SLOTS, ECHO_OBS_SHORT_SLOT_MS, now_ms, last,
                           &sum);
        if (o->alert_p99_ms > 0) {
            double p99 = echo_obs_ms(hd_hist_quantile(&sum.rtt_ns, 0.99));
            judge(p, &p->alert_p99, p99 > o->alert_p99_ms,
                  sum.received >= ECHO_OBS_ALERT_MIN_SAMPLES, "p99 ms", p99, o->alert_p99_ms,
                  o->alert_window_s);
        }
        if (o->alert_loss_pct > 0) {
            double loss = echo_obs_loss_pct(sum.received, sum.lost);
            judge(p, &p->alert_loss, loss > o->alert_loss_pct,
                  sum.received + sum.lost >= ECHO_OBS_ALERT_MIN_SAMPLES, "loss %", loss,
                  o->alert_loss_pct, o->alert_window_s);
        }
    }
}
