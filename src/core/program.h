/*
 * program.h - struct kpc_program (core/program.c): code object, lowered names, and on a
 * device context its module and kernel table.
 */
#ifndef KPC_CORE_PROGRAM_H
#define KPC_CORE_PROGRAM_H

#include "base/util.h"
#include "core/manifest.h"
#include "platform/platform.h"

#include <pthread.h>
#include <stdatomic.h>

typedef struct kpc_kernel_slot {
    char *name;
    void *fn;
} kpc_kernel_slot;

struct kpc_program {
    atomic_uint refs;
    kpc_key key;    /* the request's */
    kpc_key object; /* its record's: the key itself, or a manifest entry's object key */
    /* The files its compile read (core/manifest.h), checked on every hit of the map; NULL
     * when none. Immutable, owned. */
    kpc_deps *deps;
    /* Not cached: its files could not be vouched for (learned too late, or modified
     * within the race window); the map drops it as soon as it is handed out. */
    bool transient;
    void *code;
    size_t code_size;
    void *names; /* encoded lowered-name table */
    size_t names_size;
    /* device programs only */
    kpc_context *ctx;       /* not owned; the module's context outlives no program */
    void *module;
    int device;
    pthread_mutex_t kernels_lock; /* guards kernels, num_kernels, cap_kernels */
    kpc_kernel_slot *kernels;
    size_t num_kernels, cap_kernels;
};
/* A program of b's code and names (ownership taken; b's are NULL after); its object key
 * is key until the caller sets another. */
kpc_status kpc_program_new(const kpc_key *key, kpc_build *b, kpc_program **out);
/* The compiler's reason for an empty lowered name (platform/names.h), or NULL: for the
 * tools (`kpc compile` prints it). */
const char *kpc_program_lowered_reason(const kpc_program *prog, const char *name_expression);

#endif /* KPC_CORE_PROGRAM_H */
