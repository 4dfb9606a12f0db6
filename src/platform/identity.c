/*
 * identity.c - what the platforms share to name their compiler.
 *
 * A compiler's identity is a hash over the build ids (NT_GNU_BUILD_ID) of the libraries
 * that actually compiled, found among the loaded objects, plus whatever else changes the
 * output. Computing it needs the compiler loaded (~19 ms of dlopen), which a warm hit
 * must not pay: so the identity is remembered in <cache>/v1/compiler-<platform>.id with
 * the (device, inode, size, mtime) of every file it came from. A later process re-stats
 * those files; if any changed (an upgrade), the identity is computed afresh.
 */
#define _GNU_SOURCE
#include "platform/identity.h"
#include "base/fault.h"
#include "base/file_time.h"
#include "base/log.h"
#include "base/hash.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <bsd/string.h> /* strlcpy */
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t */

#define ID_MAGIC "kpc-identity 1"

static int id_name(const char *platform, char *out, size_t cap)
{
    int n = snprintf(out, cap, "compiler-%s.id", platform);
    return n > 0 && (size_t)n < cap ? 0 : -1;
}

bool kpc_identity_recall(const kpc_root *root, const char *platform, uint8_t id[16])
{
    char path[128];
    if (root == NULL || id_name(platform, path, sizeof path) != 0)
        return false;
    FILE *f = kpc_root_read_memo(root, path);
    if (f == NULL)
        return false;
    char line[1024];
    bool ok = fgets(line, sizeof line, f) && strncmp(line, ID_MAGIC, strlen(ID_MAGIC)) == 0;
    char hex[64];
    ok = ok && fgets(line, sizeof line, f) && sscanf(line, "id %40s", hex) == 1 &&
         kpc__unhex(hex, id, 16);
    size_t files = 0;
    while (ok && fgets(line, sizeof line, f)) {
        unsigned long long dev, ino, size, mtime;
        char fpath[600];
        if (sscanf(line, "file %llu %llu %llu %llu %599[^\n]", &dev, &ino, &size, &mtime, fpath) != 5) {
            ok = false;
            break;
        }
        struct stat st;
        ok = kpc__fstatat(AT_FDCWD, fpath, &st, 0) == 0 && (unsigned long long)st.st_dev == dev &&
             (unsigned long long)st.st_ino == ino && (unsigned long long)st.st_size == size &&
             (unsigned long long)kpc__ts_ns(st.st_mtim) == mtime;
        files++;
    }
    fclose(f);
    if (ok && files > 0)
        KPC_LOG(KPC_LOG_DEBUG, "compiler identity recalled from %s", path);
    return ok && files > 0;
}

void kpc_identity_remember(const kpc_root *root, const char *platform, const kpc_identity_files *files,
                           const uint8_t id[16])
{
    char path[128], tmp[160];
    if (root == NULL || files->count == 0 || id_name(platform, path, sizeof path) != 0)
        return;
    snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
    int fd = kpc_root_open_memo(root, tmp, O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (fd < 0) {
        KPC_LOG(KPC_LOG_DEBUG, "open(%s): %s", tmp, strerror(errno));
        return;
    }
    char hex[33];
    kpc__hex(id, 16, hex);
    char buf[32 * 700 + 128];
    size_t n = (size_t)snprintf(buf, sizeof buf, "%s\nid %s\n", ID_MAGIC, hex);
    for (size_t i = 0; i < files->count && n < sizeof buf; i++) {
        struct stat st;
        if (kpc__fstatat(AT_FDCWD, files->paths[i], &st, 0) != 0)
            continue;
        n += (size_t)snprintf(buf + n, sizeof buf - n, "file %llu %llu %llu %llu %s\n",
                              (unsigned long long)st.st_dev, (unsigned long long)st.st_ino,
                              (unsigned long long)st.st_size,
                              (unsigned long long)kpc__ts_ns(st.st_mtim),
                              files->paths[i]);
    }
    bool ok = n < sizeof buf && kpc__write_all(fd, buf, n) == 0;
    close(fd);
    if (!ok || kpc_root_rename_memo(root, tmp, path) != 0)
        kpc_root_unlink_memo(root, tmp);
}

struct build_id_search {
    const char *needle;
    uint8_t *id;
    size_t cap, len;
    char *path;
    size_t path_cap;
};

static int find_build_id(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    struct build_id_search *s = arg;
    if (info->dlpi_name == NULL || strstr(info->dlpi_name, s->needle) == NULL)
        return 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_NOTE)
            continue;
        const char *p = (const char *)(info->dlpi_addr + ph->p_vaddr);
        const char *end = p + ph->p_memsz;
        while (p + sizeof(ElfW(Nhdr)) <= end) {
            const ElfW(Nhdr) *nh = (const ElfW(Nhdr) *)p;
            const char *name = p + sizeof *nh;
            const char *desc = name + ((nh->n_namesz + 3) & ~3u);
            if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 && memcmp(name, "GNU", 4) == 0 &&
                desc + nh->n_descsz <= end) {
                s->len = nh->n_descsz < s->cap ? nh->n_descsz : s->cap;
                memcpy(s->id, desc, s->len);
                snprintf(s->path, s->path_cap, "%s", info->dlpi_name);
                return 1;
            }
            p = desc + ((nh->n_descsz + 3) & ~3u);
        }
    }
    return 0;
}

size_t kpc_identity_loaded_build_id(const char *needle, uint8_t *id, size_t cap, char *path_out,
                                    size_t path_cap)
{
    struct build_id_search s = {needle, id, cap, 0, path_out, path_cap};
    dl_iterate_phdr(find_build_id, &s);
    return s.len;
}

void kpc_identity_add_build_id(XXH3_state_t *st, kpc_identity_files *files, const char *needle, char *desc,
                               size_t desc_cap)
{
    uint8_t id[64];
    char path[512];
    size_t n = kpc_identity_loaded_build_id(needle, id, sizeof id, path, sizeof path);
    XXH3_128bits_update(st, needle, strlen(needle) + 1);
    XXH3_128bits_update(st, id, n);
    if (n == 0) {
        KPC_LOG(KPC_LOG_WARN, "no build id for %s among the loaded objects", needle);
        return;
    }
    if (files->count < 32)
        strlcpy(files->paths[files->count++], path, sizeof files->paths[0]);
    char hex[129];
    kpc__hex(id, n < 8 ? n : 8, hex);
    size_t used = strlen(desc);
    snprintf(desc + used, desc_cap - used, "%s%s:%s", used ? " " : "", needle, hex);
}
