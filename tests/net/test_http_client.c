/* test_http_client.c - net_http_client against a blocking server thread on a unix socket:
 * Content-Length body, chunked body (with and without trailers, and one chunk larger than the
 * connection's reassembly tail), an oversized body cut at resp_max (its first bytes and the status
 * still reported), a body that ends early, 101 as final, timeout. */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "harness.h"
#include <hd/net.h>
#include <hd/net_http_client.h>

static struct {
    char path[108];
    const char *answer; /* NULL: never answer */
    int lfd;
    int err;
    bool answered; /* done got r */
    uint16_t status;
    char body[256]; /* the body's first bytes */
    size_t body_len;
    size_t resp_max; /* 0: 64 */
    bool body_all_z; /* every body byte is 'z' */
    char req[1024];
} g;

static void *server(void *arg)
{
    (void)arg;
    int fd = accept(g.lfd, NULL, NULL);
    if (fd < 0)
        return NULL;
    size_t n = 0;
    while (n < sizeof(g.req) - 1 && strstr(g.req, "\r\n\r\nhello") == NULL) {
        ssize_t r = read(fd, g.req + n, sizeof(g.req) - 1 - n);
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    if (g.answer)
        (void)!write(fd, g.answer, strlen(g.answer));
    else
        sleep(2);
    close(fd);
    return NULL;
}

static void done(void *arg, int err, const struct net_http_result *r)
{
    struct hd_shard *s = arg;
    g.err = err;
    if (r) {
        g.answered = true;
        g.status = r->status;
        g.body_len = r->body_len;
        memcpy(g.body, r->body, r->body_len < sizeof(g.body) ? r->body_len : sizeof(g.body));
        g.body_all_z = true;
        for (size_t i = 0; i < r->body_len; i++)
            g.body_all_z &= r->body[i] == 'z';
    }
    hd_runtime_stop(hd_shard_runtime(s));
}

/* The socket layer under the test module: net_module with this run's options. */
static const struct hd_module *const net_layers[] = {&net_module};

static void *const *net_layers_args(void)
{
    static struct net_shard_options opt;
    static void *args[] = {&opt};
    opt = (struct net_shard_options){0};
    return args;
}

#define NET_LAYERS .layers = net_layers, .layers_args = net_layers_args(), .layers_count = 1

static void body(struct hd_shard *s, void *arg)
{
    (void)arg;
    struct net_addr a;
    cr_assert_eq(net_addr_unix(g.path, &a), 0);
    struct net_http_request rq = {.method = "POST",
                                  .target = NET_HTTP_LIT("/x"),
                                  .host = NET_HTTP_LIT("h"),
                                  .body = "hello",
                                  .body_len = 5,
                                  .timeout_ms = 700,
                                  .resp_max = g.resp_max ? g.resp_max : 64};
    cr_assert_eq(net_http_client_start(s, &a, &rq, done, s, NULL), 0);
}

static void run_max(const char *answer, size_t resp_max)
{
    memset(&g, 0, sizeof(g));
    g.answer = answer;
    g.resp_max = resp_max;
    snprintf(g.path, sizeof(g.path), "/tmp/hd_http_client_%d.sock", (int)getpid());
    unlink(g.path);
    g.lfd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un u = {.sun_family = AF_UNIX};
    strcpy(u.sun_path, g.path);
    cr_assert_eq(bind(g.lfd, (struct sockaddr *)&u, sizeof(u)), 0);
    cr_assert_eq(listen(g.lfd, 4), 0);
    pthread_t t;
    pthread_create(&t, NULL, server, NULL);
    struct hdt_options o = {.shards = 1, NET_LAYERS};
    cr_assert_eq(hdt_run(&o, body, NULL, NULL), 0);
    pthread_join(t, NULL);
    close(g.lfd);
    unlink(g.path);
    cr_assert(strstr(g.req, "POST /x HTTP/1.1\r\n") == g.req, "request: %s", g.req);
    cr_assert(strstr(g.req, "Content-Length: 5\r\n") != NULL);
}

static void run(const char *answer)
{
    run_max(answer, 0);
}

Test(test_http_client, content_length)
{
    run("HTTP/1.1 200 OK\r\nContent-Length: 15\r\n\r\n{\"Allow\": true}");
    cr_assert_eq(g.err, 0);
    cr_assert_eq(g.status, 200);
    cr_assert_eq(g.body_len, 15);
    cr_assert(memcmp(g.body, "{\"Allow\": true}", 15) == 0);
}

Test(test_http_client, chunked)
{
    run("HTTP/1.1 403 Forbidden\r\nTransfer-Encoding: chunked\r\n\r\n"
        "5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\n\r\n");
    cr_assert_eq(g.err, 0);
    cr_assert_eq(g.status, 403);
    cr_assert_eq(g.body_len, 12);
    cr_assert(memcmp(g.body, "hello, world", 12) == 0);
}

Test(test_http_client, chunked_trailers)
{
    run("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        "3\r\nabc\r\n0\r\nX-Checksum: 1\r\nX-Other: 2\r\n\r\n");
    cr_assert_eq(g.err, 0);
    cr_assert_eq(g.status, 200);
    cr_assert_eq(g.body_len, 3);
    cr_assert(memcmp(g.body, "abc", 3) == 0);
}

/* Over resp_max (64): the first 64 bytes and the status come with -EFBIG (a caller judges what
 * arrived; it used to get no answer at all). */
Test(test_http_client, oversized_cut)
{
    run("HTTP/1.1 200 OK\r\nContent-Length: 65\r\n\r\n"
        "zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzy");
    cr_assert_eq(g.err, -EFBIG);
    cr_assert(g.answered);
    cr_assert_eq(g.status, 200);
    cr_assert_eq(g.body_len, 64);
    cr_assert(g.body_all_z);
}

Test(test_http_client, oversized_until_close_cut)
{
    run("HTTP/1.1 403 Forbidden\r\n\r\n"
        "zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz");
    cr_assert_eq(g.err, -EFBIG);
    cr_assert(g.answered);
    cr_assert_eq(g.status, 403);
    cr_assert_eq(g.body_len, 64);
}

Test(test_http_client, body_ends_early)
{
    run("HTTP/1.1 200 OK\r\nContent-Length: 40\r\n\r\n{\"Allow\": true}");
    cr_assert_eq(g.err, -ECONNRESET);
    cr_assert(g.answered);
    cr_assert_eq(g.body_len, 15);
    cr_assert(memcmp(g.body, "{\"Allow\": true}", 15) == 0);
}

/* 101 is final (as for Go's client): no other response is waited for. */
Test(test_http_client, switching_protocols_is_final)
{
    run("HTTP/1.1 101 Switching Protocols\r\n\r\n");
    cr_assert_eq(g.err, 0, "err %d", g.err);
    cr_assert(g.answered);
    cr_assert_eq(g.status, 101);
    cr_assert_eq(g.body_len, 0);
}

Test(test_http_client, timeout)
{
    run(NULL);
    cr_assert_eq(g.err, -ETIMEDOUT);
    cr_assert(!g.answered);
}

/* A chunk longer than the connection keeps of unconsumed bytes (its 64 KiB reassembly tail):
 * the data passes through as it arrives (it used to wait for the whole chunk and overflow). */
#define BIG_CHUNK (100 << 10)

Test(test_http_client, chunk_bigger_than_the_tail)
{
    static char answer[BIG_CHUNK + 256];
    int n = snprintf(answer, sizeof(answer),
                     "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n", BIG_CHUNK);
    memset(answer + n, 'z', BIG_CHUNK);
    strcpy(answer + n + BIG_CHUNK, "\r\n3\r\nzzz\r\n0\r\n\r\n");
    run_max(answer, 2 * BIG_CHUNK);
    cr_assert_eq(g.err, 0, "err %d", g.err);
    cr_assert_eq(g.status, 200);
    cr_assert_eq(g.body_len, BIG_CHUNK + 3);
    cr_assert(g.body_all_z);
}
