/*
 * rtc.h - the engine both drop-ins (libkpc-hiprtc, libkpc-nvrtc) share: a runtime-compiler
 * program API (hipRTC and NVRTC have the same shape) answered from kpc where the request
 * can be keyed, and forwarded to the real library where it cannot.
 *
 * A vendor file (hiprtc.c, nvrtc.c) exports the API's symbols as thin calls into rtc_*,
 * and describes its API in an rtc_vendor: the real library's names, how an option names
 * the target, which code the cache holds. Each drop-in library links its own copy of the
 * engine and of kpc (hidden), so their state never mixes.
 */
#ifndef KPC_DROPIN_RTC_H
#define KPC_DROPIN_RTC_H

#include "kpc/kpc.h"
#include "dropin/rtc_abi.h"
#include "base/settings.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* code object / cubin; PTX; LLVM bitcode (hipRTC -fgpu-rdc from ROCm 5.3: its bitcode calls) */
enum { RTC_CODE_BINARY = 0, RTC_CODE_TEXT = 1, RTC_CODE_BITCODE = 2, RTC_CODE_KINDS = 3 };

/* The real library's program API, bound by dlsym on its own handle (real.c). */
typedef struct rtc_real {
    void *handle;
    char path[4096]; /* where it was loaded from, as dladdr tells */
    int (*create)(void **, const char *, const char *, int, const char *const *, const char *const *);
    int (*add_name)(void *, const char *);
    int (*compile)(void *, int, const char *const *);
    int (*destroy)(void **);
    int (*lowered)(void *, const char *, const char **);
    int (*log_size)(void *, size_t *);
    int (*log)(void *, char *);
    int (*code_size[RTC_CODE_KINDS])(void *, size_t *); /* by code kind; NULL where the API has none */
    int (*code[RTC_CODE_KINDS])(void *, char *);
} rtc_real;


typedef struct rtc_vendor {
    const char *name;           /* "hiprtc", "nvrtc": logs and the stats line */
    const char *prefix;         /* of the API's symbols: "hiprtc", "nvrtc" */
    kpc_setting_id real_env;    /* the variable naming the real library's path */
    const char *const *sonames; /* the real library's sonames, tried in order */
    const char *const *dirs;    /* then these directories, by absolute path ("$VAR/sub" expands) */
    const char *code_fns[RTC_CODE_KINDS][2]; /* {size, get} symbol names per code kind, NULL for none */
    bool log_counts_nul;        /* the log size counts a terminating NUL (NVRTC) */
    bool empty_code_after_failure; /* the code size after a failed compile is 0, with
                                    * success (hipRTC 5.2, tried); else asked of the real one */
    const char *default_name;   /* the program name a NULL name stands for; NULL: forward it */
    /* The target when no option names one: KPC_OK, or anything else to forward. */
    kpc_status (*default_target)(kpc_cache *cache, char *out, size_t cap);
    /* The code kind the cache holds for target (a bitcode record is RTC_CODE_BITCODE
     * whatever the target). */
    int (*code_kind)(const char *target);
} rtc_vendor;

/* real.c: the real library, found once (thread-safe); NULL when none (logged). */
const rtc_real *kpc_real_get(const rtc_vendor *v);
/* A symbol of the real library (dlsym on its handle); NULL when absent (logged). */
void *kpc_real_sym(const rtc_vendor *v, const char *name);

/* rtc_process.c: the process's side of the engine. */
typedef struct rtc_counters {
    _Atomic(const rtc_vendor *) vendor; /* set by the first create: the stats line at exit */
    _Atomic uint64_t compiles, kpc, forwarded, materialized;
} rtc_counters;
extern rtc_counters kpc_rtc_counters;
bool kpc_rtc_disabled(void); /* KPC_DISABLE=1: every call goes to the real library */
/* The compile-only context for target, or (target NULL) for the vendor's default; NULL
 * when kpc cannot serve it (logged): forward. */
kpc_context *kpc_rtc_context_for(const rtc_vendor *v, const char *target);
/* The set of the engine's program handles: add (false: out of memory), remove, and
 * whether p is one of them (p itself is never read). */
bool kpc_rtc_handle_add(void *p);
void kpc_rtc_handle_remove(void *p);
bool kpc_rtc_handle_known(const void *p);

/* rtc.c: the program API. prog handles made by rtc_create are the engine's; a handle it
 * did not make (KPC_DISABLE=1 makes none) is passed to the real library as it is. */
int kpc_rtc_create(const rtc_vendor *v, void **prog, const char *src, const char *name, int num_headers,
               const char *const *headers, const char *const *include_names);
int kpc_rtc_add_name(const rtc_vendor *v, void *prog, const char *expr);
int kpc_rtc_compile(const rtc_vendor *v, void *prog, int num_options, const char *const *options);
int kpc_rtc_code_size(const rtc_vendor *v, void *prog, int kind, size_t *size);
int kpc_rtc_code(const rtc_vendor *v, void *prog, int kind, char *code);
int kpc_rtc_lowered(const rtc_vendor *v, void *prog, const char *expr, const char **lowered);
int kpc_rtc_log_size(const rtc_vendor *v, void *prog, size_t *size);
int kpc_rtc_log(const rtc_vendor *v, void *prog, char *log);
int kpc_rtc_destroy(const rtc_vendor *v, void **prog);
/* The real program behind prog, for the API's other calls (bitcode, LTO IR...): made
 * (and compiled, if prog was) on first need; NULL prog or a foreign handle as it is. */
void *kpc_rtc_real_program(const rtc_vendor *v, void *prog);


/* Forwarders for the API's calls kpc does not touch. */
#define RTC_FORWARD(v, fn, params, args)                                                        \
    int fn params                                                                                \
    {                                                                                            \
        int(*real_fn) params = (int(*) params)kpc_real_sym(v, #fn);                              \
        return real_fn ? real_fn args : RTC_ERROR_INTERNAL_ERROR;                                \
    }

#endif
