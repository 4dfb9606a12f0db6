/*
 * shared_tier.c - the tier of a cache directory several hosts mount (KPC_SHARED_DIR: NFS,
 * Lustre, or any directory other processes also name), walked after the host's disk tree
 * and the packs, before the cluster tier.
 *
 * It is the disk tree at a second root (storage/store.c: kpc_store_open_shared, and the
 * disk tree's ops): the same layout, the same O_EXCL temp file and rename for every
 * write, the same checks of every read, the same trust rule as the cache directory
 * (base/root.c). A host that builds a key stores the record here as well (the tier is
 * writable); another host that misses on its own disk reads it here, and the walk
 * (storage/tier.c) copies it into that host's disk, so its next process reads it
 * locally. A damaged record is refused as on the local disk: a miss, removed where the
 * directory lets us, never copied.
 *
 * What differs from the cache directory: the directory must exist already (a missing
 * mount is never replaced by a local directory of its name, which would look like a
 * shared cache and share nothing); one that is missing, refused or cannot be opened
 * leaves the tier off for the process, logged, and the cache goes on without it. And
 * the store keeps no size limit (kpc_store_open_shared says why).
 *
 * Unlike the cluster tier it coordinates nothing: two hosts missing one key at once both
 * compile it, and the second rename replaces the first's record with the same bytes.
 */
#define _GNU_SOURCE
#include "storage/store.h"
#include "base/fault.h"
#include "base/log.h"
#include "base/settings.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>

kpc_status kpc_shared_tier_open(const kpc_tier_env *env, kpc_tier **out)
{
    (void)env;
    *out = NULL;
    const char *dir = kpc__setting_text(KPC_SET_SHARED_DIR);
    if (dir == NULL)
        return KPC_E_NOT_FOUND;
    struct stat sb;
    if (kpc__fstatat(AT_FDCWD, dir, &sb, 0) != 0) {
        KPC_LOG(KPC_LOG_WARN, "KPC_SHARED_DIR %s: %s: not created, since a missing mount must not "
                "become a local directory", dir, strerror(errno));
        return KPC_E_IO;
    }
    kpc_store *st;
    kpc_status s = kpc_store_open_shared(dir, &st); /* a refusal is logged by the root */
    return s == KPC_OK ? kpc_store_tier(st, out) : s;
}
