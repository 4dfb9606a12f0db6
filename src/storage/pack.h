/*
 * pack.h - pack files: pre-built records in one read-only file (storage/pack.c), made by
 * `kpc pack create` and read through KPC_PACK_PATH (storage/pack_tier.h). Format:
 * docs/file-format.md ("Pack files").
 */
#ifndef KPC_STORAGE_PACK_H
#define KPC_STORAGE_PACK_H

#include "storage/record.h"

typedef struct kpc_pack kpc_pack;
typedef struct kpc_pack_entry {
    kpc_key key;
    uint64_t offset, size; /* the record's bytes in the pack */
    uint32_t kind;
    char target[64];
} kpc_pack_entry;

/* Open and check a pack (header, file size, index: the index alone is read); refused
 * packs are KPC_E_CORRUPT, logged with the reason; KPC_E_NOT_FOUND, KPC_E_IO. */
kpc_status kpc_pack_open(const char *path, kpc_pack **out);
void kpc_pack_close(kpc_pack *p);
/* The cache directory's trust rule applied to the pack held open (kpc_root_check_trust:
 * owned by this user or root, writable by no one else, nor the directories above it but
 * sticky ones): KPC_OK, or KPC_E_IO logged with the file and the rule. */
kpc_status kpc_pack_check_trust(const kpc_pack *p);
const char *kpc_pack_path(const kpc_pack *p);
size_t kpc_pack_count(const kpc_pack *p);
kpc_status kpc_pack_entry_get(const kpc_pack *p, size_t i, kpc_pack_entry *e);
/* Read one record (a pread of that entry only) and check it whole (kpc_record_take):
 * KPC_OK, KPC_E_NOT_FOUND, KPC_E_CORRUPT (a damaged entry: logged), KPC_E_IO,
 * KPC_E_NOMEM. Any thread, at once. */
kpc_status kpc_pack_read(kpc_pack *p, const kpc_key *key, const char *target, uint32_t kind,
                         kpc_record *out);
kpc_status kpc_pack_read_at(kpc_pack *p, size_t i, kpc_record *out);

/* Writing: create (a temp file beside path), add whole record images (each checked),
 * finish (index, header, fsync, rename; *count gets the entries kept, one per key,
 * target and kind) or discard (the temp file removed). A path that exists and is not a
 * regular file (a FIFO, device, symbolic link, directory) is refused, KPC_E_INVALID
 * (logged), by create and again by finish, and left untouched. */
typedef struct kpc_pack_writer kpc_pack_writer;
kpc_status kpc_pack_create(const char *path, kpc_pack_writer **out);
kpc_status kpc_pack_add(kpc_pack_writer *w, const void *record, size_t size);
kpc_status kpc_pack_finish(kpc_pack_writer *w, size_t *count);
void kpc_pack_discard(kpc_pack_writer *w);

#endif /* KPC_STORAGE_PACK_H */
