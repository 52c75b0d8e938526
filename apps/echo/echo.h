/* echo.h - hderp-echo's parts: options (echo_opts.c) and the pinger (echo_ping.c). */
#ifndef ECHO_H
#define ECHO_H

#include <stdbool.h>
#include <stdint.h>

#include "derp_client.h"
#include "echo_probe.h"
#include <hd/hd.h>

/* Payload: echo_probe.h ("HDPG" magic, sequence, send time, zero padding). */
#define ECHO_SIZE_MAX  DERP_PACKET_LEN_MAX
#define ECHO_COUNT_MAX 10000000u /* the seen-bitmap is count bits */
#define ECHO_BURST_MAX 1000u     /* packets one tick may send to catch up with the rate */
#define ECHO_TICK_MS   1u

struct echo_opts {
    const char *mode; /* "echo" or "ping" */
    const char *server;
    struct derp_client_url url;
    const char *key_file, *ca_file;
    bool insecure, json;
    struct derp_pubkey peer;
    uint32_t count, warmup, size;
    double rate_pps; /* 0: one packet per interval_ms */
    uint32_t interval_ms;
    uint32_t timeout_ms; /* wait for the last echoes */
    uint64_t echo_dropped;
};

struct echo_ping_state {
    struct derp_client *client;
    struct hd_shard *s;
    const struct echo_opts *o;
    struct hd_timer tick;
    uint64_t start_ns, end_ns, interval_ns;
    uint64_t sent, send_failed;
    struct echo_probe_rx rx; /* echoes: counts and round trips after the warm-up */
    bool ready, sending_done, done, peer_gone;
};

/* 0 run, 1 help printed, -1 bad flags (message printed). */
int echo_opts_parse(int argc, char **argv, struct echo_opts *o);

void echo_ping_init(struct echo_ping_state *p, const struct echo_opts *o, struct hd_shard *s);
void echo_ping_ready(struct derp_client *k, const struct derp_server_info *info);
void echo_ping_packet(struct derp_client *k, const struct derp_pubkey *src, const uint8_t *data,
                      size_t len);
void echo_ping_peer_gone(struct derp_client *k, const struct derp_pubkey *peer, uint8_t reason);
void echo_ping_stop(struct echo_ping_state *p);
/* Prints the summary (or JSON); returns 0, or -1 when the run measured nothing. */
int echo_ping_report(struct echo_ping_state *p, const struct echo_opts *o);

#endif
