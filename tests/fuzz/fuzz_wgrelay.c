/* fuzz_wgrelay.c - libFuzzer target for hderp-wgrelay's packet classifier, peers file and
 * routing table (apps/wgrelay). The first byte picks what the rest is:
 *  - even: a peers file's text; invariants: a list that parses has its peers' keys unique and its
 *    pair relation symmetric and irreflexive;
 *  - odd: a sequence of datagrams from a few sources into a table of three registered peers,
 *    each record [ctl][source][time step][length u16][bytes]: ctl may make the record a
 *    well-shaped message of a type, give it a valid MAC1 for one of the peers, put small indexes
 *    in it (so sessions form and meet) and run the sweep. Invariants: every datagram is either
 *    forwarded (to at most WGR_CANDIDATES_MAX addresses) or dropped with one reason, the counters
 *    add up, the table stays within its bounds, and a cookie reply only answers a rate-limited
 *    initiation. */
#include <string.h>

#include "fuzz_util.h"
#include "wgr.h"

static const char peers_text[] = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA= a b\n"
                                 "BAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA= b a\n"
                                 "CAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA= c\n";

static void fuzz_peers(const uint8_t *data, size_t size)
{
    char err[256];
    struct wgr_peers *ps = wgr_peers_parse((const char *)data, size, err, sizeof(err));
    if (ps == NULL)
        return;
    CHECK(ps->count <= WGR_PEERS_MAX);
    for (unsigned i = 0; i < ps->count && i < 64; i++) {
        CHECK(wgr_peer_find(ps, ps->peer[i].pub) == i);
        CHECK(!wgr_pair_allowed(ps, i, i));
        for (unsigned j = 0; j < ps->count && j < 64; j++)
            CHECK(wgr_pair_allowed(ps, i, j) == wgr_pair_allowed(ps, j, i));
    }
    hd_snap_unref(&ps->snap);
}

static const size_t shape_len[5] = {0, WGR_INITIATION_LEN, WGR_RESPONSE_LEN, WGR_COOKIE_LEN, 48};

/* Make the record a message of type (ctl & 7) % 5 (0: as it is), with small indexes and a MAC1. */
static size_t shape(uint8_t *p, size_t len, uint8_t ctl, const struct wgr_peers *ps)
{
    unsigned type = (ctl & 7u) % 5u;
    if (type == 0)
        return len;
    if (type != WGR_DATA || len < shape_len[type])
        len = shape_len[type];
    p[0] = (uint8_t)type, p[1] = p[2] = p[3] = 0;
    if (ctl & 0x08) { /* small indexes: sessions form and meet */
        for (unsigned off = 4; off <= 8; off += 4)
            p[off + 1] = p[off + 2] = p[off + 3] = 0;
    }
    unsigned peer = (ctl >> 4) & 3u;
    if (peer < 3 && type == WGR_INITIATION)
        wgr_mac1_put(ps->peer[peer].mac1_key, p, WGR_INITIATION_MAC1);
    if (peer < 3 && type == WGR_RESPONSE)
        wgr_mac1_put(ps->peer[peer].mac1_key, p, WGR_RESPONSE_MAC1);
    return len;
}

static void fuzz_table(struct fuzz_in *in)
{
    char err[256];
    struct wgr_peers *ps = wgr_peers_parse(peers_text, sizeof(peers_text) - 1, err, sizeof(err));
    CHECK(ps != NULL);
    /* A small table: full tables, wrapped probe runs and deletions inside them are reachable. */
    struct wgr_table *t = wgr_table_create(ps, 64);
    CHECK(t != NULL);
    static struct wgr_stats st;
    static struct wgr_verdict v;
    memset(&st, 0, sizeof(st));
    uint64_t now = 1, forwarded = 0, dropped = 0;
    static uint8_t p[WGR_DATAGRAM_MAX];
    for (unsigned n = 0; in->len > 0 && n < 256; n++) {
        uint8_t ctl = fuzz_u8(in), src = fuzz_u8(in), step = fuzz_u8(in);
        size_t len = fuzz_u16(in) % (WGR_DATAGRAM_MAX + 1);
        memset(p, 0, sizeof(p));
        size_t take = len < in->len ? len : in->len;
        memcpy(p, in->p, take);
        in->p += take, in->len -= take;
        len = shape(p, len, ctl, ps);
        now += (uint64_t)step * 250u;
        if (ctl & 0x40) {
            wgr_table_sweep(t, now, &st);
            if (ctl & 0x80) {
                wgr_table_set_rate(t, src & 1 ? 0 : 20, 5);
                wgr_table_set_cookies(t, src & 2);
            }
        }
        struct wgr_addr from = {.len = sizeof(struct sockaddr_in)};
        from.in4.sin_family = AF_INET;
        from.in4.sin_port = (uint16_t)(1000 + (src & 7));
        from.in4.sin_addr.s_addr = src & 8 ? 0x0100007f : 0x0200007f;
        wgr_table_input(t, p, len, &from, now, &v, &st);
        CHECK(v.count <= WGR_CANDIDATES_MAX);
        CHECK((v.drop >= 0) == (v.count == 0));
        CHECK(v.drop < (int)WGR_DROP_COUNT);
        CHECK(!v.cookie || (v.drop == WGR_DROP_rate_limited &&
                            wgr_classify(v.reply, WGR_COOKIE_LEN) == WGR_COOKIE));
        forwarded += v.count > 0, dropped += v.drop >= 0;
        CHECK(wgr_table_live_count(t) + wgr_table_pending_count(t) <= wgr_table_live_max(t));
        CHECK(wgr_table_pending_count(t) <= WGR_PENDING_MAX);
        CHECK(v.drop != WGR_DROP_peer_full || wgr_table_live_count(t) >= 2);
    }
    uint64_t drops = 0;
    for (unsigned d = 0; d < WGR_DROP_COUNT; d++)
        drops += st.drops[d];
    CHECK(drops == dropped);
    CHECK(st.received == forwarded + dropped);
    wgr_table_sweep(t, now + WGR_LIVE_AGE_MS + WGR_ADDR_AGE_MS + 1, &st);
    CHECK(wgr_table_live_count(t) == 0 && wgr_table_pending_count(t) == 0);
    wgr_table_destroy(t);
    hd_snap_unref(&ps->snap);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    if ((data[0] & 1) == 0) {
        fuzz_peers(data + 1, size - 1);
        return 0;
    }
    struct fuzz_in in = {data + 1, size - 1};
    fuzz_table(&in);
    return 0;
}
