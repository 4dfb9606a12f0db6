/*
 * remote_url.c - the cluster tier's URL (KPC_REMOTE / kpc_config.remote): parsing, the
 * redacted form that logs and stats show, and which URL a cache is configured with.
 * Built with or without hiredis. A password never leaves kpc_remote_url.password: no
 * message here prints a URL as given, only the redacted one.
 */
#define _GNU_SOURCE
#include "storage/remote.h"
#include "base/log.h"
#include "base/settings.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REDIS_PORT 6379

static bool parse_int(const char *s, size_t n, long lo, long hi, int *out)
{
    char buf[16];
    if (n == 0 || n >= sizeof buf)
        return false;
    memcpy(buf, s, n);
    buf[n] = '\0';
    char *end;
    errno = 0;
    long v = strtol(buf, &end, 10);
    if (errno != 0 || *end != '\0' || v < lo || v > hi || buf[0] == '-' || buf[0] == '+')
        return false;
    *out = (int)v;
    return true;
}

static bool copy_part(char *dst, size_t cap, const char *s, size_t n)
{
    if (n >= cap)
        return false;
    memcpy(dst, s, n);
    dst[n] = '\0';
    return true;
}

/* HOST[:PORT] or [IPv6][:PORT] in [p, end): NULL, or what is wrong with it. */
static const char *parse_addr(const char *p, const char *end, kpc_remote_addr *a)
{
    a->port = REDIS_PORT;
    const char *hend = end;
    if (p < end && p[0] == '[') {
        const char *rb = memchr(p, ']', (size_t)(end - p));
        if (rb == NULL)
            return "unterminated [IPv6 address]";
        if (!copy_part(a->host, sizeof a->host, p + 1, (size_t)(rb - p - 1)))
            return "host too long";
        hend = rb + 1;
        if (hend < end && (*hend != ':' || !parse_int(hend + 1, (size_t)(end - hend - 1), 1, 65535, &a->port)))
            return "bad port";
    } else {
        const char *colon = memchr(p, ':', (size_t)(end - p));
        if (colon) {
            hend = colon;
            if (!parse_int(colon + 1, (size_t)(end - colon - 1), 1, 65535, &a->port))
                return "bad port";
        }
        if (!copy_part(a->host, sizeof a->host, p, (size_t)(hend - p)))
            return "host too long";
    }
    return a->host[0] ? NULL : "no host";
}

kpc_status kpc_remote_url_parse_from(const char *from, const char *url, kpc_remote_url *u)
{
    memset(u, 0, sizeof *u);
    u->port = REDIS_PORT;
    const char *why = NULL;
    if (url == NULL)
        why = "no URL";
    else if (strncmp(url, "redis+unix://", 13) == 0) {
        const char *p = url + 13;
        const char *q = strchr(p, '?');
        size_t n = q ? (size_t)(q - p) : strlen(p);
        if (n == 0 || p[0] != '/' || !copy_part(u->unix_path, sizeof u->unix_path, p, n))
            why = "redis+unix:// needs an absolute socket path";
        else if (q && (strncmp(q, "?db=", 4) != 0 || !parse_int(q + 4, strlen(q + 4), 0, 65535, &u->db)))
            why = "the only query redis+unix:// takes is ?db=N";
    } else if (strncmp(url, "redis://", 8) == 0) {
        const char *p = url + 8;
        const char *slash = strchr(p, '/');
        const char *end = slash ? slash : p + strlen(p);
        const char *at = memrchr(p, '@', (size_t)(end - p));
        if (at) { /* [USER]:PASSWORD@ */
            const char *colon = memchr(p, ':', (size_t)(at - p));
            if (colon == NULL)
                why = "the part before @ must be [USER]:PASSWORD";
            else if (!copy_part(u->user, sizeof u->user, p, (size_t)(colon - p)) ||
                     !copy_part(u->password, sizeof u->password, colon + 1, (size_t)(at - colon - 1)))
                why = "user or password too long";
            else if (u->password[0] == '\0')
                why = "empty password";
            p = at + 1;
        }
        for (const char *q = p; why == NULL && q <= end; q++) {
            const char *comma = memchr(q, ',', (size_t)(end - q));
            const char *stop = comma ? comma : end;
            if (u->seeds == KPC_REMOTE_SEEDS_MAX)
                why = "more than 16 addresses";
            else if ((why = parse_addr(q, stop, &u->seed[u->seeds])) == NULL || u->seed[u->seeds].host[0])
                u->seeds++; /* a bad one with its host is shown in the message */
            q = stop;
        }
        if (u->seeds) {
            memcpy(u->host, u->seed[0].host, sizeof u->host);
            u->port = u->seed[0].port;
        }
        if (why == NULL && slash && slash[1] != '\0' && !parse_int(slash + 1, strlen(slash + 1), 0, 65535, &u->db))
            why = "the path must be a database number";
    } else
        why = "not a redis:// or redis+unix:// URL";
    if (why != NULL) {
        kpc_remote_url safe = *u;
        char shown[1600] = "";
        if (url && strncmp(url, "redis", 5) == 0 && u->host[0])
            kpc_remote_url_redacted(&safe, shown, sizeof shown);
        /* never the URL itself: it may hold a password */
        KPC_LOG(KPC_LOG_ERROR, "%s: %s%s%s (expected redis://[[USER]:PASSWORD@]HOST[:PORT][/DB], HOST[:PORT] "
                "one address or a comma list of seeds, or redis+unix:///path)", from, why, shown[0] ? " in " : "", shown);
        memset(u->password, 0, sizeof u->password);
        return KPC_E_INVALID;
    }
    return KPC_OK;
}

void kpc_remote_url_redacted(const kpc_remote_url *u, char *out, size_t cap)
{
    if (u->unix_path[0]) {
        snprintf(out, cap, "redis+unix://%s?db=%d", u->unix_path, u->db);
        return;
    }
    size_t n = (size_t)snprintf(out, cap, "redis://%s%s", u->user, u->password[0] ? ":***@" : "");
    for (int i = 0; i < (u->seeds ? u->seeds : 1) && n < cap; i++) {
        const kpc_remote_addr *a = u->seeds ? &u->seed[i] : &(kpc_remote_addr){.port = u->port};
        const char *host = u->seeds ? a->host : u->host;
        const char *v6 = strchr(host, ':') ? "[" : "";
        n += (size_t)snprintf(out + n, cap - n, "%s%s%s%s:%d", i ? "," : "", v6, host, v6[0] ? "]" : "", a->port);
    }
    if (n < cap)
        snprintf(out + n, cap - n, "/%d", u->db);
}


kpc_status kpc_remote_url_parse(const char *url, kpc_remote_url *u)
{
    return kpc_remote_url_parse_from("KPC_REMOTE", url, u);
}

static bool config_names_url(const kpc_config *cfg)
{
    return cfg != NULL && cfg->struct_size >= offsetof(kpc_config, remote) + sizeof cfg->remote &&
           cfg->remote != NULL;
}

const char *kpc_remote_url_configured(const kpc_config *cfg)
{
    const char *url = config_names_url(cfg) ? cfg->remote : kpc__setting_text(KPC_SET_REMOTE);
    return url != NULL && url[0] != '\0' ? url : NULL;
}

const char *kpc_remote_url_source(const kpc_config *cfg)
{
    return config_names_url(cfg) ? "kpc_config.remote" : "KPC_REMOTE";
}

