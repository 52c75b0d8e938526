/* conf_support_impl.h - private to the conformance support library: the blocking socket
 * primitives conf_server.c defines and conf_raw.c shares. Test thread only. */
#ifndef CONF_SUPPORT_IMPL_H
#define CONF_SUPPORT_IMPL_H

#include <stddef.h>
#include <stdint.h>

/* TCP connect to 127.0.0.1:port with a CONF_IO_TIMEOUT_MS send timeout and TCP_NODELAY. Returns
 * the fd or -errno. */
int conf_tcp_connect(uint16_t port);
/* Writes all of data (bounded by the send timeout: -ETIMEDOUT). 0 or -errno. */
int conf_write_all(int fd, const void *data, size_t len);
/* Waits until fd is readable or deadline (ms, conf_now_ms) passes: 0, -ETIMEDOUT or -errno. */
int conf_wait_readable(int fd, int64_t deadline);

#endif /* CONF_SUPPORT_IMPL_H */
