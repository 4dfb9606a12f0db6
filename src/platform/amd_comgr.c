/*
 * amd_comgr.c - comgr as both AMD platforms use it: loaded on first need (a target never
 * seen before, an identity, a compile), so that a warm hit and the tools never pay its
 * load and run where ROCm is absent.
 *
 * A target comgr does not know crashes inside comgr (5.2) when compiled for, so every
 * target is validated against comgr's ISA list first, and the full name must pass
 * amd_comgr_get_isa_metadata, which rejects features a processor lacks.
 */
#define _GNU_SOURCE
#include "platform/amd_comgr.h"
#include "platform/platform.h"
#include "base/fault.h"
#include "base/log.h"
#include "base/hash.h"

#include <bsd/string.h>
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <amd_comgr.h>
#include <libgen.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t */

static struct {
    void *lib;
    int (*isa_count)(size_t *);
    int (*isa_name)(size_t, const char **);
    int (*isa_metadata)(const char *, amd_comgr_metadata_node_t *);
    int (*destroy_metadata)(amd_comgr_metadata_node_t);
    kpc_status status;
} comgr;

static pthread_once_t comgr_once = PTHREAD_ONCE_INIT;

#define SONAME_OF(major) "libamd_comgr.so." #major
#define SONAME(major) SONAME_OF(major)
#ifdef KPC_PLATFORM_COMGR
/* The comgr platform calls comgr's actions, and their numbers differ between majors: only
 * the major of the header it was built against will do (checked again once loaded). */
static const char *const comgr_sonames[] = {SONAME(AMD_COMGR_INTERFACE_VERSION_MAJOR), "libamd_comgr.so", NULL};
#else
/* comgr is libamd_comgr.so.2 in ROCm 5 and 6 and libamd_comgr.so.3 in ROCm 7; the
 * unversioned development link last. hipRTC only asks it for its ISA list, the same
 * calls in every major. */
static const char *const comgr_sonames[] = {"libamd_comgr.so.3", "libamd_comgr.so.2", "libamd_comgr.so", NULL};
#endif

#define LOAD(field, name)                                                                      \
    do {                                                                                       \
        *(void **)&comgr.field = dlsym(comgr.lib, name);                                       \
        if (comgr.field == NULL) {                                                             \
            KPC_LOG(KPC_LOG_ERROR, "dlsym(%s): %s", name, dlerror());                          \
            return KPC_E_UNAVAILABLE;                                                          \
        }                                                                                      \
    } while (0)

static kpc_status load_symbols(void)
{
    /* a comgr already in the process first (one the HIP runtime links): the ISA list that
     * guards the compiles is then the one they run on, and no second LLVM is loaded */
    for (const char *const *name = comgr_sonames; *name && comgr.lib == NULL; name++)
        comgr.lib = dlopen(*name, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    for (const char *const *name = comgr_sonames; *name && comgr.lib == NULL; name++)
        comgr.lib = dlopen(*name, RTLD_NOW | RTLD_LOCAL);
    if (comgr.lib == NULL) {
        KPC_LOG(KPC_LOG_ERROR, "cannot load comgr (%s): %s", comgr_sonames[0], dlerror());
        return KPC_E_UNAVAILABLE;
    }
#ifdef KPC_PLATFORM_COMGR
    void (*get_version)(size_t *, size_t *);
    *(void **)&get_version = dlsym(comgr.lib, "amd_comgr_get_version");
    size_t major = 0, minor = 0;
    if (get_version)
        get_version(&major, &minor);
    if (major != AMD_COMGR_INTERFACE_VERSION_MAJOR) {
        KPC_LOG(KPC_LOG_ERROR, "the comgr loaded is version %zu.%zu, and kpc was built against comgr "
                "%d's header, whose action numbers differ: rebuild kpc against this comgr",
                major, minor, AMD_COMGR_INTERFACE_VERSION_MAJOR);
        return KPC_E_UNAVAILABLE;
    }
#endif
    LOAD(isa_count, "amd_comgr_get_isa_count");
    LOAD(isa_name, "amd_comgr_get_isa_name");
    LOAD(isa_metadata, "amd_comgr_get_isa_metadata");
    LOAD(destroy_metadata, "amd_comgr_destroy_metadata");
    return KPC_OK;
}

static void load(void) { comgr.status = load_symbols(); }

kpc_status kpc_comgr_open(void **lib)
{
    pthread_once(&comgr_once, load);
    *lib = comgr.status == KPC_OK ? comgr.lib : NULL;
    return comgr.status;
}

/* ---- identity ----------------------------------------------------------------------- */
static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Hash the files of dir whose names end in suffix (name, then content, in name order)
 * into st; one entry in files stands for the directory: its mtime changes when a package
 * upgrade replaces a file. */
static void hash_dir(XXH3_state_t *st, kpc_identity_files *files, const char *dir, const char *suffix)
{
    DIR *d = kpc__opendir(dir);
    if (d == NULL)
        return;
    char *names[512];
    size_t n = 0, slen = strlen(suffix);
    struct dirent *e;
    while ((e = readdir(d)) != NULL && n < 512) {
        size_t len = strlen(e->d_name);
        if (len > slen && strcmp(e->d_name + len - slen, suffix) == 0 && (names[n] = strdup(e->d_name)))
            n++;
    }
    closedir(d);
    qsort(names, n, sizeof names[0], cmp_str);
    for (size_t i = 0; i < n; i++) {
        char path[1200];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        int fd = kpc_open_regular(AT_FDCWD, path, O_RDONLY, 0, NULL); /* never blocks on a FIFO */
        void *buf;
        size_t size;
        if (fd >= 0 && kpc__read_fd(fd, 64u << 20, &buf, &size) == KPC_OK) {
            XXH3_128bits_update(st, names[i], strlen(names[i]) + 1);
            XXH3_128bits_update(st, buf, size);
            free(buf);
        }
        if (fd >= 0)
            close(fd);
        free(names[i]);
    }
    if (files->count < 32)
        strlcpy(files->paths[files->count++], dir, sizeof files->paths[0]);
}

void kpc_comgr_identity_add_device_libs(XXH3_state_t *st, kpc_identity_files *files)
{
    char comgr_path[512];
    uint8_t id[64];
    if (kpc_identity_loaded_build_id("libamd_comgr", id, sizeof id, comgr_path, sizeof comgr_path) == 0)
        return;
    char dir[600];
    snprintf(dir, sizeof dir, "%s/amdgcn/bitcode", dirname(comgr_path));
    hash_dir(st, files, dir, ".bc");
}

void kpc_comgr_identity_add_hip_headers(XXH3_state_t *st, kpc_identity_files *files, const char *hip_dir)
{
    char detail[700];
    snprintf(detail, sizeof detail, "%samd_detail", hip_dir);
    hash_dir(st, files, hip_dir, ".h");
    hash_dir(st, files, detail, ".h");
}

/* ---- targets ------------------------------------------------------------------------ */

/* name without comgr's ISA prefix, when it has one ("amdgcn-amd-amdhsa--gfx90a": "gfx90a"). */
static const char *without_isa_prefix(const char *name)
{
    size_t n = strlen(KPC_COMGR_ISA_PREFIX);
    return strncmp(name, KPC_COMGR_ISA_PREFIX, n) == 0 ? name + n : name;
}

/* Canonical form: processor, then sramecc, then xnack, each feature once with + or -.
 * A processor is lowercase letters and digits, in words joined by single dashes: comgr's
 * generic targets (gfx9-4-generic, gfx10-3-generic, gfx11-generic) are processors too,
 * and whether comgr knows one is its ISA list's answer, as for any. */
static kpc_status canonical_target(const char *in, char *out, size_t cap)
{
    char proc[32] = "", sramecc = 0, xnack = 0;
    const char *p = without_isa_prefix(in);
    size_t len = strcspn(p, ":");
    if (len == 0 || len >= sizeof proc)
        return KPC_E_INVALID;
    memcpy(proc, p, len);
    for (size_t i = 0; i < len; i++) {
        bool dash_ok = proc[i] == '-' && i > 0 && i + 1 < len && proc[i - 1] != '-';
        if (!((proc[i] >= 'a' && proc[i] <= 'z') || (proc[i] >= '0' && proc[i] <= '9') || dash_ok))
            return KPC_E_INVALID;
    }
    p += len;
    while (*p == ':') {
        p++;
        size_t flen = strcspn(p, ":");
        if (flen < 2)
            return KPC_E_INVALID;
        char sign = p[flen - 1];
        if (sign != '+' && sign != '-')
            return KPC_E_INVALID;
        char *slot = flen - 1 == 7 && strncmp(p, "sramecc", 7) == 0 ? &sramecc
                     : flen - 1 == 5 && strncmp(p, "xnack", 5) == 0 ? &xnack
                                                                     : NULL;
        if (slot == NULL || *slot != 0)
            return KPC_E_INVALID;
        *slot = sign;
        p += flen;
    }
    if (*p != '\0')
        return KPC_E_INVALID;
    int n = snprintf(out, cap, "%s%s%s%s%s", proc, sramecc ? ":sramecc" : "",
                     sramecc ? (char[]){sramecc, 0} : "", xnack ? ":xnack" : "",
                     xnack ? (char[]){xnack, 0} : "");
    return n > 0 && (size_t)n < cap ? KPC_OK : KPC_E_INVALID;
}

static void log_supported(const char *target)
{
    /* lines of at most 80 columns: comgr knows 30 to 60 processors (and, from ROCm 6,
     * generic targets with longer names: gfx10-3-generic) */
    char list[4096] = "";
    size_t n = 0, line = 80;
    comgr.isa_count(&n);
    for (size_t i = 0; i < n; i++) {
        const char *name = NULL;
        if (comgr.isa_name(i, &name) == 0 && name) {
            name = without_isa_prefix(name);
            size_t used = strlen(list), len = strlen(name);
            bool wrap = line + 1 + len > 80;
            snprintf(list + used, sizeof list - used, "%s%s", wrap ? "\n    " : " ", name);
            line = wrap ? 4 + len : line + 1 + len;
        }
    }
    KPC_LOG(KPC_LOG_ERROR, "target \"%s\" is not supported by this comgr, which supports:%s\n"
            "    (with :sramecc+/- and :xnack+/- where the processor has them)", target, list);
}

kpc_status kpc_comgr_target_normalize(const kpc_root *root, const char *platform, const uint8_t id[16],
                                      const char *target, char *out, size_t cap)
{
    if (canonical_target(target, out, cap) != KPC_OK) {
        KPC_LOG(KPC_LOG_ERROR, "target \"%s\" is malformed (e.g. gfx90a or gfx90a:sramecc+:xnack-)", target);
        return KPC_E_INVALID;
    }
    if (kpc_platform_targets_known(root, platform, id, out))
        return KPC_OK;
    void *lib;
    kpc_status s = kpc_comgr_open(&lib);
    if (s != KPC_OK)
        return s;
    /* the processor must be one comgr lists: compiling for any other crashes comgr */
    size_t n = 0, plen = strcspn(out, ":");
    bool listed = false;
    comgr.isa_count(&n);
    for (size_t i = 0; i < n && !listed; i++) {
        const char *name = NULL;
        if (comgr.isa_name(i, &name) != 0 || name == NULL)
            continue;
        name = without_isa_prefix(name);
        listed = strlen(name) == plen && strncmp(name, out, plen) == 0;
    }
    char full[128];
    snprintf(full, sizeof full, KPC_COMGR_ISA_PREFIX "%s", out);
    amd_comgr_metadata_node_t meta;
    if (!listed || comgr.isa_metadata(full, &meta) != 0) {
        log_supported(target);
        return KPC_E_INVALID;
    }
    comgr.destroy_metadata(meta);
    kpc_platform_targets_remember(root, platform, id, out);
    return KPC_OK;
}
