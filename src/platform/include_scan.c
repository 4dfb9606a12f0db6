/*
 * include_scan.c - the files an NVRTC compile may read, found by reading the includes.
 *
 * NVRTC (12.x, 13.x) documents no dependency output: its preprocessing options are
 * -D, -U, -I (--include-path), -include (--pre-include) and -no-source-include, and
 * NVRTC 13.0 refuses -MD, -M, --dependency-output and
 * --generate-dependencies-with-compile (NVRTC_ERROR_INVALID_OPTION). So the NVIDIA
 * platform finds the files itself, erring on the side of more files, never fewer:
 *
 *   - every `#include "x"` / `#include <x>` / `#include_next` in the source, in the
 *     in-memory headers and, recursively, in every file found, is resolved against
 *     every directory NVRTC may search: the includer's own directory (the source's,
 *     relative to the working directory, unless -no-source-include), then each -I
 *     directory; a name given as an in-memory header is never looked up on disk;
 *   - every existing candidate is a dependency, not only the first one (NVRTC takes
 *     the first, but an extra file in the manifest can only cause a recompile);
 *   - a directive inside a comment or an #if 0 is resolved too (more files, not fewer);
 *   - a name found nowhere is NVRTC's built-in header or a missing one: not a
 *     dependency, but said (*unresolved), because a compile error may be that absence,
 *     which no manifest records: such a failure is not cached (platform/compile.c), so
 *     it is retried once the header appears (a header that appears later in an
 *     earlier directory is the one blind spot, as for ccache);
 *   - a computed include (`#include MACRO`) cannot be resolved without preprocessing:
 *     KPC_E_NOT_FOUND, dependencies unknown, the outcome is not cached.
 *
 * Pre-includes (-include f) are resolved like `#include <f>` plus f itself. What is a
 * search directory or a pre-include is the option table's answer (platform/options.h).
 *
 * The same walk checks any compiler's request before it compiles (kpc_include_check):
 * a file it finds that is not a regular file (a FIFO, a device, a socket) would block
 * or feed the compiler forever, so the request is refused before the compiler opens it.
 * Every file is opened without blocking and every call goes through the fault seam.
 */
#define _GNU_SOURCE
#include "platform/include_scan.h"
#include "base/log.h"
#include "base/util.h"
#include "base/fault.h"
#include "platform/depfile.h"
#include "platform/options.h"

#include <sys/types.h>

#include <bsd/string.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SCAN_MAX_FILES 4096
#define SCAN_MAX_DIRS 256

typedef struct found_file {
    dev_t dev;
    ino_t ino;
    bool scan; /* the first path to this file: its includes are read */
} found_file;

typedef struct scan {
    const kpc_source *src;
    const char *dirs[SCAN_MAX_DIRS]; /* the -I directories, in order */
    size_t ndirs;
    char **found; /* dependency paths, each once; a file reached by two paths has both */
    found_file *info;
    size_t nfound, cap;
    bool unknown, nomem, unresolved;
    char refused[4096]; /* a path that is there but is no regular file ("": none) */
} scan;

static bool in_memory(const scan *s, const char *name)
{
    for (size_t i = 0; i < s->src->num_headers; i++)
        if (strcmp(s->src->header_names[i], name) == 0)
            return true;
    return false;
}

/* path names an existing regular file (true): add it (once). Its includes are read later, by
 * the loop in kpc_include_scan (a worklist, not recursion: include chains and cycles
 * through "../" would otherwise run deep), and only for the first path to that file. */
static bool consider(scan *s, const char *path)
{
    struct stat st;
    if (s->unknown || s->nomem || s->refused[0] || kpc__fstatat(AT_FDCWD, path, &st, 0) != 0 ||
        S_ISDIR(st.st_mode)) /* a directory of that name: the compiler looks on */
        return false;
    if (!S_ISREG(st.st_mode)) {
        strlcpy(s->refused, path, sizeof s->refused); /* a longer path is refused all the same */
        return false;
    }
    bool first = true;
    for (size_t i = 0; i < s->nfound; i++) {
        if (strcmp(s->found[i], path) == 0)
            return true;
        if (s->info[i].dev == st.st_dev && s->info[i].ino == st.st_ino)
            first = false;
    }
    if (s->nfound == SCAN_MAX_FILES) {
        s->unknown = true;
        return true;
    }
    if (s->nfound == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 32;
        char **f = realloc(s->found, cap * sizeof *f);
        if (f)
            s->found = f;
        found_file *inf = f ? realloc(s->info, cap * sizeof *inf) : NULL;
        if (inf == NULL) {
            s->nomem = true;
            return true;
        }
        s->info = inf;
        s->cap = cap;
    }
    char *copy = strdup(path);
    if (copy == NULL) {
        s->nomem = true;
        return true;
    }
    s->info[s->nfound] = (found_file){st.st_dev, st.st_ino, first};
    s->found[s->nfound++] = copy;
    return true;
}

static void scan_text(scan *s, const char *text, size_t len, const char *own_dir);

/* Read the includes of found file k. */
static void scan_file(scan *s, size_t k)
{
    int fd = kpc_open_regular(AT_FDCWD, s->found[k], O_RDONLY, 0, NULL);
    if (fd < 0 && errno == EINVAL) /* replaced since it was stat'ed */
        snprintf(s->refused, sizeof s->refused, "%s", s->found[k]);
    void *buf = NULL;
    size_t size = 0;
    if (fd >= 0 && kpc__read_fd(fd, 64u << 20, &buf, &size) == KPC_OK) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", s->found[k]);
        char *slash = strrchr(dir, '/');
        if (slash)
            *slash = '\0';
        else
            strcpy(dir, ".");
        scan_text(s, buf, size, dir);
    }
    free(buf);
    if (fd >= 0)
        close(fd);
}

static void resolve(scan *s, const char *name, const char *own_dir)
{
    char path[8192];
    if (in_memory(s, name))
        return;
    bool exists = false;
    if (name[0] == '/')
        exists = consider(s, name);
    else {
        if (own_dir) {
            snprintf(path, sizeof path, "%s/%s", own_dir, name);
            exists |= consider(s, path);
        }
        for (size_t i = 0; i < s->ndirs; i++) {
            snprintf(path, sizeof path, "%s/%s", s->dirs[i], name);
            exists |= consider(s, path);
        }
    }
    s->unresolved |= !exists;
}

/* Every include directive of text; own_dir: where the includer lies (NULL: nowhere). */
static void scan_text(scan *s, const char *text, size_t len, const char *own_dir)
{
    size_t i = 0;
    while (i < len && !s->unknown && !s->nomem && !s->refused[0]) {
        /* at a line start: blanks, '#', blanks, "include" */
        size_t j = i;
        while (j < len && (text[j] == ' ' || text[j] == '\t'))
            j++;
        if (j < len && text[j] == '#') {
            j++;
            while (j < len && (text[j] == ' ' || text[j] == '\t'))
                j++;
            size_t kw = 0;
            if (len - j >= 12 && strncmp(text + j, "include_next", 12) == 0)
                kw = 12;
            else if (len - j >= 7 && strncmp(text + j, "include", 7) == 0)
                kw = 7;
            else if (len - j >= 6 && strncmp(text + j, "import", 6) == 0)
                kw = 6;
            if (kw) {
                j += kw;
                while (j < len && (text[j] == ' ' || text[j] == '\t'))
                    j++;
                char close = j < len && text[j] == '"' ? '"' : j < len && text[j] == '<' ? '>' : 0;
                if (close == 0) {
                    KPC_LOG(KPC_LOG_DEBUG, "a computed #include: dependencies unknown, the outcome "
                            "is not cached");
                    s->unknown = true;
                    return;
                }
                size_t k = j + 1;
                while (k < len && text[k] != close && text[k] != '\n')
                    k++;
                if (k < len && text[k] == close && k - j - 1 > 0 && k - j - 1 < 4096) {
                    char name[4096];
                    memcpy(name, text + j + 1, k - j - 1);
                    name[k - j - 1] = '\0';
                    resolve(s, name, own_dir);
                }
            }
        }
        while (i < len && text[i] != '\n')
            i++;
        i++;
    }
}

/* Walk src's includes under the search rules of options; KPC_E_INVALID when a file found
 * is not a regular file (logged with its path). */
static kpc_status walk(const kpc_option_table *options, const kpc_source *src, scan *s)
{
    bool source_dir = kpc_options_source_dir_searched(options);
    s->ndirs = kpc_options_search_dirs(options, src->options, src->num_options, s->dirs, SCAN_MAX_DIRS);
    for (size_t i = 0; i < src->num_options; i++) {
        kpc_option o;
        kpc_option_classify_path(options, src->options, src->num_options, i, &o);
        if (o.cls == KPC_OPTION_NO_SOURCE_DIR)
            source_dir = false;
        i += o.used - 1;
    }
    /* the source's directory: its name's, relative to the working directory */
    char sdir[4096] = ".";
    if (src->name && strchr(src->name, '/')) {
        snprintf(sdir, sizeof sdir, "%s", src->name);
        *strrchr(sdir, '/') = '\0';
        if (sdir[0] == '\0')
            strcpy(sdir, "/");
    }
    /* pre-includes: the file itself where it is named, and as #include <f> */
    for (size_t i = 0; i < src->num_options && !s->unknown && !s->nomem; i++) {
        kpc_option o;
        kpc_option_classify_path(options, src->options, src->num_options, i, &o);
        if (o.cls == KPC_OPTION_READ_FILE && o.value) {
            bool before = s->unresolved, here = consider(s, o.value);
            resolve(s, o.value, source_dir ? sdir : NULL);
            if (here)
                s->unresolved = before; /* found where it is named */
        }
        i += o.used - 1;
    }
    size_t len = src->code_len ? src->code_len : strlen(src->code);
    scan_text(s, src->code, len, source_dir ? sdir : NULL);
    for (size_t h = 0; h < src->num_headers && !s->unknown && !s->nomem; h++)
        scan_text(s, src->header_sources[h], strlen(src->header_sources[h]), source_dir ? sdir : NULL);
    for (size_t k = 0; k < s->nfound && !s->unknown && !s->nomem && !s->refused[0]; k++)
        if (s->info[k].scan)
            scan_file(s, k);
    free(s->info);
    s->info = NULL;
    if (s->refused[0]) {
        KPC_LOG(KPC_LOG_ERROR, "%s is included but is not a regular file (a FIFO, a device or a "
                "socket): the request is refused before the compiler opens it", s->refused);
        return KPC_E_INVALID;
    }
    return KPC_OK;
}

kpc_status kpc_include_scan(const kpc_source *src, char ***paths, size_t *n, bool *unresolved)
{
    *paths = NULL;
    *n = 0;
    *unresolved = false;
    scan s = {.src = src};
    kpc_status st = walk(kpc_options_for("nvrtc"), src, &s);
    if (st != KPC_OK || s.unknown || s.nomem) {
        kpc_depfile_paths_free(s.found, s.nfound);
        return st != KPC_OK ? st : s.nomem ? KPC_E_NOMEM : KPC_E_NOT_FOUND;
    }
    *paths = s.found;
    *n = s.nfound;
    *unresolved = s.unresolved;
    return KPC_OK;
}

kpc_status kpc_include_check(const kpc_option_table *options, const kpc_source *src)
{
    scan s = {.src = src};
    kpc_status st = walk(options, src, &s);
    kpc_depfile_paths_free(s.found, s.nfound);
    return st == KPC_E_INVALID ? st : s.nomem ? KPC_E_NOMEM : KPC_OK;
}
