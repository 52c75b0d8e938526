/* pipe_stream.h - the byte stream the kit_pipe tests send through a pipe over real sockets: a
 * pattern in which a lost, doubled or reordered byte shows, written by one client and checked
 * by the other, and the short answer that comes back the other way. Test threads (blocking). */
#ifndef PIPE_STREAM_H
#define PIPE_STREAM_H

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define PIPE_STREAM_CHUNK (64u * 1024)

static inline uint8_t pipe_stream_byte(uint64_t i)
{
    return (uint8_t)((i * 2654435761u) >> 13);
}

/* Writes bytes of the pattern on fd (in PIPE_STREAM_CHUNK writes), half-closes, then reads to
 * the end: true when every write went and the answer was "bye" (else says why on stderr). */
static inline bool pipe_stream_send(int fd, uint64_t bytes)
{
    static uint8_t buf[PIPE_STREAM_CHUNK];
    bool ok = true;
    for (uint64_t off = 0; ok && off < bytes; off += sizeof(buf)) {
        for (size_t i = 0; i < sizeof(buf); i++)
            buf[i] = pipe_stream_byte(off + i);
        ok = write(fd, buf, sizeof(buf)) == (ssize_t)sizeof(buf);
    }
    ok = ok && shutdown(fd, SHUT_WR) == 0;
    char got[8] = {0};
    size_t n = 0;
    ssize_t r;
    while (ok && n < sizeof(got) - 1 && (r = read(fd, got + n, sizeof(got) - 1 - n)) > 0)
        n += (size_t)r;
    if (!(ok && strcmp(got, "bye") == 0))
        fprintf(stderr, "writer: ok %d, got \"%s\" (%zu bytes, errno %d)\n", ok, got, n, errno);
    return ok && strcmp(got, "bye") == 0;
}

/* Reads fd to its end in reads of up to chunk bytes (<= PIPE_STREAM_CHUNK), resting rest_us
 * after each 64 KiB when rest_us > 0 (a slow reader), checking every byte against the pattern;
 * then answers "bye". True when exactly bytes came, all right, and the answer went. */
static inline bool pipe_stream_recv(int fd, uint64_t bytes, size_t chunk, unsigned rest_us)
{
    static uint8_t buf[PIPE_STREAM_CHUNK];
    bool ok = chunk <= sizeof(buf);
    uint64_t got = 0;
    ssize_t r;
    while (ok && (r = read(fd, buf, chunk)) > 0) {
        for (ssize_t i = 0; i < r && ok; i++)
            ok = buf[i] == pipe_stream_byte(got + (uint64_t)i);
        got += (uint64_t)r;
        if (rest_us && (got & 0xffff) < (uint64_t)r)
            usleep(rest_us);
    }
    if (!ok || got != bytes)
        fprintf(stderr, "reader: %llu of %llu bytes%s\n", (unsigned long long)got,
                (unsigned long long)bytes, ok ? "" : ", a wrong one");
    return ok && got == bytes && write(fd, "bye", 3) == 3;
}

#endif /* PIPE_STREAM_H */
