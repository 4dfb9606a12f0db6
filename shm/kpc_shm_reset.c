/*
 * kpc-shm-reset - remove the host index of a cache directory.
 *
 * Without --force it refuses while live processes are attached, and names them (pid and
 * command), or while the segment's locks do not answer; with --force, or when none is
 * live, it unlinks the segment: processes still attached keep their mapping until they
 * exit, and the next process creates a fresh one. It also removes a segment that fails
 * validation, which is the way out of a damaged one. --force neither maps the segment
 * nor takes any of its locks, so a damaged lock cannot hang it. Either way it first lists
 * and removes the temporary segments that creators killed mid-creation left.
 */
#define _GNU_SOURCE
#include "base/root.h"
#include "core/config.h"
#include "shm/index.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef KPC_TOOL_VERSION
#define KPC_TOOL_VERSION "unknown"
#endif

static void usage(void)
{
    printf("usage: kpc-shm-reset [-d DIR | --cache-dir DIR] [-f | --force]\n"
           "Remove the host-wide shared-memory index of a kpc cache directory.\n"
           "  -d, --cache-dir DIR  the cache directory (default: $KPC_CACHE_DIR, else\n"
           "                       $XDG_CACHE_HOME/kpc, else ~/.cache/kpc)\n"
           "  -f, --force          remove it even while processes are attached, without\n"
           "                       reading it or taking its locks\n"
           "  -h, --help           this text\n"
           "  --version            the version\n"
           "Exit status: 0 removed (or none existed), 1 refused or failed, 2 bad usage.\n"
           "See kpc-shm-reset(1).\n");
}

/* The one line of a usage error and the hint; returns 2. */
static int usage_error(const char *what, const char *arg)
{
    fprintf(stderr, "kpc-shm-reset: %s%s%s%s\nsee 'kpc-shm-reset --help'\n", what, arg ? " '" : "",
            arg ? arg : "", arg ? "'" : "");
    return 2;
}

static void print_temp(const char *name, void *arg)
{
    (void)arg;
    printf("removed stale temporary segment %s (its creator died)\n", name);
}

static void print_proc(pid_t pid, void *arg)
{
    (void)arg;
    char path[64], cmd[256] = "?";
    snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pid);
    FILE *f = fopen(path, "re"); /* /proc: not kpc's file */
    if (f) {
        size_t n = fread(cmd, 1, sizeof cmd - 1, f);
        fclose(f);
        for (size_t i = 0; i + 1 < n; i++)
            if (cmd[i] == '\0')
                cmd[i] = ' ';
        cmd[n] = '\0';
    }
    fprintf(stderr, "  pid %d: %s\n", (int)pid, cmd);
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {{"cache-dir", required_argument, NULL, 'd'},
                                         {"force", no_argument, NULL, 'f'},
                                         {"help", no_argument, NULL, 'h'},
                                         {"version", no_argument, NULL, 'V'},
                                         {NULL, 0, NULL, 0}};
    const char *dir = NULL;
    bool force = false;
    int c;
    opterr = 0; /* we word the errors: one line and a hint */
    while ((c = getopt_long(argc, argv, ":d:fh", opts, NULL)) != -1) {
        switch (c) {
        case 'd': dir = optarg; break;
        case 'f': force = true; break;
        case 'h': usage(); return 0;
        case 'V': printf("kpc-shm-reset %s\n", KPC_TOOL_VERSION); return 0;
        case ':': return usage_error("this option needs a value:", argv[optind - 1]);
        default:
            if (optopt) {
                char opt[3] = {'-', (char)optopt, '\0'};
                return usage_error("unknown option", opt);
            }
            return usage_error("unknown option", argv[optind - 1]);
        }
    }
    if (optind != argc)
        return usage_error("takes no operands (give the directory with -d DIR), not", argv[optind]);
    kpc_config cfg = {.struct_size = sizeof cfg, .cache_dir = dir};
    kpc_settings set;
    if (kpc_config_resolve(&cfg, &set) != KPC_OK)
        return 2;
    char root[4096];
    if (!kpc_root_realpath(set.cache_dir, root, sizeof root)) {
        printf("no cache directory %s: nothing to reset\n", set.cache_dir);
        return 0;
    }
    char name[KPC_INDEX_NAME_MAX];
    kpc_index_segment_name(root, name, sizeof name);
    kpc_index_sweep_temps(root, print_temp, NULL);
    kpc_index *ix;
    kpc_status s = force ? KPC_E_CORRUPT : kpc_index_open_existing(root, &ix);
    if (s == KPC_E_NOT_FOUND) {
        printf("no host index for %s (%s)\n", root, name);
        return 0;
    }
    if (s == KPC_OK) {
        size_t live = 0;
        if (kpc_index_live_procs(ix, NULL, NULL, &live) != KPC_OK) {
            fprintf(stderr, "kpc-shm-reset: the host index %s of %s does not answer (a lock is "
                    "damaged, or held by a stopped process): refusing; use --force to remove it\n",
                    name, root);
            kpc_index_close(ix);
            return 1;
        }
        if (live > 0) {
            fprintf(stderr, "kpc-shm-reset: %zu live process(es) use the host index %s of %s:\n",
                    live, name, root);
            kpc_index_live_procs(ix, print_proc, NULL, &live);
            fprintf(stderr, "refusing; stop them first, or use --force\n");
            kpc_index_close(ix);
            return 1;
        }
        kpc_index_close(ix);
    } else if (!force) {
        fprintf(stderr, "kpc-shm-reset: the host index %s is damaged or foreign: removing it\n", name);
    }
    s = kpc_index_unlink(root);
    if (s == KPC_E_NOT_FOUND) {
        printf("no host index for %s (%s)\n", root, name);
        return 0;
    }
    if (s != KPC_OK && s != KPC_E_NOT_FOUND) {
        fprintf(stderr, "kpc-shm-reset: could not remove %s\n", name);
        return 1;
    }
    printf("removed host index %s of %s\n", name, root);
    return 0;
}
