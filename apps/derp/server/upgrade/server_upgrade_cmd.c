/* server_upgrade_cmd.c - `hderp-server upgrade --pid-file F [--timeout D]`: SIGUSR2 to the
 * server the pid file names, then wait until the pid file names its successor (the upgrade
 * worked: exit 0) or the timeout passes (exit 1: the old server keeps serving; its log says
 * why). Main thread of its own process. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <hd/kit.h>

#include "ops/server_flags.h"
#include "server_limits.h"
#include "upgrade/server_upgrade.h"

/* Default wait: the server's --upgrade-timeout default and a margin for its start-up. */
#define SRV_UPGRADE_CMD_WAIT_MS (SRV_UPGRADE_TIMEOUT_MS_DEFAULT + 10000u)
#define SRV_UPGRADE_CMD_POLL_MS 50

long srv_upgrade_pid_read(const char *path)
{
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return -1;
    long pid = -1;
    if (fscanf(f, "%ld", &pid) != 1 || pid <= 0)
        pid = -1;
    fclose(f);
    return pid;
}

static int usage(void)
{
    fprintf(stderr, "usage: hderp-server upgrade --pid-file FILE [--timeout D]\n"
                    "  SIGUSR2 to the server FILE names; waits (default 40s) until FILE names\n"
                    "  the new server. Exit 0: upgraded; 1: not (the old one keeps serving).\n");
    return 2;
}

static int wait_new_pid(const char *path, long old, uint64_t wait_ms)
{
    for (uint64_t waited = 0; waited <= wait_ms; waited += SRV_UPGRADE_CMD_POLL_MS) {
        long now = srv_upgrade_pid_read(path);
        if (now > 0 && now != old && kill((pid_t)now, 0) == 0) {
            printf("hderp-server upgrade: PID %ld -> PID %ld\n", old, now);
            return 0;
        }
        struct timespec ts = {0, SRV_UPGRADE_CMD_POLL_MS * 1000000L};
        nanosleep(&ts, NULL);
    }
    fprintf(stderr,
            "hderp-server upgrade: %s still names PID %ld after %llu ms: not upgraded (see "
            "its log)\n",
            path, old, (unsigned long long)wait_ms);
    return 1;
}

int srv_upgrade_cmd_main(int argc, char **argv)
{
    const char *path = NULL;
    uint64_t wait_ms = SRV_UPGRADE_CMD_WAIT_MS;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        a += a[0] == '-' && a[1] == '-' ? 2 : a[0] == '-' ? 1 : 0;
        bool value_flag = strcmp(a, "pid-file") == 0 || strcmp(a, "timeout") == 0;
        if (value_flag && i + 1 >= argc) {
            fprintf(stderr, "hderp-server upgrade: %s needs a value\n", argv[i]);
            return usage();
        } else if (strcmp(a, "pid-file") == 0) {
            path = argv[++i];
        } else if (strcmp(a, "timeout") == 0) {
            int64_t ms = srv_parse_duration_ms(argv[++i]);
            if (ms <= 0) {
                fprintf(stderr, "hderp-server upgrade: --timeout %s: expected %s\n", argv[i],
                        KIT_DURATION_HINT);
                return usage();
            }
            wait_ms = (uint64_t)ms;
        } else if (strcmp(a, "h") == 0 || strcmp(a, "help") == 0) {
            usage();
            return 0;
        } else {
            fprintf(stderr, "hderp-server upgrade: %s %s\n",
                    argv[i][0] == '-' ? "unknown flag" : "unexpected argument", argv[i]);
            return usage();
        }
    }
    if (path == NULL)
        return usage();
    long old = srv_upgrade_pid_read(path);
    if (old <= 0) {
        fprintf(stderr, "hderp-server upgrade: %s: no pid in it\n", path);
        return 1;
    }
    if (kill((pid_t)old, SIGUSR2) < 0) {
        fprintf(stderr, "hderp-server upgrade: PID %ld: %s\n", old, strerror(errno));
        return 1;
    }
    return wait_new_pid(path, old, wait_ms);
}
