/* fuzz_upgrade_record.c - libFuzzer target for an upgrade's client record, as the successor
 * reads it (srv_live_session_parse in apps/derp/server/upgrade/server_live.c, then net_export_parse
 * in net/export.c on the part it leaves for net). Input: a whole record. Invariants: a record that
 * parses names a key inside it, at most SRV_SOURCES_MAX sources that fit in it, only the known
 * flags, a splitter skip no longer than its frame, and net's part is the rest of the record; a blob
 * net accepts has every section inside it, within its bound, and its tails within the connection's
 * own tail limit. */
#include <string.h>

#include "fuzz_util.h"
#include "net_impl.h"
#include "upgrade/server_live.h"

static bool inside(const uint8_t *base, size_t len, const uint8_t *p, size_t n)
{
    return n == 0 || (p >= base && n <= len && (size_t)(p - base) <= len - n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct srv_live_session ss;
    if (srv_live_session_parse(data, size, &ss) != 0)
        return 0;
    CHECK(srv_live_record_key(data, size) == ss.key && inside(data, size, ss.key, DERP_KEY_LEN));
    CHECK(ss.count <= SRV_SOURCES_MAX && inside(data, size, ss.prefixes, (size_t)ss.count * 8));
    CHECK(ss.flags <= 255u && ss.port <= 65535u && ss.sp[3] <= ss.sp[2]);
    CHECK(ss.blob + ss.blob_len == data + size);
    struct net_export_view v;
    if (net_export_parse(ss.blob, ss.blob_len, &v) != 0)
        return 0;
    CHECK(v.codec_len <= NET_EXPORT_CODEC_MAX &&
          inside(ss.blob, ss.blob_len, v.codec, v.codec_len));
    CHECK(v.rx_tail_len <= v.opt.rx_tail_max && v.raw_tail_len <= v.opt.rx_tail_max);
    CHECK(inside(ss.blob, ss.blob_len, v.rx_tail, v.rx_tail_len));
    CHECK(inside(ss.blob, ss.blob_len, v.raw_tail, v.raw_tail_len));
    CHECK(v.received_len <= NET_EXPORT_RECEIVED_MAX &&
          inside(ss.blob, ss.blob_len, v.received, v.received_len));
    CHECK(v.plain.at <= ss.blob_len && v.wire.at <= ss.blob_len);
    CHECK(v.opt.send_low_bytes <= v.opt.send_high_bytes && v.peer.len <= sizeof(v.peer.ss));
    return 0;
}
