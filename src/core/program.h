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

/* One thread slot's share of a mapped program's references (core/program.c). */
typedef struct kpc_ref_slot {
    _Alignas(64) _Atomic int64_t n;
    char pad[56];
} kpc_ref_slot;
#define KPC_REF_SLOTS 32

struct kpc_program {
    /* References: see the top comment of core/program.c. slots is NULL until the program
     * is first hit in a context's map. */
    _Atomic int64_t refs;
    _Atomic(kpc_ref_slot *) slots;
    kpc_key key;    /* the request's */
    kpc_key object; /* its record's: the key itself, or a manifest entry's object key */
    /* The files its compile read (core/manifest.h), checked on every hit of the map; NULL
     * when none. Immutable, owned; its bytes may lie in block, before the record's (a
     * manifest's record read whole: core/manifest_seen.c), and live as long. */
    kpc_deps *deps;
    /* Not cached: its files could not be vouched for (learned too late, or modified
     * within the race window); the map drops it as soon as it is handed out. */
    bool transient;
    /* Built for the working directory whose digest is cwd (a relative source whose
     * directory the compiler searches, and that includes): a map hit in another directory
     * misses (core/request.c). */
    bool cwd_bound;
    uint8_t cwd[16];
    /* Owned: the allocation code lies in: a build's code itself, or the allocation its
     * record was read in (names, request and, from a manifest, deps' bytes too) */
    void *block;
    void *names_block; /* owned: a build's names, apart from block (NULL: in block) */
    void *code;
    size_t code_size;
    bool bitcode; /* code is LLVM bitcode (a -fgpu-rdc compile): never loaded as a module */
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
 * is key until the caller sets another. Like every program made, it holds the map's
 * reference beside the caller's until kpc_map_publish hands the first to the map (or
 * kpc_program_discard drops both); a hit counts in its thread's slot from then on. */
kpc_status kpc_program_new(const kpc_key *key, kpc_build *b, kpc_program **out);
/* A program of the CODE record rec read from a tier: its allocation (rec->block) moves
 * into the program, code and names read where they lie (rec->block and rec->payload
 * NULL after, whatever the outcome). */
struct kpc_record;
kpc_status kpc_program_from_record(const kpc_key *key, struct kpc_record *rec, kpc_program **out);
/* A program made and never published to a map (its maker refused it): the map's
 * reference it was born with and the maker's let go, and the program freed. */
void kpc_program_discard(kpc_program *prog);
/* A hit's reference, taken inside the map's read section: no shared line written. */
void kpc_program_hit(kpc_program *prog);
/* The map lets go of prog; only once no read section can still hand it out (after
 * kpc_grace_wait). Frees it when nothing else holds it. */
void kpc_program_map_drop(kpc_program *prog);
/* The log of the successful compile that made prog (warnings, remarks), kept in its
 * record; "" when the compiler said nothing. For the drop-ins, which hand it back as the
 * real library would. */
const char *kpc_program_build_log(const kpc_program *prog);
/* Whether prog's code is LLVM bitcode (a relocatable-device-code compile, for a link
 * step) rather than a code object: for the drop-ins, which hand it back through the
 * bitcode calls. */
bool kpc_program_is_bitcode(const kpc_program *prog);
/* The compiler's reason for an empty lowered name (platform/names.h), or NULL: for the
 * tools (`kpc compile` prints it). */
const char *kpc_program_lowered_reason(const kpc_program *prog, const char *name_expression);

#endif /* KPC_CORE_PROGRAM_H */
