/* test_echo_observe.c - hderp-echo observe's DERP map reader (nodes, ports, names checked,
 * errors named) and its windows (slots expire, summaries sum the slots still current). */
#include <criterion/criterion.h>
#include <string.h>

#include "echo_obs.h"

static struct echo_obs_opts o;
static char err[256];

static int parse(const char *json, bool plain)
{
    memset(&o, 0, sizeof(o));
    err[0] = '\0';
    return echo_obs_derpmap_parse(json, strlen(json), plain, &o, err, sizeof(err));
}

Test(echo_observe, map_nodes_ports_and_names)
{
    const char *map =
        "{\"Regions\":{\"900\":{\"RegionID\":900,\"RegionCode\":\"lab\",\"Nodes\":["
        "{\"Name\":\"900a\",\"RegionID\":900,\"HostName\":\"derp1.example.com\","
        "\"IPv4\":\"127.0.0.1\",\"DERPPort\":8443,\"STUNPort\":3479},"
        "{\"Name\":\"900b\",\"RegionID\":900,\"HostName\":\"127.0.0.2\",\"STUNPort\":-1,"
        "\"InsecureForTests\":true},"
        "{\"Name\":\"900s\",\"RegionID\":900,\"HostName\":\"stun.example.com\","
        "\"STUNOnly\":true}]}}}";
    cr_assert_eq(parse(map, false), 0, "%s", err);
    cr_assert_eq(o.nodes_count, 2, "the STUN-only node is not a DERP node");
    const struct echo_obs_node *a = &o.nodes[0], *b = &o.nodes[1];
    cr_assert_str_eq(a->name, "900a");
    cr_assert_str_eq(a->region, "lab");
    cr_assert_eq(a->region_id, 900);
    cr_assert(a->url.tls);
    cr_assert_eq(net_addr_port(&a->url.addr), 8443);
    cr_assert_str_eq(a->url.host, "derp1.example.com:8443", "Host is the name, dial the address");
    cr_assert_str_eq(a->sni, "derp1.example.com");
    cr_assert(a->has_stun);
    cr_assert_eq(net_addr_port(&a->stun), 3479);
    cr_assert(!a->insecure);
    cr_assert_eq(net_addr_port(&b->url.addr), 443, "DERPPort 0: 443");
    cr_assert(!b->has_stun, "STUNPort -1: none");
    cr_assert(b->insecure);
}

Test(echo_observe, map_plain_http_defaults)
{
    const char *map =
        "{\"Regions\":{\"1\":{\"Nodes\":[{\"Name\":\"1a\",\"IPv4\":\"127.0.0.1\"}]}}}";
    cr_assert_eq(parse(map, true), 0, "%s", err);
    cr_assert(!o.nodes[0].url.tls);
    cr_assert_eq(net_addr_port(&o.nodes[0].url.addr), 80);
    cr_assert_str_eq(o.nodes[0].region, "1", "no RegionCode: the region's id");
    cr_assert_eq(net_addr_port(&o.nodes[0].stun), 3478, "STUNPort 0: 3478");
}

/* What hderp-server --print-derpmap prints and a policy file holds: the map under "derpMap"
 * (issue 23: "no Regions object"). */
Test(echo_observe, map_inside_derpmap_key)
{
    const char *map = "{\"derpMap\": {\"Regions\":{\"900\":{\"RegionID\":900,\"RegionCode\":"
                      "\"hderp\",\"Nodes\":[{\"Name\":\"900a\",\"RegionID\":900,"
                      "\"HostName\":\"127.0.0.1\",\"IPv4\":\"127.0.0.1\",\"DERPPort\":3340}]}}}}";
    cr_assert_eq(parse(map, true), 0, "%s", err);
    cr_assert_eq(o.nodes_count, 1);
    cr_assert_str_eq(o.nodes[0].name, "900a");
    cr_assert_eq(net_addr_port(&o.nodes[0].url.addr), 3340);
    cr_assert_lt(parse("{\"derpMap\": {\"regions\": {}}}", false), 0);
    cr_assert(strstr(err, "derpMap"), "%s", err);
}

Test(echo_observe, map_errors_are_named)
{
    cr_assert_lt(parse("{\"Regions\": 3", false), 0);
    cr_assert(strstr(err, "not JSON"), "%s", err);
    cr_assert_lt(parse("{\"regions\":{}}", false), 0);
    cr_assert(strstr(err, "Regions"), "%s", err);
    cr_assert_lt(parse("{\"Regions\":{\"7\":{\"Nodes\":[{\"HostName\":\"x\"}]}}}", false), 0);
    cr_assert(strstr(err, "without Name"), "%s", err);
    cr_assert_lt(
        parse("{\"Regions\":{\"7\":{\"Nodes\":[{\"Name\":\"<b>\",\"IPv4\":\"1.2.3.4\"}]}}}", false),
        0, "a name that would need escaping in HTML, JSON or Prometheus labels is refused");
    cr_assert(strstr(err, "<b>"), "%s", err);
}

Test(echo_observe, windows_expire_and_sum)
{
    struct echo_obs_window ring[ECHO_OBS_SHORT_SLOTS];
    memset(ring, 0, sizeof(ring));
    const uint32_t slot = ECHO_OBS_SHORT_SLOT_MS;
    uint64_t t0 = 1000 * (uint64_t)slot; /* slot 1000 */
    for (int i = 0; i < 10; i++) {
        echo_obs_window_note(ring, ECHO_OBS_SHORT_SLOTS, slot, t0, ECHO_OBS_NOTE_SENT, 0);
        echo_obs_window_note(ring, ECHO_OBS_SHORT_SLOTS, slot, t0, ECHO_OBS_NOTE_ECHO, 1000000);
    }
    echo_obs_window_note(ring, ECHO_OBS_SHORT_SLOTS, slot, t0 + slot, ECHO_OBS_NOTE_LOST, 0);
    struct echo_obs_summary s;
    echo_obs_summarise(ring, ECHO_OBS_SHORT_SLOTS, slot, t0 + slot, ECHO_OBS_SHORT_SLOTS, &s);
    cr_assert_eq(s.sent, 10);
    cr_assert_eq(s.received, 10);
    cr_assert_eq(s.lost, 1);
    cr_assert_float_eq(echo_obs_loss_pct(s.received, s.lost), 100.0 / 11, 1e-9);
    uint64_t p50 = hd_hist_quantile(&s.rtt_ns, 0.5);
    cr_assert(p50 >= 1000000 && p50 <= 1070000, "p50 %llu: 1 ms within a bucket",
              (unsigned long long)p50);
    /* Only the last slot: the echoes are in the one before. */
    echo_obs_summarise(ring, ECHO_OBS_SHORT_SLOTS, slot, t0 + slot, 1, &s);
    cr_assert_eq(s.received, 0);
    cr_assert_eq(s.lost, 1);
    /* A whole ring later everything has expired, and a slot reused starts from zero. */
    uint64_t later = t0 + (uint64_t)ECHO_OBS_SHORT_SLOTS * slot;
    echo_obs_summarise(ring, ECHO_OBS_SHORT_SLOTS, slot, later + slot, ECHO_OBS_SHORT_SLOTS, &s);
    cr_assert_eq(s.sent + s.received + s.lost, 0);
    echo_obs_window_note(ring, ECHO_OBS_SHORT_SLOTS, slot, later, ECHO_OBS_NOTE_SENT, 0);
    echo_obs_summarise(ring, ECHO_OBS_SHORT_SLOTS, slot, later, 1, &s);
    cr_assert_eq(s.sent, 1, "the reused slot forgot slot 1000's ten");
}

/* Durations as every program of the project takes them (Go's spelling), bare numbers in the
 * unit each flag had (issue 23: --duration 10s was "expected a number"). */
Test(echo_observe, durations_in_go_style_and_bare)
{
    char *argv[] = {"hderp-echo",
                    "observe",
                    "--server",
                    "http://127.0.0.1:1",
                    "--duration",
                    "10s",
                    "--down-after",
                    "1.5s",
                    "--alert-window",
                    "1m",
                    "--alert-p99-ms",
                    "250ms",
                    NULL};
    cr_assert_eq(echo_obs_opts_parse(12, argv, &o), 0);
    cr_assert_eq(o.duration_s, 10);
    cr_assert_eq(o.down_after_ms, 1500);
    cr_assert_eq(o.alert_window_s, 60);
    cr_assert_float_eq(o.alert_p99_ms, 250, 1e-9);
    char *bare[] = {"hderp-echo",
                    "observe",
                    "--server",
                    "http://127.0.0.1:1",
                    "--duration",
                    "45",
                    "--down-after",
                    "700",
                    "--alert-window",
                    "20",
                    "--alert-p99-ms",
                    "12.5",
                    NULL};
    cr_assert_eq(echo_obs_opts_parse(12, bare, &o), 0);
    cr_assert_eq(o.duration_s, 45, "bare: seconds");
    cr_assert_eq(o.down_after_ms, 700, "bare: milliseconds");
    cr_assert_eq(o.alert_window_s, 20);
    cr_assert_float_eq(o.alert_p99_ms, 12.5, 1e-9);
    char *over[] = {"hderp-echo", "observe", "--server", "http://127.0.0.1:1",
                    "--duration", "25h",     NULL};
    cr_assert_eq(echo_obs_opts_parse(6, over, &o), -1, "over a day");
}
