/*
 * identity.h - what the platforms share to name their compiler (platform/identity.c).
 * A fingerprint file among the cache dir's memos remembers (path, dev, inode, size,
 * mtime) of each file the identity was hashed from, so a later process re-stats them
 * instead of loading the compiler.
 */
#ifndef KPC_PLATFORM_IDENTITY_H
#define KPC_PLATFORM_IDENTITY_H

#include "base/root.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct kpc_identity_files {
    size_t count;
    char paths[32][512];
} kpc_identity_files;
/* Read the remembered identity for `platform` (root may be NULL: none); true if every
 * file still matches. */
bool kpc_identity_recall(const kpc_root *root, const char *platform, uint8_t id[16]);
void kpc_identity_remember(const kpc_root *root, const char *platform, const kpc_identity_files *f,
                           const uint8_t id[16]);
/* The NT_GNU_BUILD_ID of a loaded object whose path contains `needle`; found through
 * dl_iterate_phdr. Copies the path into path_out. Returns the id length, 0 if none. */
size_t kpc_identity_loaded_build_id(const char *needle, uint8_t *id, size_t cap, char *path_out,
                                    size_t path_cap);
/* Hash the build id of the loaded object whose path contains `needle` into st, remember
 * its path in files and append "needle:<first 8 bytes hex>" to desc (logged when absent). */
struct XXH3_state_s;
void kpc_identity_add_build_id(struct XXH3_state_s *st, kpc_identity_files *files, const char *needle,
                               char *desc, size_t desc_cap);

#endif /* KPC_PLATFORM_IDENTITY_H */
