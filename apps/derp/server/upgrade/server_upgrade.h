/* server_upgrade.h - the zero-downtime upgrade (server_upgrade.c, server_upgrade_cmd.c): SIGUSR2
 * makes the running server start its binary again and hand it the listening sockets. The
 * protocol is in docs/ARCHITECTURE.md ("Upgrades"). */
#ifndef SERVER_UPGRADE_H
#define SERVER_UPGRADE_H

#include <stdint.h>

#include <hd/net.h>

struct srv_config;

/* What a message hands over: the claims of -a and -http-port (index 0, 1), and per shard (the
 * index) its -a listener, its -http-port listener, its STUN socket. */
enum srv_upgrade_kind {
    SRV_UP_CLAIM,
    SRV_UP_LISTEN,
    SRV_UP_HTTP,
    SRV_UP_STUN,
    SRV_UP_KINDS,
};

/* Main thread, before the runtime: the state of both roles. argv is kept (the successor gets
 * the same). pid_file: NULL or --pid-file. timeout_ms: how long a successor may take to say
 * it accepts. 0 or -ENOMEM. */
int srv_upgrade_init(struct srv_config *cfg, char **argv, const char *pid_file,
                     uint32_t timeout_ms);
/* The claims main made (-1: none), now the upgrade's: handed over, or closed at fini. */
void srv_upgrade_claims(struct srv_config *cfg, const int claims[2]);
/* Main thread, before the runtime: when this process was started by a predecessor
 * (NET_HANDOVER_ENV), receive its sockets. 1 (received: the claims are in place, do not claim
 * again), 0 (a normal start), -1 (a bad hand-over: logged; exit, the old process keeps
 * serving). */
int srv_upgrade_receive(struct srv_config *cfg);
/* Shard thread, shard_init: the inherited socket of this kind for this shard (now the
 * caller's), or -1 (bind one). In a normal start, srv_upgrade_note records the shard's own
 * (the shard keeps owning it). Each shard touches only its own slots; the main thread reads
 * them after hd_runtime_start. */
int srv_upgrade_take(const struct srv_config *cfg, enum srv_upgrade_kind kind, unsigned shard);
void srv_upgrade_note(const struct srv_config *cfg, enum srv_upgrade_kind kind, unsigned shard,
                      int fd);
/* Main thread, once the runtime started: the pid file; in a successor, the descriptors it
 * did not use closed, READY sent to the predecessor, and a thread that re-arms the accepts
 * when the predecessor stopped accepting and when it is gone. */
void srv_upgrade_started(struct srv_config *cfg, struct hd_runtime *rt);
/* Main thread, on SIGUSR2: start the successor on a thread of its own (one at a time). */
void srv_upgrade_signal(struct srv_config *cfg, struct hd_runtime *rt);
/* Main thread, after hd_runtime_wait and before the runtime is destroyed: the upgrade's thread
 * (either role) is told to give up and joined. */
void srv_upgrade_stop(struct srv_config *cfg);
/* Main thread, after hd_runtime_wait: joins the thread (a hand-over still waiting is
 * abandoned: its successor is killed), closes what is left, removes the pid file if it is
 * still ours. */
void srv_upgrade_fini(struct srv_config *cfg);

/* server_upgrade_cmd.c: `hderp-server upgrade --pid-file F [--timeout D]`. The exit code. */
int srv_upgrade_cmd_main(int argc, char **argv);
/* The pid a pid file names, or -1. */
long srv_upgrade_pid_read(const char *path);

#endif
