/*
 * test_tool_metrics.c - `kpc stats --prometheus` and `kpc remote stats --prometheus`: the
 * Prometheus text format (a HELP and a TYPE line before each sample, counters named
 * ..._total, the cache dir and the host as labels, escaped), the same numbers as --json,
 * and what `promtool check metrics` (Debian's prometheus package) says of it where it is
 * installed.
 */
#define _GNU_SOURCE
#include "support.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tool_support.h"
#ifdef KPC_TEST_REDIS
#include "cluster_support.h"
#endif

/* The label set every sample of a run must carry: first="VALUE-escaped",host="HOST". */
static char *label_set(const char *first, const char *value)
{
    char host[256] = "";
    ck_assert_int_eq(gethostname(host, sizeof host - 1), 0);
    char *s = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&s, &len);
    fprintf(f, "{%s=\"", first);
    for (const char *p = value; *p; p++)
        fprintf(f, "%s%c", *p == '"' || *p == '\\' ? "\\" : "", *p);
    fprintf(f, "\",host=\"%s\"}", host);
    fclose(f);
    return s;
}

/* Check the text's form line by line and return the value of sample NAME (fails when it
 * is missing). Every sample: its HELP then TYPE line just before it, counter exactly when
 * the name ends in _total, the labels LABELS. */
static double sample(const char *text, const char *labels, const char *name)
{
    char *copy = strdup(text), *save = NULL;
    char help[128] = "", type[160] = "";
    double found = -1;
    bool seen = false;
    for (char *l = strtok_r(copy, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        char n[128];
        if (sscanf(l, "# HELP %127s", n) == 1) {
            snprintf(help, sizeof help, "%s", n);
            continue;
        }
        if (strncmp(l, "# TYPE ", 7) == 0) {
            snprintf(type, sizeof type, "%s", l + 7);
            continue;
        }
        char *brace = strchr(l, '{'), *space = strrchr(l, ' ');
        ck_assert_msg(brace && space && space > brace, "not a sample line: %s", l);
        *brace = '\0';
        ck_assert_msg(strcmp(help, l) == 0, "sample %s without its HELP line", l);
        size_t total = strlen(l) >= 6 && strcmp(l + strlen(l) - 6, "_total") == 0;
        char want_type[160];
        snprintf(want_type, sizeof want_type, "%s %s", l, total ? "counter" : "gauge");
        ck_assert_msg(strcmp(type, want_type) == 0, "sample %s after \"# TYPE %s\"", l, type);
        *space = '\0';
        *brace = '{';
        ck_assert_msg(strcmp(brace, labels) == 0, "labels %s, not %s", brace, labels);
        *brace = '\0';
        if (strcmp(l, name) == 0) {
            ck_assert_msg(!seen, "%s twice", name);
            seen = true;
            found = strtod(space + 1, NULL);
        }
        help[0] = type[0] = '\0';
    }
    free(copy);
    ck_assert_msg(seen, "no sample %s in:\n%s", name, text);
    return found;
}

/* promtool check metrics < FILE: its exit status, or -1 (skipped, said so) without it */
static int promtool_check(const char *text)
{
    char *file = side_file("metrics.prom", text);
    char *cmd = NULL;
    ck_assert_int_gt(asprintf(&cmd, "command -v promtool >/dev/null || exit 99; promtool check metrics < '%s'", file),
                     0);
    const char *argv[] = {"/bin/sh", "-c", cmd, NULL};
    char *out = NULL, *err = NULL;
    int rc = ts_exec(argv, NULL, &out, &err);
    if (rc == 99)
        ts_skip("no promtool (Debian's prometheus package): the format checked by this test alone");
    else
        ck_assert_msg(rc == 0, "promtool check metrics exited %d:\n%s%s\non:\n%s", rc, out, err, text);
    free(out), free(err), free(cmd), free(file);
    return rc == 99 ? -1 : rc;
}

START_TEST(stats_prometheus_says_what_json_says)
{
    kpc_cache *c = ts_open(dir, 0, 0);
    kpc_context *ctx = ts_context(c);
    kpc_source a = ts_src(ts_kernel_source(0), "a.hip");
    size_t size;
    free(ts_get_code(ctx, &a, &size));
    free(ts_get_code(ctx, &a, &size));
    kpc_context_destroy(ctx);
    kpc_cache_close(c);

    cJSON *j = stats_json();
    char *out = NULL, *err = NULL;
    ck_assert_int_eq(kpc(&out, &err, "stats", "--prometheus", "--cache-dir", dir, NULL), 0);
    char *labels = label_set("cache_dir", str(j, "cache_dir"));
    const struct {
        const char *metric, *field;
    } same[] = {
        {"kpc_index_lookups_total", "lookups"}, {"kpc_index_hits_total", "hits"},
        {"kpc_index_builds_total", "builds"}, {"kpc_index_build_failures_total", "build_failures"},
        {"kpc_index_waits_total", "waits"}, {"kpc_index_takeovers_total", "takeovers"},
        {"kpc_index_evictions_total", "evictions"}, {"kpc_index_wait_timeouts_total", "wait_timeouts"},
        {"kpc_index_entries", "entries"}, {"kpc_index_capacity", "capacity"},
        {"kpc_index_attached", "attached"}, {"kpc_disk_bytes", "disk_bytes"},
        {"kpc_disk_files", "disk_files"}, {"kpc_disk_limit_bytes", "disk_max_bytes"}};
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++)
        ck_assert_msg(sample(out, labels, same[i].metric) == num(j, same[i].field), "%s: %g, --json's %s: %g",
                      same[i].metric, sample(out, labels, same[i].metric), same[i].field, num(j, same[i].field));
    /* the build counted, and the disk holds it: not a table of zeros */
    ck_assert(sample(out, labels, "kpc_index_builds_total") == 1);
    ck_assert(sample(out, labels, "kpc_disk_files") >= 1);
    ck_assert(sample(out, labels, "kpc_index_up") == 1);
    ck_assert(sample(out, labels, "kpc_remote_up") == 0);
    promtool_check(out);
    free(labels), free(out), free(err);
    cJSON_Delete(j);
}
END_TEST

START_TEST(stats_prometheus_escapes_the_cache_dir)
{
    /* a double quote and a backslash in the cache dir's name: escaped in the label */
    char *odd = NULL;
    ck_assert_int_gt(asprintf(&odd, "%s/we\"ird\\name", dir), 0);
    ck_assert_int_eq(mkdir(dir, 0700), 0);
    ck_assert_int_eq(mkdir(odd, 0700), 0);
    char *out = NULL, *err = NULL;
    ck_assert_int_eq(kpc(&out, &err, "stats", "--prometheus", "--cache-dir", odd, NULL), 0);
    char *labels = label_set("cache_dir", odd);
    ck_assert(sample(out, labels, "kpc_index_up") == 0); /* no index yet */
    ck_assert(sample(out, labels, "kpc_disk_files") == 0);
    promtool_check(out);
    free(labels), free(out), free(err), free(odd);
}
END_TEST

START_TEST(prometheus_is_a_format_of_stats_only)
{
    char *out = NULL, *err = NULL;
    ck_assert_int_eq(kpc(&out, &err, "stats", "--prometheus", "--json", "--cache-dir", dir, NULL), 2);
    ck_assert_msg(strstr(err, "--json and --prometheus") != NULL, "%s", err);
    ck_assert_str_eq(out, "");
    free(out), free(err);
    ck_assert_int_eq(kpc(&out, &err, "remote", "ls", "--prometheus", NULL), 2);
    ck_assert_msg(strstr(err, "--prometheus is for remote stats") != NULL, "%s", err);
    free(out), free(err);
    ck_assert_int_eq(kpc(&out, &err, "ls", "--prometheus", "--cache-dir", dir, NULL), 2);
    free(out), free(err);
}
END_TEST

START_TEST(remote_stats_prometheus)
{
#ifndef KPC_TEST_REDIS
    ts_skip("no cluster tier or no redis-server in this build");
#else
    tc_redis redis;
    ck_assert_msg(tc_redis_start(&redis), "redis-server could not be started");
    char env_remote[160];
    snprintf(env_remote, sizeof env_remote, "KPC_REMOTE=%s", redis.url);
    const char *env[] = {env_remote, NULL};
    const char *js[] = {tool, "remote", "stats", "--json", NULL};
    const char *pm[] = {tool, "remote", "stats", "--prometheus", NULL};
    char *out = NULL, *err = NULL, *jout = NULL;
    ck_assert_int_eq(ts_exec(js, env, &jout, &err), 0);
    free(err);
    ck_assert_int_eq(ts_exec(pm, env, &out, &err), 0);
    tc_redis_stop(&redis);
    cJSON *j = parse(jout);
    /* labels: the redacted URL, the group's key prefix, the host */
    char *labels = label_set("remote", str(j, "url")), *with_prefix = NULL;
    ck_assert_int_gt(asprintf(&with_prefix, "{remote=\"%s\",prefix=\"%s\",%s", str(j, "url"), str(j, "prefix"),
                              strstr(labels, "host=")),
                     0);
    const struct {
        const char *metric, *field;
    } same[] = {{"kpc_remote_records", "records"}, {"kpc_remote_memory_limit_bytes", "maxmemory"}, {"kpc_remote_clients_limit", "maxclients"},
                {"kpc_remote_hits_total", "hits"}, {"kpc_remote_builds_total", "builds"},
                {"kpc_remote_unserved_total", "unserved"}};
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++)
        ck_assert_msg(sample(out, with_prefix, same[i].metric) == num(j, same[i].field), "%s against %s",
                      same[i].metric, same[i].field);
    ck_assert(sample(out, with_prefix, "kpc_remote_clients") >= 1); /* itself */
    ck_assert(sample(out, with_prefix, "kpc_remote_memory_used_bytes") > 0);
    promtool_check(out);
    cJSON_Delete(j);
    free(labels), free(with_prefix), free(out), free(jout), free(err);
#endif
}
END_TEST

int main(void)
{
    const TTest *tests[] = {stats_prometheus_says_what_json_says, stats_prometheus_escapes_the_cache_dir,
                            prometheus_is_a_format_of_stats_only, remote_stats_prometheus, NULL};
    return ts_main_case("tool", "metrics", 120, setup, teardown, tests);
}
