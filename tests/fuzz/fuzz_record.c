/*
 * fuzz_record.c - libFuzzer target for the record parser (the disk tree's reader).
 *
 * Each input is the whole content of one record file. It is checked by the record parser
 * itself (kpc_record_take, kpc_record_decode_header: what every tier reads through), as
 * a code record and as a log record, as it is and with both checksums made right (so
 * that mutations reach the checks behind them). One input in eight is also written where
 * the record of a fixed key lies and read back through the store's own read path, then
 * the tree is walked with verification, as `kpc verify` does. Oracle: nothing crashes,
 * leaks or reads out of bounds (ASan/UBSan); a record is either refused (and a refused
 * file is gone from the tree) or taken with exactly the payload bytes the input carries
 * after its 256-byte header, for the key, kind and target asked for.
 *
 * Seeds: records the library itself writes (a code record with lowered names, a log
 * record) are generated at start-up into $KPC_FUZZ_SEED_DIR when it is set, so they
 * follow the format if it changes; tests/fuzz/corpus/record/ keeps a copy and what
 * earlier runs found interesting.
 */
#define _GNU_SOURCE
#include "fuzz_common.h"
#include "storage/request_codec.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

static kpc_store *store;
static char dir[4096];
static kpc_key key;
static const char target[] = "gfx90a";

static void write_seeds(void)
{
    /* a code record with a lowered-name table and a log record, as the writer makes them */
    const char *exprs[] = {"k<1>", "saxpy"}, *lowered[] = {"_Z1kILi1EEvv", "saxpy"};
    void *names;
    size_t names_size;
    if (kpc_names_encode(exprs, lowered, 2, &names, &names_size) != KPC_OK)
        abort();
    static const char code[] = "\x7f" "ELF fake code object bytes for the fuzzer";
    kpc_record rec = {.key = key, .kind = KPC_RECORD_CODE, .created_ns = 1};
    snprintf(rec.target, sizeof rec.target, "%s", target);
    snprintf(rec.source_name, sizeof rec.source_name, "seed.hip");
    rec.code_size = sizeof code;
    rec.names_size = names_size;
    if (kpc_store_write(store, &rec, code, names, names_size) != KPC_OK)
        abort();
    fuzz_copy_seed(fuzz_record_path(dir, target, &key, "co"), "code");
    rec.kind = KPC_RECORD_LOG;
    if (kpc_store_write(store, &rec, "error: expected ';'\n", NULL, 0) != KPC_OK)
        abort();
    fuzz_copy_seed(fuzz_record_path(dir, target, &key, "log"), "log");
    free(names);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    fuzz_quiet();
    fuzz_tmpdir(dir, sizeof dir);
    for (int i = 0; i < 16; i++)
        key.bytes[i] = (uint8_t)(0xa0 + i);
    if (kpc_store_open(dir, 1ull << 40, &store) != KPC_OK)
        abort();
    write_seeds();
    return 0;
}

/* Read the record of kind from the file holding data; check the oracle. */
static void read_one(const uint8_t *data, size_t size, uint32_t kind, const char *ext)
{
    const char *path = fuzz_record_path(dir, target, &key, ext);
    fuzz_write_file(path, data, size);
    kpc_record rec;
    kpc_status s = kpc_store_read(store, &key, target, kind, &rec);
    if (s == KPC_OK) {
        /* accepted: it must be exactly what the input says, for the key and target asked */
        if (size < 256 || memcmp(rec.key.bytes, key.bytes, 16) != 0 || strcmp(rec.target, target) != 0 ||
            rec.kind != kind || rec.code_size + rec.names_size != size - 256 ||
            memcmp(rec.payload, data + 256, size - 256) != 0)
            abort();
        if (kind == KPC_RECORD_CODE && (rec.code_size == 0 ||
                                        !kpc_names_valid((uint8_t *)rec.payload + rec.code_size,
                                                         rec.names_size)))
            abort();
        kpc_record_free(&rec);
    } else if (s == KPC_E_CORRUPT) {
        if (fuzz_exists(path)) /* a refused file is removed (it is still the one read) */
            abort();
    } else
        abort(); /* a regular file that is there: never NOT_FOUND or IO */
}

/* The parser alone: taken only whole and right. */
static void parse_one(const uint8_t *data, size_t size, uint32_t kind)
{
    kpc_record hdr;
    const char *why_header = kpc_record_decode_header(data, size, &hdr);
    void *buf = malloc(size ? size : 1);
    if (buf == NULL)
        abort();
    memcpy(buf, data, size);
    kpc_record rec;
    memset(&rec, 0, sizeof rec);
    const char *why = kpc_record_take(buf, size, &key, target, kind, &rec); /* takes buf */
    if (why == NULL) {
        if (why_header != NULL || size < 256 || memcmp(rec.key.bytes, key.bytes, 16) != 0 ||
            strcmp(rec.target, target) != 0 || rec.kind != kind ||
            rec.code_size + rec.names_size != size - 256 || memcmp(rec.payload, data + 256, size - 256) != 0)
            abort();
        if (kind == KPC_RECORD_CODE &&
            (rec.code_size == 0 || !kpc_names_valid((uint8_t *)rec.payload + rec.code_size, rec.names_size)))
            abort();
        if (rec.request_size) { /* what a hit compares and a replay decodes: never a crash */
            static const kpc_source probe = {.code = "__global__ void k() {}", .name = "k.hip"};
            (void)kpc_request_compare(rec.request, rec.request_size, &probe);
            kpc_request rq;
            if (kpc_request_decode(rec.request, rec.request_size, &rq) == KPC_OK)
                kpc_request_free(&rq);
        }
        kpc_record_free(&rec);
    }
}

static int count_entry(const kpc_store_entry *e, void *arg)
{
    (void)e;
    (*(int *)arg)++;
    return 0;
}

/* The input with both checksums made right (offsets: docs/file-format.md), so that the
 * mutations reach the checks behind them: sizes, key, kind, target, the name table. */
static uint8_t *with_sums(const uint8_t *data, size_t size)
{
    uint8_t *d = malloc(size);
    if (d == NULL)
        abort();
    memcpy(d, data, size);
    uint64_t sum = XXH3_64bits(d + 256, size - 256);
    for (int i = 0; i < 8; i++)
        d[64 + i] = (uint8_t)(sum >> (8 * i));
    sum = XXH3_64bits(d, 248);
    for (int i = 0; i < 8; i++)
        d[248 + i] = (uint8_t)(sum >> (8 * i));
    return d;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *fixed = size >= 256 ? with_sums(data, size) : NULL;
    parse_one(data, size, KPC_RECORD_CODE);
    parse_one(data, size, KPC_RECORD_LOG);
    if (fixed) {
        parse_one(fixed, size, KPC_RECORD_CODE);
        parse_one(fixed, size, KPC_RECORD_LOG);
    }
    if (size % 8 == 0) { /* one in eight: the store's own paths too (files, so slower) */
        read_one(data, size, KPC_RECORD_CODE, "co");
        read_one(data, size, KPC_RECORD_LOG, "log");
        if (fixed) {
            read_one(fixed, size, KPC_RECORD_CODE, "co");
            read_one(fixed, size, KPC_RECORD_LOG, "log");
        }
        /* the verifying walk parses the same bytes through its own path (alone in the tree) */
        unlink(fuzz_record_path(dir, target, &key, "log"));
        fuzz_write_file(fuzz_record_path(dir, target, &key, "co"), data, size);
        int n = 0;
        if (kpc_store_walk(store, true, count_entry, &n) != KPC_OK || n > 1)
            abort();
        unlink(fuzz_record_path(dir, target, &key, "co"));
    }
    free(fixed);
    return 0;
}
