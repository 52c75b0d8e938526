/* server_flags_deploy.c - hderp-server's own deployment flags (not derper's): behind a proxy
 * (--proxy-protocol-from), the DERP map entry (--print-derpmap and its --derpmap-* details) and
 * the log format (--log-format). server_flags.c hands over every name it does not know. Main
 * thread, before start-up. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/server_flags.h"

const char srv_flags_deploy_usage[] =
    "  --proxy-protocol-from LIST  CIDRs (comma-separated; a bare address is /32 or /128)\n"
    "                          of proxies in front of the -a listener (haproxy\n"
    "                          send-proxy[-v2], nginx stream proxy_protocol, Caddy L4):\n"
    "                          each connection starts with a PROXY v1 or v2 header whose\n"
    "                          client address logs, limits and admission then see;\n"
    "                          connections from other sources are refused (hderp only)\n"
    "  --print-derpmap[=json|yaml]  print this node's DERP map region, from the other\n"
    "                          flags, for a Tailscale policy file (json, the default) or\n"
    "                          Headscale's derp.paths file (yaml), and exit (hderp only)\n"
    "  --derpmap-region-id N   its RegionID (default 900); --derpmap-region-code CODE\n"
    "                          (default hderp), --derpmap-region-name NAME (default the\n"
    "                          code), --derpmap-node-name NAME (default <id>a)\n"
    "  --derpmap-ipv4 IP, --derpmap-ipv6 IP  the node's public addresses (default: the\n"
    "                          -a address or an IP -hostname, when they name one)\n"
    "  --derpmap-port N        the public DERP port (default -a's; 443 with\n"
    "                          --proxy-protocol-from, where -a is the inside address)\n"
    "  -acme-directory URL     -certmode letsencrypt: the ACME CA (default Let's Encrypt's\n"
    "                          production directory); given, TLS on any -a port (hderp)\n"
    "  -acme-email ADDR        the ACME account's contact (derper's flag; gcp needs it)\n"
    "  -acme-eab-kid ID, -acme-eab-key KEY  -certmode gcp: the External Account Binding's\n"
    "                          key id and its MAC key (base64 or base64url), from\n"
    "                          gcloud publicca external-account-keys create (derper's)\n"
    "  -acme-ip-certs          -certmode letsencrypt with an IP -hostname: a certificate\n"
    "                          for that address (the CA's \"shortlived\" profile, about six\n"
    "                          days at Let's Encrypt; http-01 on -http-port), in\n"
    "                          <certdir>/<ip>.crt and .key (derper's; it serves every\n"
    "                          local address, hderp only -hostname's)\n"
    "  --acme-renew-before D   renew this long before expiry (default 720h; IP\n"
    "                          certificates: with a third of their life left)\n"
    "  --acme-check-interval D look at the certificate this often (default 12h; IP\n"
    "                          certificates 1h)\n"
    "  --log-format text|json  log lines as text (default) or one JSON object a line\n"
    "                          (time, level, shard, event, msg) (hderp only)\n"
    "  --pid-file FILE         write the server's PID there (a successor rewrites it)\n"
    "  --upgrade-timeout D     SIGUSR2 starts this binary again (the file on disk now, the\n"
    "                          same flags) and hands it the listening sockets and the\n"
    "                          logged-in clients (they keep their connections); a new\n"
    "                          process not accepting within D (default 30s) is killed and\n"
    "                          this one serves on. hderp-server upgrade --pid-file FILE\n"
    "                          sends it and waits for the new PID (hderp only)\n"
    "  hderp-server check URL  a self-test of any DERP server instead of running one (TLS,\n"
    "                          HTTP, logins, packets, ping, STUN, mesh): check --help\n";

int srv_flags_cert_paths(const struct srv_flags *f, char *dir, char *crt, char *key, size_t size)
{
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (f->certdir && f->certdir[0])
        snprintf(dir, size, "%s", f->certdir);
    else if (xdg && xdg[0]) /* derper's default: tsweb.DefaultCertDir("derper-certs") */
        snprintf(dir, size, "%s/tailscale/derper-certs", xdg);
    else if (home)
        snprintf(dir, size, "%s/.cache/tailscale/derper-certs", home);
    else
        return -1;
    char host[256];
    size_t n = 0;
    for (const char *p = f->hostname; *p && n + 1 < sizeof(host); p++)
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
            *p == '.' || *p == '-')
            host[n++] = *p;
    host[n] = '\0';
    if (snprintf(crt, size, "%s/%s.crt", dir, host) >= (int)size ||
        snprintf(key, size, "%s/%s.key", dir, host) >= (int)size)
        return -1;
    return 0;
}

bool srv_flags_deploy_is_bool(const char *name)
{
    return strcmp(name, "print-derpmap") == 0;
}

bool srv_flags_deploy_is_known(const char *name)
{
    static const char *const names[] = {
        "proxy-protocol-from", "print-derpmap",       "acme-directory",
        "acme-email",          "acme-eab-kid",        "acme-eab-key",
        "acme-renew-before",   "acme-check-interval", "pid-file",
        "upgrade-timeout",     "log-format",          "derpmap-region-id",
        "derpmap-port",        "derpmap-region-code", "derpmap-region-name",
        "derpmap-node-name",   "derpmap-ipv4",        "derpmap-ipv6"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (strcmp(name, names[i]) == 0)
            return true;
    return false;
}

static int derpmap_flag(struct srv_flags *f, const char *name, const char *v)
{
    if (strcmp(name, "derpmap-region-id") == 0) {
        char *end;
        long id = strtol(v, &end, 10);
        if (end == v || *end || id < 1 || id > 65535) {
            fprintf(stderr, "hderp-server: --%s %s: expected 1..65535\n", name, v);
            return -1;
        }
        f->derpmap_region_id = id;
    } else if (strcmp(name, "derpmap-port") == 0) {
        char *end;
        long port = strtol(v, &end, 10);
        if (end == v || *end || port < 1 || port > 65535) {
            fprintf(stderr, "hderp-server: --%s %s: not a port\n", name, v);
            return -1;
        }
        f->derpmap_port = port;
    } else if (strcmp(name, "derpmap-region-code") == 0) {
        f->derpmap_region_code = v;
    } else if (strcmp(name, "derpmap-region-name") == 0) {
        f->derpmap_region_name = v;
    } else if (strcmp(name, "derpmap-node-name") == 0) {
        f->derpmap_node_name = v;
    } else if (strcmp(name, "derpmap-ipv4") == 0) {
        f->derpmap_ipv4 = v; /* checked when printed */
    } else if (strcmp(name, "derpmap-ipv6") == 0) {
        f->derpmap_ipv6 = v;
    } else {
        fprintf(stderr, "hderp-server: unknown flag -%s (see --help)\n", name);
        return -1;
    }
    return 0;
}

int srv_flags_apply_deploy(struct srv_flags *f, const char *name, const char *v)
{
    if (strcmp(name, "proxy-protocol-from") == 0) {
        f->proxy_from = v; /* parsed and checked by srv_proxy_configure */
    } else if (strcmp(name, "print-derpmap") == 0) {
        if (v == NULL || strcmp(v, "json") == 0 || strcmp(v, "true") == 0) {
            f->print_derpmap = 1;
        } else if (strcmp(v, "yaml") == 0) {
            f->print_derpmap = 2;
        } else if (strcmp(v, "false") == 0) {
            f->print_derpmap = 0;
        } else {
            fprintf(stderr, "hderp-server: --print-derpmap=%s: expected json or yaml\n", v);
            return -1;
        }
    } else if (strcmp(name, "acme-directory") == 0 || strcmp(name, "acme-email") == 0) {
        *(name[5] == 'd' ? &f->acme_directory : &f->acme_email) = v;
    } else if (strcmp(name, "acme-eab-kid") == 0 || strcmp(name, "acme-eab-key") == 0) {
        *(name[11] == 'd' ? &f->acme_eab_kid : &f->acme_eab_key) = v; /* checked for gcp */
    } else if (strcmp(name, "acme-renew-before") == 0 || strcmp(name, "acme-check-interval") == 0) {
        int64_t ms = srv_parse_duration_ms(v);
        if (ms <= 0) {
            fprintf(stderr, "hderp-server: --%s %s: expected a duration > 0\n", name, v);
            return -1;
        }
        *(name[5] == 'r' ? &f->acme_renew_before_ms : &f->acme_check_interval_ms) = (uint64_t)ms;
    } else if (strcmp(name, "pid-file") == 0) {
        f->pid_file = v;
    } else if (strcmp(name, "upgrade-timeout") == 0) {
        int64_t ms = srv_parse_duration_ms(v);
        if (ms < 100 || ms > UINT32_MAX) {
            fprintf(stderr, "hderp-server: --%s %s: expected a duration of at least 100ms\n", name,
                    v);
            return -1;
        }
        f->upgrade_timeout_ms = (uint64_t)ms;
    } else if (strcmp(name, "log-format") == 0) {
        if (strcmp(v, "text") != 0 && strcmp(v, "json") != 0) {
            fprintf(stderr, "hderp-server: --log-format %s: expected text or json\n", v);
            return -1;
        }
        f->log_json = strcmp(v, "json") == 0;
    } else {
        return derpmap_flag(f, name, v);
    }
    return 0;
}
