/*
 * compile.h - the compile steps every platform shares (platform/compile.c): the source
 * made a C string, the options with the target option appended, create, add the name
 * expressions, compile, read the log, take the code and the lowered names, destroy;
 * and the one mapping of failures to statuses:
 *
 *   out of memory (any step)                 KPC_E_NOMEM, never shared
 *   refused before compiling (create, names) KPC_E_INVALID (a clear status; the log
 *                                            says what the compiler said)
 *   compile failed, with diagnostics         KPC_E_COMPILE, shared across processes
 *   compile failed, no diagnostics           KPC_E_COMPILE with b->local: the
 *                                            environment's fault (TMPDIR, an internal
 *                                            error), never shared
 *
 * A platform file fills a kpc_compiler with its own API calls and nothing else.
 */
#ifndef KPC_PLATFORM_COMPILE_H
#define KPC_PLATFORM_COMPILE_H

#include "platform/platform.h"

#include <pthread.h>

/* The most options a compiler's deps_options writes. */
#define KPC_COMPILE_DEPS_OPTIONS 16

/* What a compiler's result code means (the platform's classify). */
enum kpc_compile_class {
    KPC_COMPILE_OK = 0,
    KPC_COMPILE_NOMEM,  /* out of memory */
    KPC_COMPILE_FAILED, /* anything else */
};

typedef struct kpc_compiler {
    const char *name;          /* "hipRTC", "NVRTC": in messages */
    const char *arch_option;   /* the option that sets the target, "=" included */
    const char *default_name;  /* a source's name when the request gives none */
    pthread_mutex_t *lock;     /* held from create to destroy (hipRTC 5.2: one at a time), or NULL */
    /* Each returns the compiler's own result code (0: success); prog is opaque. */
    int (*create)(void **prog, const char *code, const char *name, const kpc_source *src);
    int (*add_name)(void *prog, const char *expr);
    int (*compile)(void *prog, int num_options, const char **options);
    /* The log's size and text (size + 1 bytes are given: the text need not be terminated). */
    int (*log_size)(void *prog, size_t *size);
    int (*log)(void *prog, char *out);
    /* The code object for target: its size (0 is a failure the platform reports), then
     * its bytes. */
    int (*code_size)(void *prog, const char *target, size_t *size);
    int (*code)(void *prog, const char *target, void *out);
    /* Where a request with the option rdc_option gives bitcode (has_bitcode says whether
     * this compiler does: hipRTC 5.3 and later), its size and bytes in place of the code
     * object's; NULL for a compiler without. */
    const char *rdc_option;
    bool (*has_bitcode)(void);
    int (*bitcode_size)(void *prog, size_t *size);
    int (*bitcode)(void *prog, void *out);
    int (*lowered)(void *prog, const char *expr, const char **out);
    void (*destroy)(void **prog);
    enum kpc_compile_class (*classify)(int result);
    const char *(*error_string)(int result);
    /* The files the compile reads (kpc_build.deps). A compiler that writes a make-format
     * dependency file when given the options deps_options writes for it (at most
     * KPC_COMPILE_DEPS_OPTIONS; hipRTC's clang) sets those and deps_from_file: it gets
     * that file after the compile and lists the files that are not its own. A
     * compiler without (NVRTC) sets deps_scan, which finds them from the request and says
     * whether an include was found nowhere (then a compile error is not cached: it may
     * be a missing header, whose later arrival no manifest would notice). Each
     * returns KPC_E_NOT_FOUND when it cannot tell (the outcome is then not cached).
     * Neither: the compile reads no file. */
    size_t (*deps_options)(const char *depfile, const char **opts);
    kpc_status (*deps_from_file)(const char *depfile, char ***paths, size_t *n);
    kpc_status (*deps_scan)(const kpc_source *src, char ***paths, size_t *n, bool *unresolved);
} kpc_compiler;

/* Compile src for target with c (the platform has loaded its library already). */
kpc_status kpc_compile_run(const kpc_compiler *c, const char *target, const kpc_source *src, kpc_build *b);

#endif /* KPC_PLATFORM_COMPILE_H */
