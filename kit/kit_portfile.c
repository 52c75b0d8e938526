/* kit_portfile.c - the port file (kit_port_file_write): the addresses a program listens on, one
 * "NAME ADDRESS" line each, written whole through a rename once it listens, so whoever started
 * it on port 0 (a test, a supervisor, a benchmark harness) reads the ports back instead of
 * guessing a free one beforehand. Main thread, after hd_runtime_start; owns nothing past the
 * call. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <hd/kit.h>

/* The temporary name: path plus ".tmp", renamed over path once complete. */
#define KIT_PORT_FILE_PATH_MAX 4096

int kit_port_file_write(const char *path, const struct kit_port_entry *e, unsigned n)
{
    char tmp[KIT_PORT_FILE_PATH_MAX];
    if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= sizeof(tmp))
        return -ENAMETOOLONG;
    FILE *f = fopen(tmp, "we");
    if (f == NULL)
        return -errno;
    int rc = 0;
    for (unsigned i = 0; i < n && rc == 0; i++) {
        char text[80];
        net_addr_format(e[i].addr, text, sizeof(text));
        if (fprintf(f, "%s %s\n", e[i].name, text) < 0)
            rc = -EIO;
    }
    if (fflush(f) != 0 && rc == 0)
        rc = -errno;
    if (fclose(f) != 0 && rc == 0)
        rc = -errno;
    if (rc == 0 && rename(tmp, path) < 0) /* readers see the whole file or none */
        rc = -errno;
    if (rc < 0)
        unlink(tmp);
    return rc;
}
