/* resolve.c - name lookups for shards (net_resolve_start): getaddrinfo on a detached thread of
 * its own, the answer posted back to the shard (hd_runtime_post), so a slow or dead DNS server
 * never stalls a reactor. Every lookup in flight is on one list under one lock (set-up path
 * only): net_shard_fini orphans its shard's lookups, so a thread whose DNS answers after the
 * runtime is gone frees its lookup instead of posting to a runtime that no longer exists. A
 * lookup is owned by its thread until the post is accepted, then by the shard. */
#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "net_impl.h"

/* A full shard inbox: retry the post this often, at most this many times (the shard drains
 * its inbox every tick, so this only waits out a burst). */
#define RESOLVE_POST_RETRY_NS    1000000L
#define RESOLVE_POST_RETRIES_MAX 1000

struct net_resolve {
    struct net_resolve *prev, *next; /* in flight (under lock) */
    struct hd_shard *s;              /* NULL once orphaned by net_shard_fini */
    struct hd_runtime *rt;
    unsigned shard;
    net_resolve_fn *done;
    void *arg;
    atomic_bool cancelled;
    uint16_t port;
    char host[NET_RESOLVE_HOST_MAX + 1];
    int rc;
    unsigned count;
    struct net_addr addrs[NET_RESOLVE_ADDRS_MAX];
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct net_resolve *in_flight;

static void unlink_locked(struct net_resolve *r)
{
    if (r->prev)
        r->prev->next = r->next;
    else
        in_flight = r->next;
    if (r->next)
        r->next->prev = r->prev;
}

static void deliver(struct hd_shard *s, void *arg)
{
    struct net_resolve *r = arg;
    pthread_mutex_lock(&lock);
    unlink_locked(r);
    pthread_mutex_unlock(&lock);
    if (!atomic_load(&r->cancelled))
        r->done(s, r->rc, r->addrs, r->count, r->arg);
    free(r);
}

unsigned net_addrs_from_addrinfo(const struct addrinfo *ai, struct net_addr *out, unsigned cap)
{
    unsigned n = 0;
    for (const struct addrinfo *a = ai; a && n < cap; a = a->ai_next) {
        if (a->ai_addrlen > sizeof(out[0].ss))
            continue;
        struct net_addr *o = &out[n++];
        memset(o, 0, sizeof(*o));
        memcpy(&o->ss, a->ai_addr, a->ai_addrlen);
        o->len = a->ai_addrlen;
    }
    return n;
}

static void lookup(struct net_resolve *r)
{
    char port[8];
    snprintf(port, sizeof(port), "%u", r->port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int rc = getaddrinfo(r->host, port, &hints, &res);
    if (rc != 0) {
        r->rc = rc == EAI_AGAIN ? -EAGAIN : -ENOENT;
        return;
    }
    r->count = net_addrs_from_addrinfo(res, r->addrs, NET_RESOLVE_ADDRS_MAX);
    freeaddrinfo(res);
    r->rc = r->count ? 0 : -ENOENT;
}

static void *resolve_thread(void *arg)
{
    struct net_resolve *r = arg;
    lookup(r);
    for (int i = 0; i < RESOLVE_POST_RETRIES_MAX; i++) {
        pthread_mutex_lock(&lock);
        int rc = r->s ? hd_runtime_post(r->rt, r->shard, deliver, r) : -ESHUTDOWN;
        if (rc != -EAGAIN && rc != 0)
            unlink_locked(r);
        pthread_mutex_unlock(&lock);
        if (rc == 0)
            return NULL; /* the shard owns r now */
        if (rc != -EAGAIN) {
            free(r); /* its shard is gone */
            return NULL;
        }
        nanosleep(&(struct timespec){.tv_nsec = RESOLVE_POST_RETRY_NS}, NULL);
    }
    hd_log(HD_LOG_WARN, "resolve %s: the shard did not take the answer: dropped", r->host);
    pthread_mutex_lock(&lock);
    unlink_locked(r);
    pthread_mutex_unlock(&lock);
    free(r);
    return NULL;
}

void net_resolve_shard_fini(struct hd_shard *s)
{
    pthread_mutex_lock(&lock);
    for (struct net_resolve *r = in_flight; r; r = r->next)
        if (r->s == s)
            r->s = NULL;
    pthread_mutex_unlock(&lock);
}

int net_resolve_start(struct hd_shard *s, const char *host, uint16_t port, net_resolve_fn *done,
                      void *arg, struct net_resolve **out)
{
    size_t len = strlen(host);
    if (len > NET_RESOLVE_HOST_MAX)
        return -ENAMETOOLONG;
    struct net_resolve *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return -ENOMEM;
    r->s = s;
    r->rt = hd_shard_runtime(s);
    r->shard = hd_shard_id(s);
    r->done = done;
    r->arg = arg;
    r->port = port;
    memcpy(r->host, host, len + 1);
    atomic_init(&r->cancelled, false);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_mutex_lock(&lock);
    r->next = in_flight;
    if (in_flight)
        in_flight->prev = r;
    in_flight = r;
    pthread_t t;
    int rc = pthread_create(&t, &attr, resolve_thread, r);
    if (rc != 0)
        unlink_locked(r);
    pthread_mutex_unlock(&lock);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        free(r);
        return -rc;
    }
    *out = r;
    return 0;
}

void net_resolve_cancel(struct net_resolve *r)
{
    atomic_store(&r->cancelled, true);
}
