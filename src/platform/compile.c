/*
 * compile.c - one compile, step by step, for any platform (the steps and the mapping of
 * failures to statuses: platform/compile.h). It owns the one rule that decides whether
 * a failure may be shared with every process on the host (and the cluster): only a
 * compile that failed with the compiler's diagnostics, which the same request would get
 * anywhere. Every step checks the one before it: no call is made on a program that was
 * never created (a source whose first byte is NUL makes hipRTC's create fail).
 */
#define _GNU_SOURCE
#include "platform/compile.h"
#include "base/log.h"
#include "platform/depfile.h"
#include "platform/include_scan.h"
#include "platform/names.h"
#include "platform/options.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The program's log, terminated (compilers do not all terminate it); NULL on OOM. */
static char *read_log(const kpc_compiler *c, void *prog)
{
    size_t size = 0;
    if (prog == NULL || c->log_size(prog, &size) != 0)
        size = 0;
    char *log = malloc(size + 1);
    if (log == NULL)
        return NULL;
    if (size > 0 && c->log(prog, log) != 0)
        size = 0;
    log[size] = '\0';
    return log;
}

static bool has_diagnostics(const char *log)
{
    for (; log && *log; log++)
        if (*log != ' ' && *log != '\n' && *log != '\t' && *log != '\r')
            return true;
    return false;
}

/* A log that says which call failed and why, when the compiler said nothing. */
static char *message(const kpc_compiler *c, const char *what, int r)
{
    char msg[256];
    snprintf(msg, sizeof msg, "%s: %s%s\n", c->name, what, c->error_string(r));
    return strdup(msg);
}

/* p = dir + "/" + rest (rest without its leading slashes), or NULL. */
static const char *under(const char *p, const char *dir)
{
    size_t len = strlen(dir);
    while (len > 1 && dir[len - 1] == '/')
        len--;
    if (len == 0 || strncmp(p, dir, len) != 0 || p[len] != '/')
        return NULL;
    const char *rest = p + len;
    while (*rest == '/')
        rest++;
    return rest;
}

static bool listed(char *const *v, size_t n, const char *s)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(v[i], s) == 0)
            return true;
    return false;
}

/* The lookups that missed (kpc_build.absent): for each file found in a search directory
 * (the request's, in the compiler's order, then the system ones), the same name in every
 * directory searched before it. Another reading of the same path (nested directories)
 * adds its own: an extra entry can only cost a compile, a missing one a stale object. */
static kpc_status missed_lookups(const kpc_option_table *t, const kpc_source *src, kpc_build *b)
{
    const char *dirs[256 + 2];
    size_t nd = kpc_options_search_dirs(t, src->options, src->num_options, dirs, 256);
    for (size_t i = 0; i < KPC_SYSTEM_INCLUDE_DIRS; i++)
        dirs[nd++] = kpc_system_include_dirs[i];
    size_t cap = 0;
    for (size_t f = 0; f < b->num_deps; f++)
        for (size_t k = 1; k < nd; k++) {
            const char *rel = under(b->deps[f], dirs[k]);
            for (size_t j = 0; rel && j < k; j++) {
                char path[8192];
                int len = snprintf(path, sizeof path, "%s/%s", dirs[j], rel);
                if (len < 0 || (size_t)len >= sizeof path || listed(b->deps, b->num_deps, path) ||
                    listed(b->absent, b->num_absent, path))
                    continue;
                if (b->num_absent == cap) {
                    cap = cap ? cap * 2 : 16;
                    char **v = realloc(b->absent, cap * sizeof *v);
                    if (v == NULL)
                        return KPC_E_NOMEM;
                    b->absent = v;
                }
                if ((b->absent[b->num_absent] = strdup(path)) == NULL)
                    return KPC_E_NOMEM;
                b->num_absent++;
            }
        }
    return KPC_OK;
}

/* The names table of a success: the lowered names and, where the compiler said something
 * (warnings, remarks), its log under the empty expression (platform/names.h), so that a
 * hit gives back the log the compile gave. */
static kpc_status encode_names(const kpc_source *src, const char **lowered, const char **reasons,
                               const char *log, kpc_build *b)
{
    size_t n = src->num_name_expressions;
    bool with_log = has_diagnostics(log);
    const char **exprs = calloc(n + 1, sizeof *exprs);
    if (exprs == NULL)
        return KPC_E_NOMEM;
    for (size_t i = 0; i < n; i++)
        exprs[i] = src->name_expressions[i];
    if (with_log) {
        exprs[n] = KPC_NAMES_LOG;
        lowered[n] = log;
        reasons[n] = NULL;
    }
    kpc_status s = kpc_names_encode_reasons(exprs, lowered, reasons, n + with_log, &b->names, &b->names_size);
    free(exprs);
    return s;
}

/* Whether the request asks for relocatable device code of a compiler that then gives
 * bitcode in place of a code object. */
static bool wants_bitcode(const kpc_compiler *c, const kpc_source *src)
{
    if (c->rdc_option == NULL || c->has_bitcode == NULL || !c->has_bitcode())
        return false;
    for (size_t i = 0; i < src->num_options; i++)
        if (strcmp(src->options[i], c->rdc_option) == 0)
            return true;
    return false;
}

kpc_status kpc_compile_run(const kpc_compiler *c, const char *target, const kpc_source *src, kpc_build *b)
{
    memset(b, 0, sizeof *b);
    const kpc_option_table *table = kpc_options_for(c->name);
    /* a FIFO (or a device) an include would open blocks the compiler for good: refused
     * before it runs, so this request fails now and its waiters are released */
    kpc_status pre = kpc_include_check(table, src);
    if (pre != KPC_OK)
        return pre;
    /* the compilers take a C string: copy a length-delimited source */
    size_t len = src->code_len ? src->code_len : strlen(src->code);
    char *code = malloc(len + 1);
    const char **opts = calloc(src->num_options + 1 + KPC_COMPILE_DEPS_OPTIONS, sizeof *opts);
    const char **lowered = calloc(src->num_name_expressions + 1, sizeof *lowered);
    const char **reasons = calloc(src->num_name_expressions + 1, sizeof *reasons);
    char arch[96];
    if (code == NULL || opts == NULL || lowered == NULL || reasons == NULL) {
        free(code);
        free(opts);
        free(lowered);
        free(reasons);
        return KPC_E_NOMEM;
    }
    memcpy(code, src->code, len);
    code[len] = '\0';
    for (size_t i = 0; i < src->num_options; i++)
        opts[i] = src->options[i];
    snprintf(arch, sizeof arch, "%s%s", c->arch_option, target);
    int nopts = (int)src->num_options;
    opts[nopts++] = arch;
    /* the dependency file: the compiler's options for it after the caller's */
    char depfile[4200] = "";
    /* the caller's own dependency options (-MM leaves system headers out, -M only
     * preprocesses) would change what the file says: its files are unknown then */
    for (size_t i = 0; i < src->num_options; i++) {
        kpc_option o;
        kpc_option_classify(table, src->options, src->num_options, i, &o);
        if (o.cls == KPC_OPTION_DEPFILE)
            b->deps_unknown = true;
    }
    if (c->deps_from_file && !b->deps_unknown) {
        if (kpc_depfile_temp(depfile, sizeof depfile) == KPC_OK)
            nopts += (int)c->deps_options(depfile, opts + nopts);
        else
            b->deps_unknown = true;
    }

    kpc_status s = KPC_OK;
    if (c->lock)
        pthread_mutex_lock(c->lock);
    void *prog = NULL;
    int r = c->create(&prog, code, src->name ? src->name : c->default_name, src);
    const char *step = "create";
    if (r == 0 && prog == NULL)
        r = -1; /* "success" without a program: refused all the same */
    for (size_t i = 0; r == 0 && i < src->num_name_expressions; i++)
        if ((r = c->add_name(prog, src->name_expressions[i])) != 0)
            step = "name expression";
    if (r != 0) {
        /* refused before compiling: no log to read from a program that may not exist */
        s = r != -1 && c->classify(r) == KPC_COMPILE_NOMEM ? KPC_E_NOMEM : KPC_E_INVALID;
        KPC_LOG(KPC_LOG_ERROR, "%s refused the request at %s: %s", c->name, step,
                r == -1 ? "no program" : c->error_string(r));
    } else {
        step = "compile";
        r = c->compile(prog, nopts, opts);
        b->log = read_log(c, prog);
        size_t size = 0;
        b->bitcode = wants_bitcode(c, src);
        if (r == 0 && b->bitcode)
            r = c->bitcode_size(prog, &size);
        else if (r == 0)
            r = c->code_size(prog, target, &size);
        if (r == 0 && (b->code = malloc(size)) == NULL)
            s = KPC_E_NOMEM;
        else if (r == 0 && (r = b->bitcode ? c->bitcode(prog, b->code) : c->code(prog, target, b->code)) == 0)
            b->code_size = size;
        /* a name expression the compiler could not lower stays "" (then
         * kpc_program_lowered_name gives ""), with the compiler's reason beside it */
        for (size_t i = 0; r == 0 && s == KPC_OK && i < src->num_name_expressions; i++) {
            int lr = c->lowered(prog, src->name_expressions[i], &lowered[i]);
            if (lr != 0 || lowered[i] == NULL) {
                lowered[i] = "";
                reasons[i] = lr != 0 ? c->error_string(lr) : "no lowered name";
            }
        }
        if (r == 0 && s == KPC_OK)
            s = encode_names(src, lowered, reasons, b->log, b);
        if (r != 0 && s == KPC_OK && c->classify(r) == KPC_COMPILE_NOMEM)
            s = KPC_E_NOMEM; /* not the source's fault: never recorded as a compile error */
        else if (r != 0 && s == KPC_OK) {
            s = KPC_E_COMPILE;
            /* no diagnostics: the compiler failed for a reason of this process's (an
             * unusable TMPDIR makes hipRTC fail so), which another process must not
             * be told of as the source's */
            b->local = !has_diagnostics(b->log);
            if (b->local) {
                free(b->log);
                b->log = message(c, "", r);
            }
        }
    }
    if (prog)
        c->destroy(&prog); /* the lowered names die here: encoded above */
    if (c->lock)
        pthread_mutex_unlock(c->lock);
    /* the files it read: for an outcome that may be cached (a success, or a compile
     * error with diagnostics); the dependency file is removed either way */
    bool outcome = s == KPC_OK || (s == KPC_E_COMPILE && !b->local);
    kpc_status d = KPC_OK;
    if (depfile[0]) {
        char **paths = NULL;
        size_t n = 0;
        d = c->deps_from_file(depfile, &paths, &n); /* reads and removes it */
        if (outcome && d == KPC_OK)
            b->deps = paths, b->num_deps = n;
        else
            kpc_depfile_paths_free(paths, n);
    } else if (outcome && c->deps_scan) {
        bool unresolved = false;
        d = c->deps_scan(src, &b->deps, &b->num_deps, &unresolved);
        if (d == KPC_OK && unresolved && s == KPC_E_COMPILE)
            d = KPC_E_NOT_FOUND; /* perhaps a missing header: retried, never cached */
    }
    if (d == KPC_OK && b->num_deps)
        d = missed_lookups(table, src, b);
    if (d == KPC_E_NOMEM && s == KPC_OK)
        s = KPC_E_NOMEM;
    else if (d != KPC_OK)
        b->deps_unknown = true;
    if (b->deps_unknown) { /* nothing half known is handed on */
        kpc_depfile_paths_free(b->deps, b->num_deps);
        kpc_depfile_paths_free(b->absent, b->num_absent);
        b->deps = b->absent = NULL;
        b->num_deps = b->num_absent = 0;
    }
    free(reasons);
    free(lowered);
    free(code);
    free(opts);
    if (s != KPC_OK) {
        free(b->code);
        free(b->names);
        b->code = b->names = NULL;
        b->code_size = b->names_size = 0;
    }
    if (s != KPC_OK && s != KPC_E_COMPILE) {
        kpc_depfile_paths_free(b->deps, b->num_deps);
        kpc_depfile_paths_free(b->absent, b->num_absent);
        b->deps = b->absent = NULL;
        b->num_deps = b->num_absent = 0;
    }
    if (s == KPC_E_INVALID || s == KPC_E_NOMEM) {
        free(b->log);
        b->log = NULL;
    }
    return s;
}
