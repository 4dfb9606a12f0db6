/*
 * depfile.h - make-format dependency files (platform/depfile.c): how a compiler that
 * is asked for one (hipRTC's clang) tells the files it read.
 */
#ifndef KPC_PLATFORM_DEPFILE_H
#define KPC_PLATFORM_DEPFILE_H

#include "kpc/kpc.h"

#include <stddef.h>

/*
 * Parse a make-format dependency file: the first rule's target and its prerequisites,
 * unescaped (clang escapes ' ' as "\ " with the backslashes before it doubled, '#' as
 * "\#", '$' as "$$"; lines continue with a backslash-newline). *target and every
 * (*paths)[i] are malloc'd, *paths too (kpc_depfile_paths_free). KPC_E_CORRUPT when
 * there is no rule; KPC_E_NOMEM.
 */
kpc_status kpc_depfile_parse(const char *text, size_t len, char **target, char ***paths, size_t *n);
/* Create an empty temporary file (in $TMPDIR, else /tmp) for a compiler's dependency
 * file; path gets its name ("" on failure, logged: KPC_E_IO). */
kpc_status kpc_depfile_temp(char *path, size_t cap);
/* Free what kpc_depfile_parse (or a platform's dependency list) gave; NULL is fine. */
void kpc_depfile_paths_free(char **paths, size_t n);

#endif /* KPC_PLATFORM_DEPFILE_H */
