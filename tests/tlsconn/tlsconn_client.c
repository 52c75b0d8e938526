/* tlsconn_client.c - the line client's handlers (tlsconn_client.h): collect the answer line, then
 * close; on close, record why and stop the runtime. Runs on the connection's shard; owns tc,
 * which the test thread reads once the runtime stopped. */
#include "tlsconn_client.h"

#include <string.h>

#include <hd/hd.h>

struct tc_state tc;

static ssize_t tc_data(struct net_conn *c, const uint8_t *data, size_t len)
{
    size_t n = len < sizeof(tc.got) - 1 - tc.got_len ? len : sizeof(tc.got) - 1 - tc.got_len;
    memcpy(tc.got + tc.got_len, data, n);
    tc.got_len += n;
    tc.got[tc.got_len] = '\0';
    if (strchr(tc.got, '\n'))
        net_conn_close(c, 0, false);
    return (ssize_t)len;
}

static void tc_close(struct net_conn *c, int reason)
{
    atomic_store(&tc.reason, reason);
    atomic_store(&tc.closed, 1);
    hd_runtime_stop(hd_shard_runtime(net_conn_shard(c)));
}

const struct net_conn_handler tc_handler = {.on_data = tc_data, .on_close = tc_close};
