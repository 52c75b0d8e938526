/* test_wgrelay_table.c - hderp-wgrelay's pure parts: the classifier, MAC1 (against a vector made
 * with Go's golang.org/x/crypto/blake2s, an independent BLAKE2s), the peers file, and the routing
 * table driven with synthetic WireGuard messages: meeting through candidates, a session by
 * receiver index, roaming, replays, refused pairs, unregistered keys, the rate limit, ageing and
 * reloads. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "wgr.h"

static char err[256];

/* ---------------------------------------------------------------- classifier and MAC1 */

Test(wgrelay_proto, classify_shapes)
{
    uint8_t p[256] = {0};
    p[0] = 1;
    cr_assert_eq(wgr_classify(p, 148), WGR_INITIATION);
    cr_assert_eq(wgr_classify(p, 147), 0);
    cr_assert_eq(wgr_classify(p, 149), 0);
    p[0] = 2;
    cr_assert_eq(wgr_classify(p, 92), WGR_RESPONSE);
    cr_assert_eq(wgr_classify(p, 91), 0);
    p[0] = 3;
    cr_assert_eq(wgr_classify(p, 64), WGR_COOKIE);
    cr_assert_eq(wgr_classify(p, 65), 0);
    p[0] = 4;
    cr_assert_eq(wgr_classify(p, 32), WGR_DATA, "a keepalive");
    cr_assert_eq(wgr_classify(p, 48), WGR_DATA);
    cr_assert_eq(wgr_classify(p, 1452), WGR_DATA);
    cr_assert_eq(wgr_classify(p, 1441), WGR_DATA, "padding stops at the MTU: any length");
    cr_assert_eq(wgr_classify(p, 31), 0, "header and tag");
    cr_assert_eq(wgr_classify(p, 16), 0);
    cr_assert_eq(wgr_classify(p, 3), 0);
    p[2] = 1;
    cr_assert_eq(wgr_classify(p, 48), 0, "reserved bytes are zero");
    p[2] = 0, p[3] = 0x80;
    cr_assert_eq(wgr_classify(p, 48), 0);
    p[2] = 0;
    p[0] = 5;
    cr_assert_eq(wgr_classify(p, 48), 0);
    p[0] = 0;
    cr_assert_eq(wgr_classify(p, 148), 0);
}

static void hex(const char *s, uint8_t *out, size_t n)
{
    for (size_t i = 0; i < n; i++)
        sscanf(s + 2 * i, "%2hhx", &out[i]);
}

Test(wgrelay_proto, mac1_matches_an_independent_blake2s)
{
    uint8_t pub[32], msg[148], key[32], want_key[32], want_mac[16];
    for (unsigned i = 0; i < 32; i++)
        pub[i] = (uint8_t)(i * 7);
    for (unsigned i = 0; i < 148; i++)
        msg[i] = (uint8_t)(i * 3);
    msg[0] = 1, msg[1] = msg[2] = msg[3] = 0;
    hex("95027904f0c8a5d9a4fb26f784e7aff1696dacbfa4f0d3c190dbe51d7e6bdab7", want_key, 32);
    hex("2ae023eb60ad09a666596cbe24752d2e", want_mac, 16);
    wgr_mac1_key(pub, key);
    cr_assert_arr_eq(key, want_key, 32, "HASH(\"mac1----\" || pub)");
    cr_assert_not(wgr_mac1_ok(key, msg, 116));
    memcpy(msg + 116, want_mac, 16);
    cr_assert(wgr_mac1_ok(key, msg, 116));
    msg[5] ^= 1;
    cr_assert_not(wgr_mac1_ok(key, msg, 116), "MAC1 covers the message");
    msg[5] ^= 1;
    memset(msg + 116, 0, 16);
    wgr_mac1_put(key, msg, 116);
    cr_assert_arr_eq(msg + 116, want_mac, 16);
}

Test(wgrelay_proto, key_parse)
{
    uint8_t k[32];
    cr_assert_eq(wgr_key_parse("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=", k), 0);
    cr_assert_eq(wgr_key_parse("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", k), -EINVAL);
    cr_assert_eq(wgr_key_parse("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA*=", k), -EINVAL);
    cr_assert_eq(wgr_key_parse("", k), -EINVAL);
}

/* ---------------------------------------------------------------- the peers file */

/* Three keys: A...=, B...=, C...= (byte 0 differs). */
static void key_b64(unsigned i, char out[45])
{
    snprintf(out, 45, "%cAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=", 'A' + (int)i * 4);
}

static struct wgr_peers *parse(const char *text)
{
    err[0] = '\0';
    return wgr_peers_parse(text, strlen(text), err, sizeof(err));
}

Test(wgrelay_peers, names_allow_lists_and_pairs)
{
    char k[4][45], text[512];
    for (unsigned i = 0; i < 4; i++)
        key_b64(i, k[i]);
    snprintf(text, sizeof(text),
             "# site links\n%s alpha beta   # alpha talks to beta only\n"
             "%s beta alpha %s\n\n%s gamma\n%s\n",
             k[0], k[1], k[3], k[2], k[3]);
    struct wgr_peers *ps = parse(text);
    cr_assert_not_null(ps, "%s", err);
    cr_assert_eq(ps->count, 4);
    cr_assert_str_eq(ps->peer[0].name, "alpha");
    cr_assert_str_eq(ps->peer[3].name, "", "no name");
    cr_assert(wgr_pair_allowed(ps, 0, 1));
    cr_assert(wgr_pair_allowed(ps, 1, 0));
    cr_assert_not(wgr_pair_allowed(ps, 0, 2), "alpha's list has no gamma");
    cr_assert_not(wgr_pair_allowed(ps, 2, 0), "both sides must allow");
    cr_assert(wgr_pair_allowed(ps, 1, 3), "beta names the fourth by key; it allows everyone");
    cr_assert_not(wgr_pair_allowed(ps, 1, 2));
    cr_assert(wgr_pair_allowed(ps, 2, 3), "no lists: everyone");
    cr_assert_not(wgr_pair_allowed(ps, 2, 2), "never itself");
    hd_snap_unref(&ps->snap);
}

Test(wgrelay_peers, bad_files_name_the_line)
{
    char k[2][45], text[512];
    key_b64(0, k[0]);
    key_b64(1, k[1]);
    cr_assert_null(parse("# c\nnot-a-key alpha\n"));
    cr_assert(strstr(err, "line 2") && strstr(err, "not a base64"), "%s", err);
    snprintf(text, sizeof(text), "%s a\n%s b\n%s c\n", k[0], k[1], k[0]);
    cr_assert_null(parse(text));
    cr_assert(strstr(err, "line 3") && strstr(err, "twice"), "%s", err);
    snprintf(text, sizeof(text), "%s a\n%s a\n", k[0], k[1]);
    cr_assert_null(parse(text));
    cr_assert(strstr(err, "line 2") && strstr(err, "name a"), "%s", err);
    snprintf(text, sizeof(text), "%s a nobody\n", k[0]);
    cr_assert_null(parse(text));
    cr_assert(strstr(err, "line 1") && strstr(err, "nobody"), "%s", err);
    snprintf(text, sizeof(text), "%s bad/name\n", k[0]);
    cr_assert_null(parse(text));
    cr_assert(strstr(err, "bad name"), "%s", err);
    struct wgr_peers *ps = parse("\n# nothing\n");
    cr_assert_not_null(ps, "an empty list is a list");
    cr_assert_eq(ps->count, 0);
    hd_snap_unref(&ps->snap);
}

/* ---------------------------------------------------------------- the routing table */

struct world {
    struct wgr_peers *ps;
    struct wgr_table *t;
    struct wgr_stats st;
    struct wgr_verdict v;
    uint64_t now;
};

static struct wgr_addr addr(uint16_t port)
{
    struct wgr_addr a = {.len = sizeof(struct sockaddr_in)};
    a.in4.sin_family = AF_INET;
    a.in4.sin_port = htons(port);
    a.in4.sin_addr.s_addr = htonl(0x7f000001);
    return a;
}

static void le32(uint8_t *p, uint32_t v)
{
    for (unsigned i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void le64(uint8_t *p, uint64_t v)
{
    le32(p, (uint32_t)v);
    le32(p + 4, (uint32_t)(v >> 32));
}

/* The three keys the worlds register (a, b, c). */
static void keys3(char k[3][45])
{
    for (unsigned i = 0; i < 3; i++)
        key_b64(i, k[i]);
}

static void world_init(struct world *w, const char *extra)
{
    char k[3][45], text[512];
    keys3(k);
    /* a and b talk; c is registered and allows everyone, but a and b do not allow it. */
    snprintf(text, sizeof(text), "%s a b\n%s b a\n%s c\n%s", k[0], k[1], k[2], extra);
    memset(w, 0, sizeof(*w));
    w->ps = parse(text);
    cr_assert_not_null(w->ps, "%s", err);
    w->t = wgr_table_create(w->ps, WGR_INDEX_SLOTS);
    cr_assert_not_null(w->t);
    wgr_table_set_rate(w->t, 0, 0); /* every initiation here comes from 127.0.0.1 */
    w->now = 1000;
}

static void world_fini(struct world *w)
{
    wgr_table_destroy(w->t);
    hd_snap_unref(&w->ps->snap);
}

static int input(struct world *w, const uint8_t *p, size_t len, uint16_t from_port)
{
    struct wgr_addr from = addr(from_port);
    wgr_table_input(w->t, p, len, &from, w->now, &w->v, &w->st);
    return w->v.drop;
}

static bool goes_to(const struct world *w, uint16_t port)
{
    struct wgr_addr a = addr(port);
    for (unsigned i = 0; i < w->v.count; i++)
        if (wgr_addr_eq(&w->v.to[i], &a))
            return true;
    return false;
}

static void initiation(uint8_t m[148], const struct wgr_peers *ps, unsigned to, uint32_t sender)
{
    memset(m, 0x5a, 148);
    m[0] = 1, m[1] = m[2] = m[3] = 0;
    le32(m + 4, sender);
    if (to != WGR_PEER_NONE)
        wgr_mac1_put(ps->peer[to].mac1_key, m, WGR_INITIATION_MAC1);
}

static void response(uint8_t m[92], const struct wgr_peers *ps, unsigned to, uint32_t sender,
                     uint32_t receiver)
{
    memset(m, 0xa5, 92);
    m[0] = 2, m[1] = m[2] = m[3] = 0;
    le32(m + 4, sender);
    le32(m + 8, receiver);
    if (to != WGR_PEER_NONE)
        wgr_mac1_put(ps->peer[to].mac1_key, m, WGR_RESPONSE_MAC1);
}

static void data(uint8_t m[48], uint32_t receiver, uint64_t counter)
{
    memset(m, 0x33, 48);
    m[0] = 4, m[1] = m[2] = m[3] = 0;
    le32(m + 4, receiver);
    le64(m + 8, counter);
}

enum { A = 0, B = 1, C = 2, PA = 40001, PB = 40002, PC = 40003, PX = 40009 };

/* a and b meet: a's first initiation finds no route (b unknown, no candidates), b's goes to the
 * candidate a, a answers; sessions 0xa1 (a's) and 0xb1 (b's). */
static void meet(struct world *w)
{
    uint8_t m[148];
    initiation(m, w->ps, B, 0xa0);
    cr_assert_eq(input(w, m, 148, PA), WGR_DROP_no_route);
    initiation(m, w->ps, A, 0xb1);
    cr_assert_eq(input(w, m, 148, PB), -1);
    cr_assert_eq(w->v.count, 1);
    cr_assert(goes_to(w, PA), "to the candidate a");
    cr_assert_eq(w->st.broadcast_sends, 1);
    uint8_t r[92];
    response(r, w->ps, B, 0xa1, 0xb1); /* MAC1 for the initiator b */
    cr_assert_eq(input(w, r, 92, PA), -1);
    cr_assert(goes_to(w, PB));
    cr_assert_eq(w->st.sessions, 1);
    cr_assert_eq(wgr_table_live_count(w->t), 2);
    cr_assert_eq(wgr_table_pending_count(w->t), 0);
}

/* Each test's world (criterion runs every test in a process of its own), set up by the
 * fixtures: fresh (a, b and c registered, no rate limit) or met (and a and b met). */
static struct world w;

static void fresh(void)
{
    world_init(&w, "");
}

static void met(void)
{
    world_init(&w, "");
    meet(&w);
}

static void gone(void)
{
    world_fini(&w);
}

Test(wgrelay_table, meet_then_data_both_ways, .init = met, .fini = gone)
{
    uint8_t d[48];
    data(d, 0xa1, 0); /* b -> a */
    cr_assert_eq(input(&w, d, 48, PB), -1);
    cr_assert(goes_to(&w, PA));
    data(d, 0xb1, 0); /* a -> b */
    cr_assert_eq(input(&w, d, 48, PA), -1);
    cr_assert(goes_to(&w, PB));
    data(d, 0xdead, 0);
    cr_assert_eq(input(&w, d, 48, PA), WGR_DROP_no_session);
    /* A known peer's initiation goes straight to the other. */
    uint8_t m[148];
    initiation(m, w.ps, B, 0xa2);
    cr_assert_eq(input(&w, m, 148, PA), -1);
    cr_assert_eq(w.v.count, 1);
    cr_assert(goes_to(&w, PB));
}

Test(wgrelay_table, roaming_follows_the_counter_and_refuses_replays, .init = met, .fini = gone)
{
    uint8_t d[48];
    for (uint64_t c = 0; c < 10; c++) {
        data(d, 0xb1, c);
        cr_assert_eq(input(&w, d, 48, PA), -1);
    }
    data(d, 0xb1, 5); /* a replay from elsewhere */
    cr_assert_eq(input(&w, d, 48, PX), WGR_DROP_stale_source);
    struct wgr_addr got, pa = addr(PA), px = addr(PX);
    cr_assert(wgr_table_peer_addr(w.t, A, &got) && wgr_addr_eq(&got, &pa), "a did not move");
    data(d, 0xb1, 10); /* a, from its new port */
    cr_assert_eq(input(&w, d, 48, PX), -1);
    cr_assert_eq(w.st.roamed, 1);
    cr_assert(wgr_table_peer_addr(w.t, A, &got) && wgr_addr_eq(&got, &px), "a moved");
    data(d, 0xa1, 0); /* b -> a reaches a's new address */
    cr_assert_eq(input(&w, d, 48, PB), -1);
    cr_assert(goes_to(&w, PX));
    data(d, 0xb1, 9); /* a late packet from the old port */
    cr_assert_eq(input(&w, d, 48, PA), WGR_DROP_stale_source);
}

Test(wgrelay_table, refused_pairs_and_unregistered_keys, .init = met, .fini = gone)
{
    uint8_t m[148], r[92];
    /* c (unknown address) initiates to a: forwarded; a's answer names c: the pair is refused. */
    initiation(m, w.ps, A, 0xc1);
    cr_assert_eq(input(&w, m, 148, PC), -1);
    cr_assert(goes_to(&w, PA));
    response(r, w.ps, C, 0xa9, 0xc1);
    cr_assert_eq(input(&w, r, 92, PA), WGR_DROP_pair_refused);
    cr_assert_eq(wgr_table_pending_count(w.t), 0, "the refused initiation is forgotten");
    /* An answer to an initiator no one registered (MAC1 for an unknown key). */
    initiation(m, w.ps, A, 0xd1);
    cr_assert_eq(input(&w, m, 148, PX), -1);
    response(r, w.ps, WGR_PEER_NONE, 0xa8, 0xd1);
    cr_assert_eq(input(&w, r, 92, PA), WGR_DROP_response_mac1);
    /* An initiation for no registered key. */
    initiation(m, w.ps, WGR_PEER_NONE, 0xe1);
    cr_assert_eq(input(&w, m, 148, PX), WGR_DROP_mac1_unknown);
    /* A known peer initiating to one it may not talk to is refused at once. */
    initiation(m, w.ps, C, 0xa3);
    cr_assert_eq(input(&w, m, 148, PA), WGR_DROP_pair_refused);
    initiation(m, w.ps, A, 0xa4);
    cr_assert_eq(input(&w, m, 148, PA), WGR_DROP_self);
    /* A response to nothing, garbage. */
    response(r, w.ps, A, 0x1, 0x12345);
    cr_assert_eq(input(&w, r, 92, PB), WGR_DROP_no_session);
    cr_assert_eq(input(&w, r, 91, PB), WGR_DROP_malformed);
    cr_assert_eq(w.st.drops[WGR_DROP_malformed], 1);
}

Test(wgrelay_table, handshake_rate_per_source, .init = fresh, .fini = gone)
{
    wgr_table_set_rate(w.t, 20, 5);
    uint8_t m[148];
    unsigned limited = 0;
    for (unsigned i = 0; i < 8; i++) {
        initiation(m, w.ps, A, 0x100 + i);
        limited += input(&w, m, 148, (uint16_t)(PX + i)) == WGR_DROP_rate_limited;
    }
    cr_assert_eq(limited, 3, "a burst of 5 per IP, whatever the port");
    w.now += 100; /* 20 per second: two more */
    initiation(m, w.ps, A, 0x200);
    cr_assert_neq(input(&w, m, 148, PX), WGR_DROP_rate_limited);
    initiation(m, w.ps, A, 0x201);
    cr_assert_neq(input(&w, m, 148, PX), WGR_DROP_rate_limited);
    initiation(m, w.ps, A, 0x202);
    cr_assert_eq(input(&w, m, 148, PX), WGR_DROP_rate_limited);
}

Test(wgrelay_table, entries_age_on_wireguards_timers, .init = met, .fini = gone)
{
    uint8_t m[148], d[48];
    initiation(m, w.ps, B, 0xa5);
    cr_assert_eq(input(&w, m, 148, PA), -1);
    cr_assert_eq(wgr_table_pending_count(w.t), 1);
    w.now += WGR_PENDING_AGE_MS + 1;
    wgr_table_sweep(w.t, w.now, &w.st);
    cr_assert_eq(wgr_table_pending_count(w.t), 0, "an unanswered initiation goes");
    cr_assert_eq(wgr_table_live_count(w.t), 2, "the session stays");
    w.now += WGR_LIVE_AGE_MS;
    data(d, 0xb1, 0);
    cr_assert_eq(input(&w, d, 48, PA), WGR_DROP_no_session, "past REJECT_AFTER_TIME");
    wgr_table_sweep(w.t, w.now, &w.st);
    cr_assert_eq(wgr_table_live_count(w.t), 0);
}

Test(wgrelay_table, peer_limit, .init = met, .fini = gone)
{
    uint8_t m[148], r[92];
    unsigned full = 0, made = 0;
    for (uint32_t i = 0; i < WGR_INDEX_PER_PEER + 10; i++) {
        initiation(m, w.ps, B, 0x10000 + i);
        cr_assert_eq(input(&w, m, 148, PA), -1);
        response(r, w.ps, A, 0x20000 + i, 0x10000 + i);
        int d = input(&w, r, 92, PB);
        full += d == WGR_DROP_peer_full;
        made += d == -1;
    }
    cr_assert_eq(made, WGR_INDEX_PER_PEER - 1, "meet made one");
    cr_assert_eq(full, 11);
    cr_assert_eq(w.st.drops[WGR_DROP_peer_full], 11);
}

Test(wgrelay_table, reload_keeps_what_stays_and_drops_what_goes, .init = met, .fini = gone)
{
    char k[3][45], text[512];
    keys3(k);
    /* b moves to the front, a stays, c goes: the a-b session survives under new ids. */
    snprintf(text, sizeof(text), "%s b a\n%s a b\n", k[1], k[0]);
    struct wgr_peers *np = parse(text);
    cr_assert_not_null(np, "%s", err);
    wgr_table_set_peers(w.t, np);
    cr_assert_eq(wgr_table_live_count(w.t), 2);
    uint8_t d[48];
    data(d, 0xb1, 0);
    cr_assert_eq(input(&w, d, 48, PA), -1);
    cr_assert(goes_to(&w, PB));
    /* Now a allows c only: the a-b session goes. */
    snprintf(text, sizeof(text), "%s b a\n%s a c\n%s c\n", k[1], k[0], k[2]);
    struct wgr_peers *np2 = parse(text);
    cr_assert_not_null(np2, "%s", err);
    wgr_table_set_peers(w.t, np2);
    cr_assert_eq(wgr_table_live_count(w.t), 0, "a pair no longer allowed loses its sessions");
    cr_assert_eq(input(&w, d, 48, PA), WGR_DROP_no_session);
    hd_snap_unref(&w.ps->snap);
    hd_snap_unref(&np->snap);
    w.ps = np2;
}

Test(wgrelay_table, a_full_table_refuses_and_recovers, .init = fresh, .fini = gone)
{
    wgr_table_destroy(w.t);
    w.t = wgr_table_create(w.ps, 16); /* 12 entries, 6 of them pending */
    wgr_table_set_rate(w.t, 0, 0);
    cr_assert_eq(wgr_table_live_max(w.t), 12);
    meet(&w);
    uint8_t m[148];
    unsigned full = 0;
    for (uint32_t i = 0; i < 10; i++) {
        initiation(m, w.ps, B, 0x300 + i);
        full += input(&w, m, 148, PA) == WGR_DROP_table_full;
    }
    cr_assert_eq(wgr_table_pending_count(w.t), 6);
    cr_assert_eq(full, 4);
    w.now += WGR_PENDING_AGE_MS + 1;
    wgr_table_sweep(w.t, w.now, &w.st);
    cr_assert_eq(wgr_table_pending_count(w.t), 0);
    initiation(m, w.ps, B, 0x400);
    cr_assert_eq(input(&w, m, 148, PA), -1, "room again once the pending ones aged");
    uint8_t d[48];
    data(d, 0xb1, 0);
    cr_assert_eq(input(&w, d, 48, PA), -1, "the session survived the deletions around it");
}

Test(wgrelay_table, a_flooding_peer_is_held_to_its_rate, .init = met, .fini = gone)
{
    wgr_table_set_peer_rate(w.t, 48000, 480); /* 1000 messages of 48 bytes a second, burst 10 */
    uint8_t d[48];
    unsigned sent = 0, limited = 0;
    for (uint64_t c = 0; c < 30; c++) {
        data(d, 0xb1, c);
        int r = input(&w, d, 48, PA);
        sent += r == -1, limited += r == WGR_DROP_peer_rate;
    }
    cr_assert_eq(sent, 10, "the burst");
    cr_assert_eq(limited, 20);
    data(d, 0xa1, 0);
    cr_assert_eq(input(&w, d, 48, PB), -1, "the other peer has its own bucket");
    w.now += 5; /* 5 ms: 5 more */
    for (uint64_t c = 30; c < 40; c++) {
        data(d, 0xb1, c);
        sent += input(&w, d, 48, PA) == -1;
    }
    cr_assert_eq(sent, 15);
}

Test(wgrelay_table, over_the_rate_a_cookie_then_mac2_passes, .init = fresh, .fini = gone)
{
    wgr_table_set_rate(w.t, 20, 1);
    wgr_table_set_cookies(w.t, true);
    uint8_t m[148];
    initiation(m, w.ps, A, 0x500);
    cr_assert_neq(input(&w, m, 148, PX), WGR_DROP_rate_limited);
    initiation(m, w.ps, A, 0x501);
    cr_assert_eq(input(&w, m, 148, PX), WGR_DROP_rate_limited);
    cr_assert(w.v.cookie, "answered with a cookie reply");
    cr_assert_eq(wgr_classify(w.v.reply, WGR_COOKIE_LEN), WGR_COOKIE);
    cr_assert_eq(wgr_le32(w.v.reply + 4), 0x501, "to the initiator's index");
    /* The initiator opens it with the responder's public key and the initiation's MAC1. */
    uint8_t cookie[16], wrong[16];
    cr_assert_eq(wgr_cookie_open(w.v.reply, w.ps->peer[A].cookie_key, m + 116, cookie), 0);
    cr_assert_eq(wgr_cookie_open(w.v.reply, w.ps->peer[B].cookie_key, m + 116, wrong), -EBADMSG);
    /* Its next initiation carries MAC2: proven, its own bucket, forwarded over the IP's rate. */
    initiation(m, w.ps, A, 0x502);
    wgr_mac2_put(cookie, m);
    cr_assert_neq(input(&w, m, 148, PX), WGR_DROP_rate_limited);
    cr_assert_not(w.v.cookie);
    cr_assert_eq(w.st.cookie_proven, 1);
    /* The same MAC2 from another port proves nothing: limited with the rest of the IP. */
    cr_assert_eq(input(&w, m, 148, PX + 1), WGR_DROP_rate_limited);
    cr_assert(w.v.cookie);
    /* Without cookie replies: dropped silently. */
    wgr_table_set_cookies(w.t, false);
    initiation(m, w.ps, A, 0x503);
    cr_assert_eq(input(&w, m, 148, PX + 2), WGR_DROP_rate_limited);
    cr_assert_not(w.v.cookie);
}
