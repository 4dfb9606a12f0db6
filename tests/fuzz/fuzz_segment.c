/*
 * fuzz_segment.c - libFuzzer target for the host index's segment header checks.
 *
 * Each input is the whole content of a shared-memory segment. It is put under the name
 * the index of a private cache root uses, and the index is attached to it as an observer
 * (kpc_index_open_existing), which validates magic, format, size against fstat, slot
 * count, capacity and owner before trusting a byte of it; an accepted segment's counters
 * are read and it is detached. Oracle: no crash, no out-of-bounds access (ASan/UBSan),
 * and only the statuses the attach may return (KPC_OK, KPC_E_CORRUPT).
 *
 * With KPC_FUZZ_SEGMENT_DEEP=1 (scripts/fuzz.sh sets it, with lock and wait bounds of a
 * millisecond) an accepted segment's counters are read, its table is walked under its
 * lock (kpc_index_check) and it is asked for a key: the lock and slot words come from the
 * input, so this exercises the bounded locking and loops of the index (a damaged lock word,
 * a table without an empty slot, overwritten sizes). Before those were bounded, a damaged lock word hung kpc_index_counters_get (found
 * by this target in seconds).
 *
 * Seed: a segment the library itself creates (its format value depends on the layout
 * of this build) is generated at start-up into $KPC_FUZZ_SEED_DIR when that is set.
 */
#define _GNU_SOURCE
#include "fuzz_common.h"
#include "base/root.h"
#include "shm/index.h"

#include <sys/mman.h>

static char dir[4096], root[4096], name[96];
static bool deep;

static void write_seed(void)
{
    kpc_index *ix;
    /* capacity 8: the smallest table (16 slots), so the seed stays small */
    if (kpc_index_open(root, 8, false, &ix) != KPC_OK)
        abort();
    kpc_key key = {{1, 2, 3}};
    enum kpc_index_verdict v;
    bool waited;
    if (kpc_index_begin(ix, &key, 0, &v, &waited) == KPC_OK && v == KPC_INDEX_BUILD)
        kpc_index_publish(ix, &key, true, 1234); /* one READY slot in the seed */
    kpc_index_close(ix);
    char path[160];
    snprintf(path, sizeof path, "/dev/shm%s", name);
    fuzz_copy_seed(path, "segment");
    kpc_index_unlink(root);
}

static void unlink_segment(void)
{
    kpc_index_unlink(root);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    fuzz_quiet();
    fuzz_tmpdir(dir, sizeof dir);
    if (mkdir(dir, 0700) != 0 || realpath(dir, root) == NULL)
        abort();
    kpc_index_segment_name(root, name, sizeof name);
    atexit(unlink_segment);
    const char *d = getenv("KPC_FUZZ_SEGMENT_DEEP");
    deep = d && strcmp(d, "1") == 0;
    write_seed();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int fd = shm_open(name, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || (size && write(fd, data, size) != (ssize_t)size))
        abort();
    close(fd);
    kpc_index *ix = NULL;
    kpc_status s = kpc_index_open_existing(root, &ix);
    /* the name goes at once: a run stopped later (a timeout, a crash) leaves nothing in
     * /dev/shm, and the mapping lives on until the detach */
    kpc_index_unlink(root);
    if (s == KPC_OK) {
        if (deep) {
            /* these take the segment's locks, whose words come from the input */
            kpc_index_counters c;
            kpc_index_counters_get(ix, &c);
            kpc_index_check(ix);
            kpc_key key = {{9, 8, 7}};
            enum kpc_index_verdict v;
            bool waited;
            if (kpc_index_begin(ix, &key, 0, &v, &waited) == KPC_OK && v == KPC_INDEX_BUILD)
                kpc_index_abandon(ix, &key);
        }
        kpc_index_close(ix);
    } else if (s != KPC_E_CORRUPT)
        abort();
    return 0;
}
