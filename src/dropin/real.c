/*
 * real.c - finding the real hipRTC or NVRTC, once per process, lazily (a hit never needs
 * it); the order is open_real's.
 *
 * Never ourselves: a candidate that exports kpc_dropin_marker is one of kpc's drop-ins
 * (under LD_LIBRARY_PATH, dlopen("libnvrtc.so.13") answers with kpc's own shim), so it is
 * skipped. Symbols are looked up with dlsym on the real library's handle, never with
 * RTLD_NEXT: in the linked mode there is no "next" to speak of.
 */
#define _GNU_SOURCE
#include "dropin/rtc.h"

#include "base/log.h"

#include <bsd/string.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Exported by every drop-in (see the version scripts): how real.c tells kpc's libraries
 * from the real ones. */
__attribute__((visibility("default"))) const char kpc_dropin_marker[] = "kpc drop-in";

static pthread_once_t once = PTHREAD_ONCE_INIT;
static _Atomic(const rtc_vendor *) vendor; /* the one vendor of this library (each links its own) */
static rtc_real real;
static bool found;

static bool is_ours(void *h)
{
    return dlsym(h, "kpc_dropin_marker") != NULL;
}

/* A usable real library: it has the API's compile and is not a drop-in. */
static void *accept(void *h, const char *what)
{
    char sym[64];
    if (h == NULL)
        return NULL;
    snprintf(sym, sizeof sym, "%sCompileProgram", vendor->prefix);
    if (is_ours(h) || dlsym(h, sym) == NULL) {
        KPC_LOG(KPC_LOG_DEBUG, "%s: %s is not the real library", vendor->name, what);
        dlclose(h);
        return NULL;
    }
    return h;
}

/* The first soname of the list in dir, by absolute path. */
static void *open_in(const char *dir)
{
    void *h = NULL;
    for (const char *const *s = vendor->sonames; h == NULL && *s; s++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, *s);
        if (access(path, F_OK) == 0)
            h = accept(dlopen(path, RTLD_NOW | RTLD_LOCAL), path);
    }
    return h;
}

/* dir with a leading "$VAR" expanded; false when VAR is unset or empty. */
static bool expand(const char *d, char *out, size_t cap)
{
    if (d[0] != '$')
        return strlcpy(out, d, cap) < cap;
    const char *slash = strchr(d, '/');
    size_t n = slash ? (size_t)(slash - d - 1) : strlen(d + 1);
    char var[64];
    if (n >= sizeof var)
        return false;
    memcpy(var, d + 1, n);
    var[n] = '\0';
    const char *val = getenv(var);
    return val && *val && (size_t)snprintf(out, cap, "%s%s", val, slash ? slash : "") < cap;
}

/* In order: the variable's path; a library of the list already loaded; the list in each
 * LD_LIBRARY_PATH directory by path (what the loader would find after a shim there); in
 * the vendor's usual directories; then by soname (ld.so.cache, the system's directories). */
static void *open_real(void)
{
    const char *env = kpc__setting_text(vendor->real_env);
    if (env) {
        void *h = accept(dlopen(env, RTLD_NOW | RTLD_LOCAL), env);
        if (h == NULL)
            KPC_LOG(KPC_LOG_ERROR, "%s: %s=%s is not a usable %s library: %s", vendor->name,
                    kpc__setting(vendor->real_env)->name, env, vendor->prefix, dlerror());
        return h;
    }
    void *h = NULL;
    for (const char *const *s = vendor->sonames; h == NULL && *s; s++)
        h = accept(dlopen(*s, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD), *s);
    const char *llp = getenv("LD_LIBRARY_PATH");
    char *paths = llp ? strdup(llp) : NULL, *save = NULL;
    for (char *d = paths ? strtok_r(paths, ":", &save) : NULL; h == NULL && d; d = strtok_r(NULL, ":", &save))
        h = open_in(d);
    free(paths);
    for (const char *const *d = vendor->dirs; h == NULL && *d; d++) {
        char dir[2048];
        if (expand(*d, dir, sizeof dir))
            h = open_in(dir);
    }
    for (const char *const *s = vendor->sonames; h == NULL && *s; s++)
        h = accept(dlopen(*s, RTLD_NOW | RTLD_LOCAL), *s);
    if (h == NULL)
        KPC_LOG(KPC_LOG_ERROR, "%s: no real %s library found (set %s to its path)", vendor->name,
                vendor->prefix, kpc__setting(vendor->real_env)->name);
    return h;
}

static void bind(void *fnp, const char *suffix)
{
    char sym[96];
    snprintf(sym, sizeof sym, "%s%s", vendor->prefix, suffix);
    *(void **)fnp = dlsym(real.handle, sym);
}

static void load(void)
{
    real.handle = open_real();
    if (real.handle == NULL)
        return;
    bind(&real.create, "CreateProgram");
    bind(&real.add_name, "AddNameExpression");
    bind(&real.compile, "CompileProgram");
    bind(&real.destroy, "DestroyProgram");
    bind(&real.lowered, "GetLoweredName");
    bind(&real.log_size, "GetProgramLogSize");
    bind(&real.log, "GetProgramLog");
    for (int k = 0; k < RTC_CODE_KINDS; k++) {
        if (vendor->code_fns[k][0]) {
            *(void **)&real.code_size[k] = dlsym(real.handle, vendor->code_fns[k][0]);
            *(void **)&real.code[k] = dlsym(real.handle, vendor->code_fns[k][1]);
        }
    }
    Dl_info info;
    if (dladdr((void *)real.compile, &info) && info.dli_fname)
        strlcpy(real.path, info.dli_fname, sizeof real.path);
    found = real.create && real.add_name && real.compile && real.destroy && real.lowered &&
            real.log_size && real.log && real.code_size[0] && real.code[0];
    if (!found)
        KPC_LOG(KPC_LOG_ERROR, "%s: %s lacks part of the program API", vendor->name, real.path);
    else
        KPC_LOG(KPC_LOG_INFO, "%s: the real library is %s", vendor->name, real.path);
}

const rtc_real *kpc_real_get(const rtc_vendor *v)
{
    atomic_store(&vendor, v); /* every caller stores the same one */
    pthread_once(&once, load);
    return found ? &real : NULL;
}

void *kpc_real_sym(const rtc_vendor *v, const char *name)
{
    kpc_real_get(v);
    if (real.handle == NULL)
        return NULL;
    void *f = dlsym(real.handle, name);
    if (f == NULL)
        KPC_LOG(KPC_LOG_ERROR, "%s: %s has no %s", v->name, real.path, name);
    return f;
}
