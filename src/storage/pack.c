/*
 * pack.c - pack files: pre-built records shipped with an application (`kpc pack`).
 *
 * A pack is one file: a 64-byte header, then the records, each the exact bytes of a
 * record file of the disk tree (its own header, key, target and two checksums), then an
 * index of 104-byte entries sorted by (key, target, kind), which the header locates and
 * checksums. Layout: docs/file-format.md ("Pack files").
 *
 * Invariants:
 *   - Opening checks the header, that the file is exactly as long as the header says
 *     (a truncated or extended pack is refused whole, with a log line), and the index's
 *     checksum and bounds; only the index is read into memory.
 *   - An entry is read with pread when asked for, never mmap'ed (a file shrinking under
 *     an mmap raises SIGBUS), and checked exactly like a record read from disk
 *     (kpc_record_take): a damaged entry is refused (KPC_E_CORRUPT, logged) and the
 *     caller builds the object instead. A pack is never written to after creation.
 *   - A pack is created under a temp name beside its final name (O_EXCL), fsync'ed and
 *     renamed, so a reader never sees half a pack; the header is written last. It is
 *     renamed only over nothing or a regular file: a FIFO, device, link or directory of
 *     that name is refused and left as it is.
 *   - The pack tier takes code only from a pack that passes the cache directory's trust
 *     rule (kpc_pack_check_trust: base/root.c's kpc_root_check_trust).
 *   - Every system call goes through the fault seam (base/fault.h).
 *   - kpc_pack handles are read-only after open: any thread may read at once (pread
 *     has no shared file offset).
 */
#define _GNU_SOURCE
#include "storage/pack.h"
#include "base/hash.h"
#include "base/bytes.h"
#include "base/fault.h"
#include "base/log.h"
#include "base/root.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PACK_MAGIC "KPCPACK\x01"
#define PACK_VERSION 1u
#define PACK_HEADER 64u
#define PACK_ENTRY 104u
#define RECORD_HEADER KPC_RECORD_HEADER
#define MAX_ENTRY (3 * KPC_RECORD_MAX + RECORD_HEADER)
#define MAX_ENTRIES (1ull << 24)

enum { P_MAGIC = 0, P_VERSION = 8, P_HSIZE = 12, P_COUNT = 16, P_INDEX = 24, P_FSIZE = 32,
       P_ISUM = 40, P_ESIZE = 48, P_RESERVED = 52, P_HSUM = 56 };
_Static_assert(P_HSUM + 8 == PACK_HEADER, "the pack header must add up to PACK_HEADER");
enum { E_KEY = 0, E_OFFSET = 16, E_SIZE = 24, E_KIND = 32, E_FLAGS = 36, E_TARGET = 40 };
_Static_assert(E_TARGET + 64 == PACK_ENTRY, "the index entry must add up to PACK_ENTRY");

struct kpc_pack {
    int fd;
    char path[4096];
    uint64_t count;
    uint8_t *index; /* count x PACK_ENTRY, checked at open */
};

/* ---- the codec: the header and an index entry, through base/bytes.h ------------------- */
typedef struct pack_header {
    uint32_t version, hsize, esize;
    uint64_t count, index, fsize, isum, hsum;
} pack_header;

/* false: no pack magic (or not PACK_HEADER bytes) */
static bool header_decode(const uint8_t h[PACK_HEADER], pack_header *ph)
{
    kpc__reader in;
    kpc__reader_init(&in, h, PACK_HEADER);
    bool magic = memcmp(kpc__get_bytes(&in, 8), PACK_MAGIC, 8) == 0;
    ph->version = kpc__get_u32(&in);
    ph->hsize = kpc__get_u32(&in);
    ph->count = kpc__get_u64(&in);
    ph->index = kpc__get_u64(&in);
    ph->fsize = kpc__get_u64(&in);
    ph->isum = kpc__get_u64(&in);
    ph->esize = kpc__get_u32(&in);
    kpc__get_skip(&in, 4); /* reserved */
    ph->hsum = kpc__get_u64(&in);
    return magic && kpc__reader_done(&in);
}

static void header_encode(uint8_t h[PACK_HEADER], uint64_t count, uint64_t index, uint64_t isize,
                          uint64_t isum)
{
    kpc__writer w;
    kpc__writer_fixed(&w, h, PACK_HEADER);
    kpc__put_bytes(&w, PACK_MAGIC, 8);
    kpc__put_u32(&w, PACK_VERSION);
    kpc__put_u32(&w, PACK_HEADER);
    kpc__put_u64(&w, count);
    kpc__put_u64(&w, index);
    kpc__put_u64(&w, index + isize);
    kpc__put_u64(&w, isum);
    kpc__put_u32(&w, PACK_ENTRY);
    kpc__put_u32(&w, 0); /* reserved */
    kpc__put_u64(&w, w.len == P_HSUM ? XXH3_64bits(h, P_HSUM) : 0);
}

/* An index entry's fields; false when its target is empty or not terminated. */
static bool entry_decode(const uint8_t *x, kpc_pack_entry *e)
{
    kpc__reader in;
    kpc__reader_init(&in, x, PACK_ENTRY);
    kpc__get_copy(&in, e->key.bytes, 16);
    e->offset = kpc__get_u64(&in);
    e->size = kpc__get_u64(&in);
    e->kind = kpc__get_u32(&in);
    kpc__get_skip(&in, 4); /* flags */
    kpc__get_fixed_str(&in, e->target, sizeof e->target);
    return kpc__reader_done(&in) && e->target[0] != '\0';
}

static void entry_encode(uint8_t *x, const kpc_key *key, uint64_t offset, uint64_t size, uint32_t kind,
                         const char *target)
{
    kpc__writer w;
    kpc__writer_fixed(&w, x, PACK_ENTRY);
    kpc__put_bytes(&w, key->bytes, 16);
    kpc__put_u64(&w, offset);
    kpc__put_u64(&w, size);
    kpc__put_u32(&w, kind);
    kpc__put_u32(&w, 0); /* flags */
    kpc__put_fixed_str(&w, target, 64);
}

/* pread exactly n bytes at off; -1 on an error (errno), else the bytes read (short at EOF). */
static ssize_t pread_full(int fd, void *buf, size_t n, uint64_t off)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = kpc__pread(fd, (char *)buf + got, n - got, (off_t)(off + got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -1;
        if (r == 0)
            break;
        got += (size_t)r;
    }
    return (ssize_t)got;
}

/* ---- reading ----------------------------------------------------------------------- */
static kpc_status refuse(kpc_pack *p, const char *why)
{
    KPC_LOG(KPC_LOG_ERROR, "pack %s refused: %s", p->path, why);
    return KPC_E_CORRUPT;
}

/* Compare an index entry with (key, target, kind), in the index's order. */
static int entry_cmp(const uint8_t *x, const kpc_key *key, const char *target, uint32_t kind)
{
    kpc_pack_entry e;
    entry_decode(x, &e);
    int c = memcmp(e.key.bytes, key->bytes, 16);
    if (c == 0)
        c = strncmp(e.target, target, 64);
    if (c == 0)
        c = e.kind < kind ? -1 : e.kind > kind;
    return c;
}

static int index_order(const void *a, const void *b)
{
    kpc_pack_entry y;
    entry_decode(b, &y);
    return entry_cmp(a, &y.key, y.target, y.kind);
}

static const char *check_index(const kpc_pack *p, uint64_t index_off)
{
    for (uint64_t i = 0; i < p->count; i++) {
        const uint8_t *e = p->index + i * PACK_ENTRY;
        kpc_pack_entry x;
        if (!entry_decode(e, &x))
            return "an index entry's target is empty or not terminated";
        if (x.offset < PACK_HEADER || x.size < RECORD_HEADER || x.size > MAX_ENTRY || x.offset > index_off ||
            x.size > index_off - x.offset)
            return "an index entry points outside the records";
        if (i > 0 && index_order(e - PACK_ENTRY, e) >= 0)
            return "the index is not sorted (or holds a duplicate)";
    }
    return NULL;
}

kpc_status kpc_pack_open(const char *path, kpc_pack **out)
{
    *out = NULL;
    if (path == NULL || path[0] == '\0')
        return KPC_E_INVALID;
    kpc_pack *p = calloc(1, sizeof *p);
    if (p == NULL)
        return KPC_E_NOMEM;
    snprintf(p->path, sizeof p->path, "%s", path);
    p->fd = kpc__open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK, 0);
    if (p->fd < 0) {
        KPC_LOG(KPC_LOG_ERROR, "open(%s): %s: pack not used", path, strerror(errno));
        free(p);
        return errno == ENOENT ? KPC_E_NOT_FOUND : KPC_E_IO;
    }
    struct stat sb;
    uint8_t h[PACK_HEADER];
    pack_header ph = {0}; /* set by header_decode before any use; -Os's flow analysis cannot tell */
    kpc_status s = KPC_OK;
    ssize_t got;
    if (kpc__fstat(p->fd, &sb) != 0) {
        KPC_LOG(KPC_LOG_ERROR, "fstat(%s): %s: pack not used", path, strerror(errno));
        s = KPC_E_IO;
    } else if (!S_ISREG(sb.st_mode))
        s = refuse(p, "not a regular file");
    else if ((got = pread_full(p->fd, h, PACK_HEADER, 0)) < 0) {
        KPC_LOG(KPC_LOG_ERROR, "pread(%s): %s: pack not used", path, strerror(errno));
        s = KPC_E_IO;
    } else if ((size_t)got < PACK_HEADER || !header_decode(h, &ph))
        s = refuse(p, "not a kpc pack (no pack magic)");
    else if (ph.version != PACK_VERSION)
        s = refuse(p, "unsupported pack version");
    else if (ph.hsize != PACK_HEADER || ph.esize != PACK_ENTRY)
        s = refuse(p, "bad header or index entry size");
    else if (ph.hsum != XXH3_64bits(h, P_HSUM))
        s = refuse(p, "header checksum mismatch");
    else if (ph.fsize != (uint64_t)sb.st_size)
        s = refuse(p, (uint64_t)sb.st_size < ph.fsize ? "truncated (shorter than its header says)"
                                                      : "trailing bytes past the index");
    if (s != KPC_OK) {
        kpc_pack_close(p);
        return s;
    }
    p->count = ph.count;
    uint64_t index_off = ph.index, fsize = ph.fsize;
    if (p->count > MAX_ENTRIES || index_off < PACK_HEADER || index_off > fsize ||
        (fsize - index_off) != p->count * PACK_ENTRY) {
        s = refuse(p, "the index does not fit the file");
        kpc_pack_close(p);
        return s;
    }
    p->index = malloc(p->count * PACK_ENTRY + 1);
    if (p->index == NULL) {
        kpc_pack_close(p);
        return KPC_E_NOMEM;
    }
    got = pread_full(p->fd, p->index, p->count * PACK_ENTRY, index_off);
    const char *why = NULL;
    if (got < 0 || (uint64_t)got != p->count * PACK_ENTRY)
        why = "the index could not be read whole";
    else if (XXH3_64bits(p->index, p->count * PACK_ENTRY) != ph.isum)
        why = "index checksum mismatch";
    else
        why = check_index(p, index_off);
    if (why) {
        s = refuse(p, why);
        kpc_pack_close(p);
        return s;
    }
    KPC_LOG(KPC_LOG_DEBUG, "pack %s: %llu records", path, (unsigned long long)p->count);
    *out = p;
    return KPC_OK;
}

kpc_status kpc_pack_check_trust(const kpc_pack *p)
{
    struct stat sb; /* of the file held open: the one read is the one checked */
    if (kpc__fstat(p->fd, &sb) != 0) {
        KPC_LOG(KPC_LOG_ERROR, "fstat(%s): %s: pack not used", p->path, strerror(errno));
        return KPC_E_IO;
    }
    return kpc_root_check_trust("pack", p->path, &sb, true);
}

void kpc_pack_close(kpc_pack *p)
{
    if (p == NULL)
        return;
    if (p->fd >= 0)
        close(p->fd);
    free(p->index);
    free(p);
}

const char *kpc_pack_path(const kpc_pack *p) { return p->path; }
size_t kpc_pack_count(const kpc_pack *p) { return (size_t)p->count; }

kpc_status kpc_pack_entry_get(const kpc_pack *p, size_t i, kpc_pack_entry *e)
{
    if (i >= p->count)
        return KPC_E_NOT_FOUND;
    entry_decode(p->index + i * PACK_ENTRY, e); /* checked at open */
    return KPC_OK;
}

kpc_status kpc_pack_read_at(kpc_pack *p, size_t i, kpc_record *out)
{
    memset(out, 0, sizeof *out);
    kpc_pack_entry e;
    if (kpc_pack_entry_get(p, i, &e) != KPC_OK)
        return KPC_E_NOT_FOUND;
    void *buf = malloc(e.size);
    if (buf == NULL)
        return KPC_E_NOMEM;
    ssize_t got = pread_full(p->fd, buf, e.size, e.offset);
    const char *why = NULL;
    if (got < 0) {
        KPC_LOG(KPC_LOG_WARN, "pread(%s): %s", p->path, strerror(errno));
        free(buf);
        return KPC_E_IO;
    }
    if ((uint64_t)got != e.size) {
        why = "truncated since it was opened";
        free(buf);
    } else
        why = kpc_record_take(buf, e.size, &e.key, e.target, e.kind, out); /* frees buf if bad */
    if (why) {
        char hex[KPC_KEY_HEX];
        kpc__hex(e.key.bytes, 16, hex);
        KPC_LOG(KPC_LOG_WARN, "pack %s: damaged entry %s for %s (%s): refused, it will be built",
                p->path, hex, e.target, why);
        memset(out, 0, sizeof *out);
        return KPC_E_CORRUPT;
    }
    return KPC_OK;
}

kpc_status kpc_pack_read(kpc_pack *p, const kpc_key *key, const char *target, uint32_t kind,
                         kpc_record *out)
{
    memset(out, 0, sizeof *out);
    size_t lo = 0, hi = (size_t)p->count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = entry_cmp(p->index + mid * PACK_ENTRY, key, target, kind);
        if (c == 0)
            return kpc_pack_read_at(p, mid, out);
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return KPC_E_NOT_FOUND;
}

/* ---- writing ----------------------------------------------------------------------- */
struct kpc_pack_writer {
    int fd;
    char path[4096], tmp[4200];
    uint64_t offset; /* where the next record goes */
    uint8_t *index;
    size_t count, cap;
};

/* What a pack may be written over: nothing, or a regular file. A FIFO, a device, a
 * symbolic link or a directory is refused before anything is written (as root, a rename
 * over /dev/full replaced the device; a temp file beside it would land in /dev). */
static kpc_status check_out(const char *path)
{
    struct stat st;
    if (kpc__fstatat(AT_FDCWD, path, &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno == ENOENT)
            return KPC_OK;
        KPC_LOG(KPC_LOG_ERROR, "lstat(%s): %s", path, strerror(errno));
        return KPC_E_IO;
    }
    if (S_ISREG(st.st_mode))
        return KPC_OK;
    const char *kind = S_ISLNK(st.st_mode)    ? "a symbolic link"
                       : S_ISFIFO(st.st_mode) ? "a FIFO"
                       : S_ISCHR(st.st_mode)  ? "a character device"
                       : S_ISBLK(st.st_mode)  ? "a block device"
                       : S_ISDIR(st.st_mode)  ? "a directory"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                                              : "not a regular file";
    KPC_LOG(KPC_LOG_ERROR, "%s is %s: refused, left as it is; a pack is written as a new file or over "
            "a regular file only", path, kind);
    return KPC_E_INVALID;
}

kpc_status kpc_pack_create(const char *path, kpc_pack_writer **out)
{
    *out = NULL;
    kpc_status s = check_out(path);
    if (s != KPC_OK)
        return s;
    kpc_pack_writer *w = calloc(1, sizeof *w);
    if (w == NULL)
        return KPC_E_NOMEM;
    snprintf(w->path, sizeof w->path, "%s", path);
    snprintf(w->tmp, sizeof w->tmp, "%s.%d.tmp", path, (int)getpid());
    w->fd = kpc__open(w->tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (w->fd < 0) {
        KPC_LOG(KPC_LOG_ERROR, "open(%s): %s", w->tmp, strerror(errno));
        free(w);
        return KPC_E_IO;
    }
    w->offset = PACK_HEADER;
    *out = w;
    return KPC_OK;
}

void kpc_pack_discard(kpc_pack_writer *w)
{
    if (w == NULL)
        return;
    close(w->fd);
    kpc__unlinkat(AT_FDCWD, w->tmp, 0); /* faultable: a test sees the temp file it leaves */
    free(w->index);
    free(w);
}

kpc_status kpc_pack_add(kpc_pack_writer *w, const void *record, size_t size)
{
    /* parse a copy: the check may move the payload (to align it), and the caller's bytes go in
     * as they are */
    void *copy = malloc(size ? size : 1);
    if (copy == NULL)
        return KPC_E_NOMEM;
    memcpy(copy, record, size);
    kpc_record rec;
    const char *why = kpc_record_take(copy, size, NULL, NULL, KPC_RECORD_CODE, &rec); /* frees copy if bad */
    if (why) {
        KPC_LOG(KPC_LOG_WARN, "pack %s: record not added: %s", w->path, why);
        return KPC_E_CORRUPT;
    }
    if (w->count == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 64;
        uint8_t *ix = realloc(w->index, cap * PACK_ENTRY);
        if (ix == NULL) {
            kpc_record_free(&rec);
            return KPC_E_NOMEM;
        }
        w->index = ix, w->cap = cap;
    }
    if (kpc__sys_fault(KPC_SYS_WRITE) != 0 || lseek(w->fd, (off_t)w->offset, SEEK_SET) < 0 ||
        kpc__write_all(w->fd, record, size) != 0) {
        KPC_LOG(KPC_LOG_ERROR, "write(%s): %s", w->tmp, strerror(errno));
        kpc_record_free(&rec);
        return KPC_E_IO;
    }
    entry_encode(w->index + w->count * PACK_ENTRY, &rec.key, w->offset, size, rec.kind, rec.target);
    w->count++;
    w->offset += size;
    kpc_record_free(&rec);
    return KPC_OK;
}

kpc_status kpc_pack_finish(kpc_pack_writer *w, size_t *count)
{
    if (w->count > 1)
        qsort(w->index, w->count, PACK_ENTRY, index_order);
    /* one entry per (key, target, kind): a later duplicate would never be found */
    size_t n = 0;
    for (size_t i = 0; i < w->count; i++)
        if (n == 0 || index_order(w->index + (n - 1) * PACK_ENTRY, w->index + i * PACK_ENTRY) != 0)
            memmove(w->index + n++ * PACK_ENTRY, w->index + i * PACK_ENTRY, PACK_ENTRY);
    uint64_t isize = (uint64_t)n * PACK_ENTRY;
    uint8_t h[PACK_HEADER];
    header_encode(h, n, w->offset, isize, XXH3_64bits(w->index ? w->index : h, isize));
    const char *failed = NULL;
    if (kpc__sys_fault(KPC_SYS_WRITE) != 0 || lseek(w->fd, (off_t)w->offset, SEEK_SET) < 0 ||
        (isize && kpc__write_all(w->fd, w->index, isize) != 0))
        failed = "write";
    else if (kpc__sys_fault(KPC_SYS_WRITE) != 0 || lseek(w->fd, 0, SEEK_SET) < 0 ||
             kpc__write_all(w->fd, h, PACK_HEADER) != 0)
        failed = "write";
    else if (kpc__fsync(w->fd) != 0)
        failed = "fsync";
    else if (check_out(w->path) != KPC_OK) { /* made a FIFO or a link while we wrote */
        kpc_pack_discard(w);
        return KPC_E_INVALID;
    } else if (kpc__renameat(AT_FDCWD, w->tmp, AT_FDCWD, w->path) != 0)
        failed = "rename";
    if (failed) {
        KPC_LOG(KPC_LOG_ERROR, "%s(%s): %s", failed, failed[0] == 'r' ? w->path : w->tmp, strerror(errno));
        kpc_pack_discard(w);
        return KPC_E_IO;
    }
    if (count)
        *count = n;
    close(w->fd);
    free(w->index);
    free(w);
    return KPC_OK;
}
