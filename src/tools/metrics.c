/*
 * metrics.c - the Prometheus text format (version 0.0.4) of `kpc stats --prometheus` and
 * `kpc remote stats --prometheus`, for node_exporter's textfile collector
 * (docs/manual.md, "Metrics"). Each metric is a family of one sample: a HELP line, a TYPE
 * line (counter or gauge) and the sample, with the labels the caller gave on every sample.
 *
 * Label values are escaped as the format asks (backslash, double quote, line feed), so a
 * cache directory of any name gives a valid line; the HELP texts are ours and hold none
 * of the characters HELP escapes.
 */
#define _GNU_SOURCE
#include "tools/tool.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* name="value", the value escaped */
static void put_label(FILE *f, const char *name, const char *value)
{
    fprintf(f, "%s=\"", name);
    for (const char *p = value; *p; p++) {
        if (*p == '\\' || *p == '"')
            fputc('\\', f);
        if (*p == '\n')
            fputs("\\n", f);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

int kpc_tool_prometheus(const char *const *labels, const kpc_tool_metric *m, size_t n)
{
    char host[256] = "";
    if (gethostname(host, sizeof host - 1) != 0)
        host[0] = '\0';
    char *set = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&set, &len);
    if (f == NULL)
        return KPC_TOOL_FAIL;
    fputc('{', f);
    for (const char *const *l = labels; l[0]; l += 2) {
        put_label(f, l[0], l[1]);
        fputc(',', f);
    }
    put_label(f, "host", host);
    fputc('}', f);
    if (fclose(f) != 0) {
        free(set);
        return KPC_TOOL_FAIL;
    }
    for (size_t i = 0; i < n; i++)
        printf("# HELP %s %s\n# TYPE %s %s\n%s%s %llu\n", m[i].name, m[i].help, m[i].name,
               m[i].counter ? "counter" : "gauge", m[i].name, set, (unsigned long long)m[i].value);
    free(set);
    return fflush(stdout) == 0 ? KPC_TOOL_OK : KPC_TOOL_FAIL;
}

int kpc_tool_prometheus_option(kpc_tool *t, int c, const char *arg)
{
    (void)arg;
    if (c == KPC_TOOL_OPT_PROMETHEUS)
        t->prometheus = true;
    return KPC_TOOL_OK;
}

int kpc_tool_prometheus_checked(const kpc_tool *t)
{
    if (t->prometheus && t->json)
        return kpc_tool_usage_error(t, "--json and --prometheus are two formats: give one");
    return KPC_TOOL_OK;
}
