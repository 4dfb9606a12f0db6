/*
 * store.c - the disk tree (level 3): one file per code object.
 *
 *   <root>/v1/<target>/<first 2 hex of key>/<32 hex key>.co    code object record
 *   <root>/v1/<target>/<2 hex>/<32 hex key>.log                 failed-compile log record
 *   <root>/v1/tmp/                                              staging, same file system
 *   <root>/v1/prune.lock                                        one pruner at a time (flock)
 *
 * Invariants: a record file is never modified in place. It is written whole to an
 * O_EXCL temp file, fsync'ed and renamed into place, so a reader sees a whole file or
 * none, and a reader racing a pruner either has the file open (and reads it whole) or
 * misses cleanly. Files are read with pread, never mmap (a file truncated under an mmap
 * SIGBUSes). Every read checks magic, version, sizes, key, kind, target and both
 * checksums; a file that fails is removed (if it is still the one we read) and logged.
 * The file's mtime is its last use: a hit refreshes it at most once a minute. The size
 * limit is kept after every write by pruning the least recently used files down to 90%.
 * Record format: docs/file-format.md.
 */
#define _GNU_SOURCE
#include "kpc_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#define HEADER_SIZE 256u
#define MAX_RECORD (1ull << 30)
#define TOUCH_INTERVAL_NS (60ull * 1000000000ull)
#define STALE_TMP_NS (3600ull * 1000000000ull)

struct kpc_store {
    char root[4096];  /* realpath of the cache dir */
    char v1[4200];    /* root/v1 */
    uint64_t max_bytes;
    /* usage estimate: in the host index if shared, else here */
    _Atomic uint64_t local_bytes, local_files;
    _Atomic uint32_t local_known;
    _Atomic uint64_t *bytes, *files;
    _Atomic uint32_t *known;
    atomic_int write_failures; /* the first failure is an error, later ones warnings */
    atomic_uint tmp_seq;
};

/* ---- little-endian header ------------------------------------------------------------ */
static void le64(uint8_t *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static void le32(uint8_t *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static uint64_t rd64(const uint8_t *p) { uint64_t v = 0; for (int i = 7; i >= 0; i--) v = v << 8 | p[i]; return v; }
static uint32_t rd32(const uint8_t *p) { return (uint32_t)rd64((const uint8_t[8]){p[0], p[1], p[2], p[3]}); }

enum {
    H_MAGIC = 0, H_VERSION = 8, H_HSIZE = 12, H_KEY = 16, H_KIND = 32, H_FLAGS = 36, H_PAYLOAD = 40,
    H_CODE = 48, H_NAMES = 56, H_SUM = 64, H_CREATED = 72, H_TARGET = 80, H_SOURCE = 144,
    H_COMPILER = 224, H_REQUEST = 240, H_HSUM = 248
};
_Static_assert(H_HSUM + 8 == HEADER_SIZE, "the header layout must add up to HEADER_SIZE");

static void encode_header(uint8_t h[HEADER_SIZE], const kpc_record *r, uint64_t payload_sum)
{
    memset(h, 0, HEADER_SIZE);
    memcpy(h + H_MAGIC, KPC_STORE_MAGIC, 8);
    /* version 1 where there is no request section: older readers still take it */
    le32(h + H_VERSION, r->request_size ? KPC_STORE_VERSION : 1u);
    le32(h + H_HSIZE, HEADER_SIZE);
    memcpy(h + H_KEY, r->key.bytes, 16);
    le32(h + H_KIND, r->kind);
    le64(h + H_PAYLOAD, r->code_size + r->names_size + r->request_size);
    le64(h + H_CODE, r->code_size);
    le64(h + H_NAMES, r->names_size);
    le64(h + H_SUM, payload_sum);
    le64(h + H_CREATED, r->created_ns);
    memcpy(h + H_TARGET, r->target, strnlen(r->target, 63));
    memcpy(h + H_SOURCE, r->source_name, strnlen(r->source_name, 79));
    memcpy(h + H_COMPILER, r->compiler_id, 16);
    le64(h + H_REQUEST, r->request_size);
    le64(h + H_HSUM, XXH3_64bits(h, H_HSUM));
}

/* Decode and check a header; NULL when it is good, else why not. */
static const char *decode_header(const uint8_t *h, size_t avail, kpc_record *r)
{
    if (avail < HEADER_SIZE)
        return "shorter than a header";
    if (memcmp(h + H_MAGIC, KPC_STORE_MAGIC, 8) != 0)
        return "bad magic (not a kpc record)";
    uint32_t version = rd32(h + H_VERSION);
    if (version != 1u && version != KPC_STORE_VERSION)
        return "unsupported format version";
    if (rd32(h + H_HSIZE) != HEADER_SIZE)
        return "bad header size";
    if (rd64(h + H_HSUM) != XXH3_64bits(h, H_HSUM))
        return "header checksum mismatch";
    memset(r, 0, sizeof *r);
    memcpy(r->key.bytes, h + H_KEY, 16);
    r->kind = rd32(h + H_KIND);
    r->code_size = rd64(h + H_CODE);
    r->names_size = rd64(h + H_NAMES);
    r->created_ns = rd64(h + H_CREATED);
    r->request_size = version >= 2u ? rd64(h + H_REQUEST) : 0; /* reserved (not checked) in 1 */
    if (r->code_size > MAX_RECORD || r->names_size > MAX_RECORD || r->request_size > MAX_RECORD ||
        r->code_size + r->names_size + r->request_size != rd64(h + H_PAYLOAD))
        return "inconsistent sizes";
    if (h[H_TARGET + 63] != '\0' || h[H_SOURCE + 79] != '\0')
        return "unterminated string field";
    memcpy(r->target, h + H_TARGET, 64);
    memcpy(r->source_name, h + H_SOURCE, 80);
    memcpy(r->compiler_id, h + H_COMPILER, 16);
    return NULL;
}

/* ---- paths ----------------------------------------------------------------------------- */
static const char *kind_ext(uint32_t kind) { return kind == KPC_RECORD_LOG ? "log" : "co"; }

static bool target_ok(const char *target)
{
    /* the target names a directory: no separators, no dot-names */
    return target[0] != '\0' && target[0] != '.' && strchr(target, '/') == NULL && strcmp(target, "tmp") != 0;
}

static int record_path(const kpc_store *st, const kpc_key *key, const char *target, uint32_t kind,
                       char *out, size_t cap, char *dir, size_t dir_cap)
{
    char hex[KPC_KEY_HEX];
    kpc_key_hex(key, hex);
    if (dir)
        snprintf(dir, dir_cap, "%s/%s/%.2s", st->v1, target, hex);
    int n = snprintf(out, cap, "%s/%s/%.2s/%s.%s", st->v1, target, hex, hex, kind_ext(kind));
    return n > 0 && (size_t)n < cap ? 0 : -1;
}

/* ---- usage estimate -------------------------------------------------------------------- */
void kpc_store_share_usage(kpc_store *st, _Atomic uint64_t *bytes, _Atomic uint64_t *files,
                           _Atomic uint32_t *known)
{
    st->bytes = bytes;
    st->files = files;
    st->known = known;
}

static void usage_add(kpc_store *st, int64_t bytes, int64_t files)
{
    atomic_fetch_add(st->bytes, (uint64_t)bytes);
    atomic_fetch_add(st->files, (uint64_t)files);
}

/* ---- open ------------------------------------------------------------------------------ */
static kpc_status check_owner(const char *dir)
{
    struct stat lst, st;
    if (lstat(dir, &lst) != 0 || stat(dir, &st) != 0) {
        KPC_LOG(KPC_LOG_ERROR, "stat(%s): %s", dir, strerror(errno));
        return KPC_E_IO;
    }
    if (!S_ISDIR(st.st_mode)) {
        KPC_LOG(KPC_LOG_ERROR, "cache directory %s is not a directory", dir);
        return KPC_E_IO;
    }
    uid_t me = geteuid();
    if (st.st_uid != me) {
        KPC_LOG(KPC_LOG_ERROR, "cache directory %s%s is owned by uid %u, not by this user (uid %u): "
                "refused, since that user could plant code objects", dir,
                S_ISLNK(lst.st_mode) ? " (a symbolic link to it)" : "", (unsigned)st.st_uid, (unsigned)me);
        return KPC_E_IO;
    }
    if (S_ISLNK(lst.st_mode) && lst.st_uid != me && lst.st_uid != 0) {
        /* name the link's owner: the directory it points to is ours, the link is not */
        KPC_LOG(KPC_LOG_ERROR, "cache directory %s is a symbolic link owned by uid %u, not by this "
                "user (uid %u) or root: refused, since that user could point it elsewhere", dir,
                (unsigned)lst.st_uid, (unsigned)me);
        return KPC_E_IO;
    }
    if ((st.st_mode & 0077) != 0) {
        KPC_LOG(KPC_LOG_WARN, "cache directory %s has mode %03o: setting 0700", dir,
                (unsigned)(st.st_mode & 0777));
        if (chmod(dir, 0700) != 0)
            KPC_LOG(KPC_LOG_WARN, "chmod(%s): %s", dir, strerror(errno));
    }
    return KPC_OK;
}

kpc_status kpc_store_open(const char *dir, uint64_t max_bytes, kpc_store **out)
{
    *out = NULL;
    if (dir == NULL || dir[0] == '\0')
        return KPC_E_INVALID;
    struct stat st;
    if (stat(dir, &st) != 0 && kpc__mkdir_p(dir, 0700) != 0) {
        KPC_LOG(KPC_LOG_ERROR, "mkdir(%s): %s", dir, strerror(errno));
        return KPC_E_IO;
    }
    kpc_status s = check_owner(dir);
    if (s != KPC_OK)
        return s;
    kpc_store *store = calloc(1, sizeof *store);
    if (store == NULL)
        return KPC_E_NOMEM;
    if (realpath(dir, store->root) == NULL) {
        KPC_LOG(KPC_LOG_ERROR, "realpath(%s): %s", dir, strerror(errno));
        free(store);
        return KPC_E_IO;
    }
    snprintf(store->v1, sizeof store->v1, "%s/v1", store->root);
    char tmp[4300];
    snprintf(tmp, sizeof tmp, "%s/tmp", store->v1);
    if (kpc__mkdir_p(tmp, 0700) != 0)
        /* a read-only tree still serves reads */
        KPC_LOG(KPC_LOG_WARN, "mkdir(%s): %s: the cache is read-only for this process", tmp,
                strerror(errno));
    store->max_bytes = max_bytes;
    kpc_store_share_usage(store, &store->local_bytes, &store->local_files, &store->local_known);
    *out = store;
    return KPC_OK;
}

void kpc_store_close(kpc_store *st)
{
    free(st);
}

const char *kpc_store_root(const kpc_store *st)
{
    return st->root;
}

void kpc_record_free(kpc_record *r)
{
    free(r->payload);
    r->payload = NULL;
}

/* Remove path only if it is still the file we opened: a fresh file renamed over a bad
 * one in the meantime must survive. */
enum removal { REMOVED, REPLACED /* not ours any more, or gone */, NOT_REMOVED /* ours, still there */ };

static enum removal remove_if_same(const char *path, int fd)
{
    struct stat a, b;
    if (fstat(fd, &a) != 0 || lstat(path, &b) != 0 || a.st_dev != b.st_dev || a.st_ino != b.st_ino)
        return REPLACED;
    if (S_ISDIR(b.st_mode) ? rmdir(path) != 0 : unlink(path) != 0) {
        KPC_LOG(KPC_LOG_WARN, "could not remove damaged %s: %s", path, strerror(errno));
        return NOT_REMOVED;
    }
    return REMOVED;
}

const char *kpc_store_parse(void *buf, size_t size, const kpc_key *key, const char *target,
                            uint32_t kind, kpc_record *out)
{
    const char *why = decode_header(buf, size, out);
    if (why == NULL && key && memcmp(out->key.bytes, key->bytes, 16) != 0)
        why = "the key does not match the file name";
    if (why == NULL && out->kind != kind)
        why = "wrong record kind";
    if (why == NULL && target && strcmp(out->target, target) != 0)
        why = "the target does not match";
    uint64_t payload = out->code_size + out->names_size + out->request_size;
    if (why == NULL && size != HEADER_SIZE + payload)
        why = size < HEADER_SIZE + payload ? "truncated" : "trailing bytes";
    if (why == NULL &&
        XXH3_64bits((uint8_t *)buf + HEADER_SIZE, size - HEADER_SIZE) != rd64((uint8_t *)buf + H_SUM))
        why = "payload checksum mismatch";
    if (why == NULL && kind == KPC_RECORD_CODE &&
        !kpc_prog_names_valid((uint8_t *)buf + HEADER_SIZE + out->code_size, out->names_size))
        why = "bad lowered-name table";
    if (why == NULL && kind == KPC_RECORD_CODE && out->code_size == 0)
        why = "empty code object";
    if (why != NULL)
        return why;
    memmove(buf, (uint8_t *)buf + HEADER_SIZE, size - HEADER_SIZE);
    out->payload = buf;
    return NULL;
}

/* Read and fully check the record at an open fd. NULL when good, else why not. *sb
 * gets the file's fstat when the read got that far. */
static const char *read_record(int fd, const kpc_key *key, const char *target, uint32_t kind,
                               kpc_record *out, kpc_status *status, struct stat *sb)
{
    void *buf;
    size_t size;
    *status = kpc__read_fd_stat(fd, MAX_RECORD + HEADER_SIZE, &buf, &size, sb);
    if (*status == KPC_E_CORRUPT)
        return "not a regular file, or too large";
    if (*status != KPC_OK)
        return *status == KPC_E_NOMEM ? "out of memory" : "read failed";
    *status = KPC_E_CORRUPT;
    const char *why = kpc_store_parse(buf, size, key, target, kind, out);
    if (why != NULL) {
        free(buf);
        return why;
    }
    *status = KPC_OK;
    return NULL;
}

kpc_status kpc_store_read(kpc_store *st, const kpc_key *key, const char *target, uint32_t kind,
                          kpc_record *out)
{
    char path[4400];
    memset(out, 0, sizeof *out);
    if (!target_ok(target) || record_path(st, key, target, kind, path, sizeof path, NULL, 0) != 0)
        return KPC_E_INVALID;
    /* O_NONBLOCK: a FIFO planted where a record should be must not hang the open (it
     * is then refused as not a regular file); it changes nothing for a regular file */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            return KPC_E_NOT_FOUND;
        if (errno == ELOOP) { /* a symlink where a record should be: never followed */
            struct stat lsb;
            bool is_link = lstat(path, &lsb) == 0 && S_ISLNK(lsb.st_mode);
            if (is_link && unlink(path) == 0) {
                KPC_LOG(KPC_LOG_WARN, "%s is a symbolic link: removed, it will be rebuilt", path);
                usage_add(st, -(int64_t)lsb.st_size, -1); /* the walk counted it */
            } else
                KPC_LOG(KPC_LOG_WARN, "%s is a symbolic link and could not be removed: %s", path,
                        strerror(errno));
            return KPC_E_CORRUPT;
        }
        KPC_LOG(KPC_LOG_WARN, "open(%s): %s", path, strerror(errno));
        return KPC_E_IO;
    }
    kpc_status s;
    struct stat sb;
    sb.st_mode = 0;
    const char *why = read_record(fd, key, target, kind, out, &s, &sb);
    if (why != NULL) {
        if (s == KPC_E_CORRUPT) {
            KPC_LOG(KPC_LOG_WARN, "damaged cache file %s (%s): removed, it will be rebuilt", path, why);
            struct stat cur;
            if (fstat(fd, &cur) == 0 && remove_if_same(path, fd) == REMOVED && S_ISREG(cur.st_mode))
                usage_add(st, -(int64_t)cur.st_size, -1);
        } else
            KPC_LOG(KPC_LOG_WARN, "%s: %s", path, why);
        close(fd);
        return s;
    }
    uint64_t now = kpc__wall_ns(); /* sb: the read's own fstat */
    if ((uint64_t)sb.st_mtim.tv_sec * 1000000000ull + (uint64_t)sb.st_mtim.tv_nsec + TOUCH_INTERVAL_NS < now &&
        futimens(fd, NULL) != 0)
        KPC_LOG(KPC_LOG_DEBUG, "futimens(%s): %s", path, strerror(errno));
    close(fd);
    return KPC_OK;
}

static void write_failed(kpc_store *st, const char *call, const char *path)
{
    int level = atomic_fetch_add(&st->write_failures, 1) == 0 ? KPC_LOG_ERROR : KPC_LOG_WARN;
    KPC_LOG(level, "%s(%s): %s: the object is not cached on disk", call, path, strerror(errno));
}

kpc_status kpc_store_write(kpc_store *st, const kpc_record *rec, const void *code,
                           const void *names_or_log, size_t second_size)
{
    kpc_record r = *rec;
    const void *first = code;
    if (rec->kind == KPC_RECORD_LOG) {
        r.code_size = strlen(code); /* the log text is the "code" part */
        r.names_size = 0;
        r.request_size = 0; /* a failed compile is never replayed */
        second_size = 0;
    }
    char path[4400], dir[4400], tmp[4400], hex[KPC_KEY_HEX];
    if (!target_ok(r.target) || record_path(st, &r.key, r.target, r.kind, path, sizeof path, dir, sizeof dir) != 0)
        return KPC_E_INVALID;
    if (kpc__mkdir_p(dir, 0700) != 0) {
        write_failed(st, "mkdir", dir);
        return KPC_E_IO;
    }
    kpc_key_hex(&r.key, hex);
    snprintf(tmp, sizeof tmp, "%s/tmp/%s.%d.%u.tmp", st->v1, hex, (int)getpid(),
             atomic_fetch_add(&st->tmp_seq, 1));
    XXH3_state_t sum;
    XXH3_64bits_reset(&sum);
    XXH3_64bits_update(&sum, first, r.code_size);
    if (second_size)
        XXH3_64bits_update(&sum, names_or_log, second_size);
    if (r.request_size)
        XXH3_64bits_update(&sum, r.request, r.request_size);
    uint8_t header[HEADER_SIZE];
    encode_header(header, &r, XXH3_64bits_digest(&sum));

    int fd = kpc__sys_fault(KPC_SYS_OPEN) ? -1 : open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        write_failed(st, "open", tmp);
        return KPC_E_IO;
    }
    const char *failed = NULL;
    if (kpc__write_all(fd, header, HEADER_SIZE) != 0 || kpc__write_all(fd, first, r.code_size) != 0 ||
        (second_size && kpc__write_all(fd, names_or_log, second_size) != 0) ||
        (r.request_size && kpc__write_all(fd, r.request, r.request_size) != 0))
        failed = "write";
    else if (kpc__sys_fault(KPC_SYS_FSYNC) != 0 || fsync(fd) != 0)
        failed = "fsync";
    int saved = errno;
    close(fd);
    if (failed == NULL && (kpc__sys_fault(KPC_SYS_RENAME) != 0 || rename(tmp, path) != 0))
        failed = "rename", saved = errno;
    if (failed != NULL) {
        unlink(tmp);
        errno = saved;
        write_failed(st, failed, failed[0] == 'r' ? path : tmp);
        return KPC_E_IO;
    }
    usage_add(st, HEADER_SIZE + (int64_t)(r.code_size + second_size + r.request_size), 1);
    if (atomic_load(st->known) == 0) {
        uint64_t bytes, files;
        kpc_store_usage(st, &bytes, &files); /* sets the estimate */
    }
    if (atomic_load(st->bytes) > st->max_bytes)
        kpc_store_prune(st, st->max_bytes / 10 * 9, NULL, NULL);
    return KPC_OK;
}

kpc_status kpc_store_remove_refused(kpc_store *st, const kpc_key *key, const char *target,
                                   const void *code, size_t size)
{
    char path[4400];
    if (!target_ok(target) || record_path(st, key, target, KPC_RECORD_CODE, path, sizeof path, NULL, 0) != 0)
        return KPC_E_INVALID;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0)
        return KPC_E_NOT_FOUND;
    kpc_record rec;
    kpc_status s;
    struct stat sb;
    memset(&rec, 0, sizeof rec);
    bool same = read_record(fd, key, target, KPC_RECORD_CODE, &rec, &s, &sb) == NULL &&
                rec.code_size == size && memcmp(rec.payload, code, size) == 0;
    kpc_record_free(&rec);
    /* another process may have replaced the refused file with a fresh build already:
     * only the bytes the runtime refused go, and only if that file is still in place */
    enum removal r = same ? remove_if_same(path, fd) : REPLACED;
    if (r == REMOVED)
        usage_add(st, -(int64_t)sb.st_size, -1);
    /* NOT_REMOVED: still there (a read-only directory): the caller must not read it */
    s = r == REMOVED ? KPC_OK : r == REPLACED ? KPC_E_NOT_FOUND : KPC_E_IO;
    close(fd);
    return s;
}

/* ---- walking the tree ---------------------------------------------------------------- */
enum walk_mode { WALK_STAT, WALK_HEADER, WALK_VERIFY };

static bool record_name(const char *name, uint32_t *kind)
{
    size_t n = strlen(name);
    if (n == 35 && strcmp(name + 32, ".co") == 0)
        *kind = KPC_RECORD_CODE;
    else if (n == 36 && strcmp(name + 32, ".log") == 0)
        *kind = KPC_RECORD_LOG;
    else
        return false;
    kpc_key k;
    char hex[33];
    memcpy(hex, name, 32);
    hex[32] = '\0';
    return kpc_key_parse(hex, &k);
}

static kpc_status walk(kpc_store *st, enum walk_mode mode, kpc_store_walk_fn fn, void *arg)
{
    DIR *top = opendir(st->v1);
    if (top == NULL)
        return errno == ENOENT ? KPC_OK : KPC_E_IO;
    struct dirent *t;
    int stop = 0;
    while (!stop && (t = readdir(top)) != NULL) {
        if (t->d_name[0] == '.' || strcmp(t->d_name, "tmp") == 0 || t->d_type == DT_REG)
            continue;
        char tdir[4500];
        snprintf(tdir, sizeof tdir, "%s/%s", st->v1, t->d_name);
        DIR *td = opendir(tdir);
        if (td == NULL)
            continue;
        struct dirent *f;
        while (!stop && (f = readdir(td)) != NULL) {
            if (f->d_name[0] == '.' || strlen(f->d_name) != 2)
                continue;
            char fdir[4800];
            snprintf(fdir, sizeof fdir, "%s/%s", tdir, f->d_name);
            DIR *fd_dir = opendir(fdir);
            if (fd_dir == NULL)
                continue;
            struct dirent *e;
            while (!stop && (e = readdir(fd_dir)) != NULL) {
                uint32_t kind;
                if (!record_name(e->d_name, &kind))
                    continue;
                char path[5100];
                snprintf(path, sizeof path, "%s/%s", fdir, e->d_name);
                struct stat sb;
                if (fstatat(dirfd(fd_dir), e->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0)
                    continue; /* removed meanwhile */
                kpc_record rec;
                memset(&rec, 0, sizeof rec);
                kpc_store_entry ent = {path, (uint64_t)sb.st_size,
                                       (uint64_t)sb.st_mtim.tv_sec * 1000000000ull + (uint64_t)sb.st_mtim.tv_nsec,
                                       KPC_OK, false, NULL};
                if (mode != WALK_STAT) {
                    int fd = openat(dirfd(fd_dir), e->d_name,
                                    O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
                    if (fd < 0) {
                        ent.status = errno == ENOENT ? KPC_E_NOT_FOUND : KPC_E_CORRUPT;
                        /* a symbolic link where a record should be is never followed */
                        if (mode == WALK_VERIFY && errno == ELOOP && S_ISLNK(sb.st_mode))
                            ent.removed = unlinkat(dirfd(fd_dir), e->d_name, 0) == 0;
                    } else if (mode == WALK_HEADER) {
                        uint8_t h[HEADER_SIZE];
                        ssize_t n = pread(fd, h, sizeof h, 0);
                        if (decode_header(h, n < 0 ? 0 : (size_t)n, &rec) != NULL || rec.kind != kind)
                            ent.status = KPC_E_CORRUPT;
                        close(fd);
                    } else {
                        kpc_key key;
                        char hex[33];
                        memcpy(hex, e->d_name, 32);
                        hex[32] = '\0';
                        kpc_key_parse(hex, &key);
                        kpc_status s;
                        struct stat rsb;
                        if (read_record(fd, &key, t->d_name, kind, &rec, &s, &rsb) != NULL)
                            ent.status = s == KPC_E_NOMEM ? KPC_E_NOMEM : KPC_E_CORRUPT;
                        kpc_record_free(&rec);
                        if (ent.status == KPC_E_CORRUPT) {
                            enum removal r = remove_if_same(path, fd);
                            if (r == REPLACED)
                                ent.status = KPC_E_NOT_FOUND; /* replaced or removed meanwhile */
                            else if ((ent.removed = r == REMOVED) && S_ISREG(sb.st_mode))
                                usage_add(st, -(int64_t)sb.st_size, -1);
                        }
                        close(fd);
                    }
                    if (ent.status == KPC_E_NOT_FOUND)
                        continue;
                    ent.rec = ent.status == KPC_OK ? &rec : NULL;
                }
                stop = fn(&ent, arg);
            }
            closedir(fd_dir);
        }
        closedir(td);
    }
    closedir(top);
    return KPC_OK;
}

kpc_status kpc_store_walk(kpc_store *st, bool verify, kpc_store_walk_fn fn, void *arg)
{
    return walk(st, verify ? WALK_VERIFY : WALK_HEADER, fn, arg);
}

struct usage_acc {
    uint64_t bytes, files;
};

static int count_usage(const kpc_store_entry *e, void *arg)
{
    struct usage_acc *u = arg;
    u->bytes += e->size;
    u->files++;
    return 0;
}

kpc_status kpc_store_usage_estimate(kpc_store *st, uint64_t *bytes, uint64_t *files)
{
    if (atomic_load(st->known) == 0)
        return kpc_store_usage(st, bytes, files);
    *bytes = atomic_load(st->bytes);
    *files = atomic_load(st->files);
    return KPC_OK;
}

kpc_status kpc_store_usage(kpc_store *st, uint64_t *bytes, uint64_t *files)
{
    struct usage_acc u = {0, 0};
    kpc_status s = walk(st, WALK_STAT, count_usage, &u);
    if (s == KPC_OK) {
        atomic_store(st->bytes, u.bytes);
        atomic_store(st->files, u.files);
        atomic_store(st->known, 1);
    }
    *bytes = u.bytes;
    *files = u.files;
    return s;
}

/* ---- pruning ------------------------------------------------------------------------- */
typedef struct prune_item {
    char *path;
    uint64_t size, mtime;
} prune_item;

struct prune_acc {
    prune_item *items;
    size_t n, cap;
    uint64_t bytes;
    const uint8_t *keep_id;
    kpc_prune_result *res;
    bool oom;
};

static int collect(const kpc_store_entry *e, void *arg)
{
    struct prune_acc *a = arg;
    if (a->keep_id && (e->rec == NULL || memcmp(e->rec->compiler_id, a->keep_id, 16) != 0)) {
        /* another compiler built it (or it is unreadable): never served again */
        if (unlink(e->path) == 0) {
            a->res->files_removed++;
            a->res->bytes_removed += e->size;
        }
        a->res->files_before++;
        a->res->bytes_before += e->size;
        return 0;
    }
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 1024;
        prune_item *items = realloc(a->items, cap * sizeof *items);
        if (items == NULL) {
            a->oom = true;
            return 1;
        }
        a->items = items;
        a->cap = cap;
    }
    char *path = strdup(e->path);
    if (path == NULL) {
        a->oom = true;
        return 1;
    }
    a->items[a->n++] = (prune_item){path, e->size, e->mtime_ns};
    a->bytes += e->size;
    a->res->files_before++;
    a->res->bytes_before += e->size;
    return 0;
}

static int by_mtime(const void *x, const void *y)
{
    const prune_item *a = x, *b = y;
    return a->mtime < b->mtime ? -1 : a->mtime > b->mtime;
}

static void remove_stale_tmp(kpc_store *st, kpc_prune_result *res)
{
    char dir[4300];
    snprintf(dir, sizeof dir, "%s/tmp", st->v1);
    DIR *d = opendir(dir);
    if (d == NULL)
        return;
    uint64_t now = kpc__wall_ns();
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        struct stat sb;
        if (e->d_name[0] == '.' || fstatat(dirfd(d), e->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0)
            continue;
        /* a writer that died left it; a live writer renames within seconds */
        if ((uint64_t)sb.st_mtim.tv_sec * 1000000000ull + STALE_TMP_NS < now &&
            unlinkat(dirfd(d), e->d_name, 0) == 0)
            res->temp_removed++;
    }
    closedir(d);
}

static kpc_status prune(kpc_store *st, uint64_t target_bytes, const uint8_t *keep_compiler_id,
                        bool wait, kpc_prune_result *res)
{
    kpc_prune_result local;
    if (res == NULL)
        res = &local;
    memset(res, 0, sizeof *res);
    char lock_path[4300];
    snprintf(lock_path, sizeof lock_path, "%s/prune.lock", st->v1);
    int lock = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (lock < 0) {
        KPC_LOG(KPC_LOG_WARN, "open(%s): %s: not pruning", lock_path, strerror(errno));
        return KPC_E_IO;
    }
    int r;
    while ((r = flock(lock, wait ? LOCK_EX : LOCK_EX | LOCK_NB)) != 0 && errno == EINTR)
        ;
    if (r != 0) {
        int err = errno;
        close(lock);
        if (err == EWOULDBLOCK) {
            KPC_LOG(KPC_LOG_DEBUG, "another process is pruning %s", st->root);
            return KPC_OK; /* one pruner at a time; it brings the size down for everyone */
        }
        KPC_LOG(KPC_LOG_WARN, "flock(%s): %s: not pruning", lock_path, strerror(err));
        return KPC_E_IO;
    }
    struct prune_acc a = {.keep_id = keep_compiler_id, .res = res};
    kpc_status s = walk(st, keep_compiler_id ? WALK_HEADER : WALK_STAT, collect, &a);
    if (s == KPC_OK && a.oom)
        s = KPC_E_NOMEM;
    if (s == KPC_OK && a.bytes > target_bytes) {
        qsort(a.items, a.n, sizeof *a.items, by_mtime);
        for (size_t i = 0; i < a.n && a.bytes > target_bytes; i++)
            if (unlink(a.items[i].path) == 0 || errno == ENOENT) {
                a.bytes -= a.items[i].size;
                res->files_removed++;
                res->bytes_removed += a.items[i].size;
            }
    }
    remove_stale_tmp(st, res);
    if (s == KPC_OK) {
        atomic_store(st->bytes, a.bytes);
        atomic_store(st->files, res->files_before - res->files_removed);
        atomic_store(st->known, 1);
    }
    for (size_t i = 0; i < a.n; i++)
        free(a.items[i].path);
    free(a.items);
    flock(lock, LOCK_UN);
    close(lock);
    if (res->files_removed)
        KPC_LOG(KPC_LOG_INFO, "pruned %llu files (%llu bytes) from %s",
                (unsigned long long)res->files_removed, (unsigned long long)res->bytes_removed, st->root);
    return s;
}

kpc_status kpc_store_prune(kpc_store *st, uint64_t target_bytes, const uint8_t *keep_compiler_id,
                           kpc_prune_result *res)
{
    return prune(st, target_bytes, keep_compiler_id, false, res);
}

kpc_status kpc_store_prune_wait(kpc_store *st, uint64_t target_bytes, const uint8_t *keep_compiler_id,
                                kpc_prune_result *res)
{
    return prune(st, target_bytes, keep_compiler_id, true, res);
}

static int remove_entry(const kpc_store_entry *e, void *arg)
{
    if (unlink(e->path) == 0)
        (*(uint64_t *)arg)++;
    return 0;
}

kpc_status kpc_store_clear(kpc_store *st, uint64_t *files_removed)
{
    *files_removed = 0;
    kpc_status s = walk(st, WALK_STAT, remove_entry, files_removed);
    atomic_store(st->bytes, 0);
    atomic_store(st->files, 0);
    return s;
}
