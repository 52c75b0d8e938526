/* fuzz_proxy_parse.c - libFuzzer target for the PROXY protocol parser (net/proxy.c). Input: the
 * bytes a proxy (or anyone) sent first on a connection. Beyond "no crash, no sanitizer report"
 * it checks what the parser promises: an accepted header is at most its version's maximum and
 * no longer than the input; every strict prefix of an accepted header asks for more bytes
 * (-EAGAIN) and the same bytes with anything after them parse the same; an error names a reason;
 * accepted TLVs walk to their end; a non-local header has IPv4 or IPv6 addresses; an accepted
 * v1 line is printable US-ASCII up to its CRLF (no NUL to cut an address short). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <hd/net_proxy.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #cond);           \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct net_proxy_header h, h2;
    const char *why = NULL;
    ssize_t n = net_proxy_parse(data, size, &h, &why);
    if (n == -EAGAIN)
        return 0;
    if (n < 0) {
        CHECK(n == -EPROTO && why != NULL && why[0] != '\0');
        return 0;
    }
    CHECK((size_t)n <= size);
    CHECK(h.version == 1 ? (size_t)n <= NET_PROXY_V1_LEN_MAX : (size_t)n <= NET_PROXY_V2_LEN_MAX);
    if (!h.local)
        CHECK(h.src.sa.sa_family == AF_INET || h.src.sa.sa_family == AF_INET6);
    if (h.version == 1)
        for (size_t k = 0; k + 2 < (size_t)n; k++)
            CHECK(data[k] >= 0x20 && data[k] <= 0x7E);
    if (h.version == 2) {
        CHECK(h.tlv_off + h.tlv_len == (size_t)n);
        size_t off = 0;
        uint8_t type;
        const uint8_t *v;
        uint16_t vlen;
        int rc;
        while ((rc = net_proxy_tlv_next(data + h.tlv_off, h.tlv_len, &off, &type, &v, &vlen)) == 1)
            ;
        CHECK(rc == 0 && off == h.tlv_len);
    }
    for (size_t k = 0; k < (size_t)n; k++)
        CHECK(net_proxy_parse(data, k, &h2, &why) == -EAGAIN);
    CHECK(net_proxy_parse(data, (size_t)n, &h2, &why) == n);
    CHECK(memcmp(&h.src, &h2.src, sizeof(h.src)) == 0 && h.local == h2.local);
    return 0;
}
