/*
 * program.h - struct kpc_program (core/program.c): code object, lowered names, and on a
 * device context its module and kernel table.
 */
#ifndef KPC_CORE_PROGRAM_H
#define KPC_CORE_PROGRAM_H

#include "base/util.h"
#include "platform/platform.h"

#include <pthread.h>
#include <stdatomic.h>

typedef struct kpc_kernel_slot {
    char *name;
    void *fn;
} kpc_kernel_slot;

struct kpc_program {
    atomic_uint refs;
    kpc_key key;
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
/* A program of b's code and names (ownership taken; b's are NULL after). */
kpc_status kpc_program_new(const kpc_key *key, kpc_build *b, kpc_program **out);

#endif /* KPC_CORE_PROGRAM_H */
