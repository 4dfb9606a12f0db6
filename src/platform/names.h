/*
 * names.h - the lowered-name table (platform/names.c): what a compile hands back for
 * the name expressions of a request, stored beside the code object in a record and
 * read by kpc_program_lowered_name.
 *
 * Format: u32 count, then for each name expression u32 length + bytes of the
 * expression, u32 length + bytes of its lowered name; little-endian; each string's bytes
 * include its terminating NUL, so a lowered name is returned in place.
 */
#ifndef KPC_PLATFORM_NAMES_H
#define KPC_PLATFORM_NAMES_H

#include "kpc/kpc.h"

#include <stdbool.h>
#include <stddef.h>

/* Encode n expressions and their lowered names (a NULL lowered name is stored as ""). */
kpc_status kpc_names_encode(const char *const *exprs, const char *const *lowered, size_t n,
                            void **out, size_t *size);
/* True if the table is well formed (every length in bounds, every string terminated). */
bool kpc_names_valid(const void *names, size_t size);
/* The lowered name of expr in a well-formed table, or NULL. */
const char *kpc_names_find(const void *names, size_t size, const char *expr);

#endif /* KPC_PLATFORM_NAMES_H */
