/*
 * names.h - the lowered-name table (platform/names.c): what a compile hands back for
 * the name expressions of a request, stored beside the code object in a record and
 * read by kpc_program_lowered_name.
 *
 * Format: u32 count, then for each name expression u32 length + bytes of the
 * expression, u32 length + bytes of its lowered name; little-endian; each string's bytes
 * include its terminating NUL, so a lowered name is returned in place. An empty lowered
 * name may carry the compiler's reason after its NUL ("\0reason\0").
 *
 * The entry of the empty expression (KPC_NAMES_LOG), where there is one, holds the log of
 * the successful compile that made the table (warnings, remarks): no request may name the
 * empty expression, so it is never taken for a lowered name, and a reader that predates
 * it finds the names where they were. A table without it: the compiler said nothing (or
 * the record predates kept logs).
 */
#ifndef KPC_PLATFORM_NAMES_H
#define KPC_PLATFORM_NAMES_H

#include "kpc/kpc.h"

#include <stdbool.h>
#include <stddef.h>

/* Encode n expressions and their lowered names (a NULL lowered name is stored as ""). */
kpc_status kpc_names_encode(const char *const *exprs, const char *const *lowered, size_t n,
                            void **out, size_t *size);
/* kpc_names_encode, with reasons[i] (may be NULL, or an entry NULL) for an expression the
 * compiler gave no lowered name for: stored after the empty name's NUL, so every reader
 * of the table still finds "" there. */
kpc_status kpc_names_encode_reasons(const char *const *exprs, const char *const *lowered,
                                    const char *const *reasons, size_t n, void **out, size_t *size);
/* True if the table is well formed (every length in bounds, every string terminated). */
bool kpc_names_valid(const void *names, size_t size);
/* The lowered name of expr in a well-formed table, or NULL. */
const char *kpc_names_find(const void *names, size_t size, const char *expr);
/* The compiler's reason for an empty lowered name of expr; NULL when none was stored
 * (a name was given, or the table predates reasons, or expr is not in it). */
const char *kpc_names_reason(const void *names, size_t size, const char *expr);

/* The expression whose entry holds the log of a successful compile (see above). */
#define KPC_NAMES_LOG ""

#endif /* KPC_PLATFORM_NAMES_H */
