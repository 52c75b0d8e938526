/* timer.c - the per-shard hierarchical timer wheel: 4 levels x 64 slots, 1 ms resolution, 64
 * bits of occupancy per level. Runs on the owning shard's thread; timers are embedded in their
 * owners (intrusive doubly-linked lists).
 *
 * A timer sits at the lowest level l where its expiry's level-l slot number is within 64 of the
 * current time's (so the slot is reached before it would alias). Level 0 slots fire; a higher
 * slot is cascaded (its timers re-inserted lower) when time reaches the slot's start; timers
 * beyond 64^4 ms park in the top level's farthest slot and cascade again. Start, stop and re-arm
 * are O(1); expiry is O(timers due + slots crossed). The next event (the ring's wait timeout) is
 * found from the occupancy bitmaps in O(levels), and time jumps straight to it, so an idle shard
 * with a 60 s keep-alive timer does not walk 60,000 slots. */
#include <time.h>

#include "hd_impl.h"

uint64_t hd_clock_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t hd_clock_ms(void)
{
    return hd_clock_ns() / 1000000u;
}

uint64_t hd_now_ms(const struct hd_shard *s)
{
    return s->now_ms;
}

void hd_wheel_init(struct hd_wheel *w, uint64_t now_ms)
{
    *w = (struct hd_wheel){.current_ms = now_ms};
    w->firing_tail = &w->firing;
}

void hd_timer_init(struct hd_timer *t, hd_timer_fn *fn)
{
    *t = (struct hd_timer){.fn = fn};
}

static void list_push(struct hd_timer **head, struct hd_timer *t)
{
    t->next = *head;
    if (t->next)
        t->next->pprev = &t->next;
    t->pprev = head;
    *head = t;
}

/* expiry_ms >= current_ms: from a cascade at current_ms (its level-0 slot is collected next),
 * or a start for a later millisecond. */
static void wheel_link(struct hd_wheel *w, struct hd_timer *t)
{
    uint64_t cur = w->current_ms;
    uint64_t exp = t->expiry_ms;
    unsigned level = 0;
    while (level < HD_WHEEL_LEVELS - 1 &&
           (exp >> (HD_WHEEL_BITS * level)) - (cur >> (HD_WHEEL_BITS * level)) >= HD_WHEEL_SLOTS)
        level++;
    uint64_t slotno = exp >> (HD_WHEEL_BITS * level);
    uint64_t curno = cur >> (HD_WHEEL_BITS * level);
    if (slotno - curno >= HD_WHEEL_SLOTS) /* beyond the top level: park in its farthest slot */
        slotno = curno + HD_WHEEL_SLOTS - 1;
    unsigned idx = (unsigned)(slotno & (HD_WHEEL_SLOTS - 1));
    list_push(&w->slots[level][idx], t);
    w->occupied[level] |= UINT64_C(1) << idx;
}

static void wheel_unlink(struct hd_wheel *w, struct hd_timer *t)
{
    *t->pprev = t->next;
    if (t->next)
        t->next->pprev = t->pprev;
    else if (w->firing_tail == &t->next)
        w->firing_tail = t->pprev;
    /* The list head pointer lives inside w->slots: find its slot to keep the bitmap exact. */
    uintptr_t first = (uintptr_t)&w->slots[0][0];
    uintptr_t at = (uintptr_t)t->pprev;
    size_t off = (at - first) / sizeof(struct hd_timer *);
    if (at >= first && off < (size_t)HD_WHEEL_LEVELS * HD_WHEEL_SLOTS && *t->pprev == NULL)
        w->occupied[off / HD_WHEEL_SLOTS] &= ~(UINT64_C(1) << (off % HD_WHEEL_SLOTS));
    t->next = NULL;
    t->pprev = NULL;
}

void hd_timer_start(struct hd_shard *s, struct hd_timer *t, uint64_t delay_ms)
{
    struct hd_wheel *w = &s->wheel;
    if (t->pprev)
        wheel_unlink(w, t);
    else
        w->armed++;
    t->expiry_ms = s->now_ms + delay_ms;
    if (t->expiry_ms <= w->current_ms)
        list_push(&w->due, t); /* that millisecond was processed: fire on the next pass */
    else
        wheel_link(w, t);
}

void hd_timer_stop(struct hd_shard *s, struct hd_timer *t)
{
    if (!t->pprev)
        return;
    wheel_unlink(&s->wheel, t);
    s->wheel.armed--;
}

/* Re-insert every timer of one slot relative to the current time (they land lower). */
static void wheel_cascade(struct hd_wheel *w, unsigned level, unsigned idx)
{
    struct hd_timer *t = w->slots[level][idx];
    w->slots[level][idx] = NULL;
    w->occupied[level] &= ~(UINT64_C(1) << idx);
    while (t) {
        struct hd_timer *next = t->next;
        wheel_link(w, t);
        t = next;
    }
}

/* Append to the firing list: timers stay linked (armed) there until they fire, so a callback
 * may stop or re-arm one that is due in the same pass. */
static void firing_append(struct hd_wheel *w, struct hd_timer *t)
{
    t->next = NULL;
    t->pprev = w->firing_tail;
    *w->firing_tail = t;
    w->firing_tail = &t->next;
}

static void wheel_collect(struct hd_wheel *w, unsigned idx)
{
    struct hd_timer *t = w->slots[0][idx];
    w->slots[0][idx] = NULL;
    w->occupied[0] &= ~(UINT64_C(1) << idx);
    while (t) {
        struct hd_timer *next = t->next;
        firing_append(w, t);
        t = next;
    }
}

/* The first millisecond after current_ms at which a slot holding timers is reached (fired at
 * level 0, cascaded above), or UINT64_MAX. Nothing happens before it, so time may jump there. */
static uint64_t wheel_next_abs(const struct hd_wheel *w)
{
    uint64_t best = UINT64_MAX;
    for (unsigned l = 0; l < HD_WHEEL_LEVELS; l++) {
        uint64_t occ = w->occupied[l];
        if (!occ)
            continue;
        unsigned shift = HD_WHEEL_BITS * l;
        uint64_t curno = w->current_ms >> shift;
        unsigned c = (unsigned)((curno + 1) & (HD_WHEEL_SLOTS - 1));
        /* Rotate so bit 0 is the slot reached next; k = slots after that one. */
        uint64_t rot = c ? (occ >> c) | (occ << (HD_WHEEL_SLOTS - c)) : occ;
        unsigned k = (unsigned)__builtin_ctzll(rot);
        uint64_t when = (curno + 1 + k) << shift;
        if (when < best)
            best = when;
    }
    return best;
}

void hd_wheel_expire(struct hd_shard *s, uint64_t now_ms)
{
    struct hd_wheel *w = &s->wheel;
    while (w->due) {
        struct hd_timer *t = w->due;
        w->due = t->next;
        firing_append(w, t);
    }
    while (w->current_ms < now_ms) {
        uint64_t next = wheel_next_abs(w);
        if (next > w->current_ms + 1) {
            w->current_ms = next - 1 < now_ms ? next - 1 : now_ms;
            continue;
        }
        uint64_t t = ++w->current_ms;
        for (unsigned l = HD_WHEEL_LEVELS - 1; l >= 1; l--) {
            uint64_t mask = (UINT64_C(1) << (HD_WHEEL_BITS * l)) - 1;
            if ((t & mask) == 0)
                wheel_cascade(w, l, (unsigned)((t >> (HD_WHEEL_BITS * l)) & (HD_WHEEL_SLOTS - 1)));
        }
        wheel_collect(w, (unsigned)(t & (HD_WHEEL_SLOTS - 1)));
    }
    /* Fire after the wheel is consistent: a callback may start or stop any timer, including
     * one still on the firing list. */
    while (w->firing) {
        struct hd_timer *t = w->firing;
        wheel_unlink(w, t);
        w->armed--;
        s->stats.timers_fired++;
        hd_running(s, HD_RUN_TIMER, (const void *)t->fn);
        t->fn(t);
    }
}

uint64_t hd_wheel_next_ms(const struct hd_wheel *w, uint64_t now_ms)
{
    if (w->armed == 0)
        return UINT64_MAX;
    if (w->due)
        return 0;
    uint64_t when = wheel_next_abs(w);
    return when <= now_ms ? 0 : when - now_ms;
}
