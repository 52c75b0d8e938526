/* server_frames.h - the accounts behind the fair shares of the frame pools (server_frames.c:
 * connections; server_frame_addrs.c: source addresses). Private to those two files, and to
 * server_peers.c for a watcher's presence notices. */
#ifndef SERVER_FRAMES_H
#define SERVER_FRAMES_H

#include "server.h"

/* The frames of one source address on this shard: the sum over its connections' accounts.
 * Lives (in the shard's table) while accounts point at it. */
struct srv_frame_addr {
    uint8_t ip[16]; /* srv_addr_key, an IPv6 address cut to its /64 */
    uint32_t frames[HD_FRAME_CLASSES_MAX];
    uint32_t accounts; /* 0: free to reuse (taken out of the table at its next rebuild) */
};

/* The frames one connection's packets hold now. A closed connection's account lives on
 * (orphan) until its last frame returns. From the shard's accounts slab. */
struct srv_account {
    uint32_t frames[HD_FRAME_CLASSES_MAX];
    struct srv_frame_addr *addr; /* never NULL (the spill entry when the table had no room) */
    bool orphan;
};

/* The table (with the spill entry) at shard start; fini frees it (entries stay in their slab). */
int srv_frame_addrs_init(struct srv_shard *ds);
void srv_frame_addrs_fini(struct srv_shard *ds);
/* The entry of peer's address (counted: accounts + 1), or the shard's spill entry, which
 * every connection whose entry could not be made shares. At an account's making. */
struct srv_frame_addr *srv_frame_addr_enter(struct srv_shard *ds, const struct net_addr *peer);
/* An account pointing at e was freed (any time, also after the shard's relay state is gone:
 * it touches e only). */
static inline void srv_frame_addr_leave(struct srv_frame_addr *e)
{
    HD_ASSERT(e->accounts > 0);
    e->accounts--;
}

/* Why no frame was given: the reserve (or no frame at all), cl's share, its address's share. */
enum srv_frames_why { SRV_FRAMES_OK, SRV_FRAMES_RESERVE, SRV_FRAMES_SHARE, SRV_FRAMES_ADDR };
/* A frame for presence notices to the watcher cl, on the same terms as a client's packet (its
 * share, its address's, never the reserve), or NULL with *why (counted by the caller). A mesh
 * peer's own packets (srv_frame_get_data) are not charged. */
struct hd_frame *srv_frame_get_notice(struct srv_client *cl, size_t size, enum srv_frames_why *why);

#endif /* SERVER_FRAMES_H */
