/*
 * comgr.c - the comgr platform: HIP source compiled straight through AMD's Code Object
 * Manager (libamd_comgr, dlopen'ed, never linked), with neither hipRTC nor the HIP
 * runtime: for build hosts and tools (kpc compile, kpc pack create). It makes code
 * objects only (a program loads them with hipModuleLoadData): the device calls answer
 * KPC_E_NO_DEVICE.
 *
 * The steps are hipRTC's own over comgr: source to bitcode with the device libraries,
 * code generation, the link to an executable. clang's HIP wrapper and <hip/hip_runtime.h>
 * (RTC mode, __HIPCC_RTC__) come from disk, not from libhiprtc: the system's HIP headers
 * are hashed into the identity, and the objects are not hipRTC's ("comgr" is in the key).
 * Traps of comgr 2.4 (ROCm 5.2): a target it does not know crashes it (amd_comgr.c checks
 * every target first); its logs are not NUL-terminated; it is not thread-safe (8 threads at
 * once gave objects other than the serial ones), so compiles are serialized.
 * Name expressions are hipRTC's way: each is instantiated by a constant of the source, then
 * found among the executable's symbols by its demangled name. */
#define _GNU_SOURCE
#include "platform/amd_comgr.h"
#include "platform/amd_deps.h"
#include "platform/compile.h"
#include "platform/identity.h"
#include "base/log.h"
#include "base/hash.h"

#include <amd_comgr.h>
#include <ctype.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */

/* ---- comgr's compile entry points (platform/amd_comgr.c loads the library) ---------- */
typedef amd_comgr_status_t status_t;
static struct {
    status_t (*status_string)(status_t, const char **);
    status_t (*create_data)(amd_comgr_data_kind_t, amd_comgr_data_t *);
    status_t (*release_data)(amd_comgr_data_t);
    status_t (*set_data)(amd_comgr_data_t, size_t, const char *);
    status_t (*set_data_name)(amd_comgr_data_t, const char *);
    status_t (*get_data)(amd_comgr_data_t, size_t *, char *);
    status_t (*create_set)(amd_comgr_data_set_t *);
    status_t (*destroy_set)(amd_comgr_data_set_t);
    status_t (*set_add)(amd_comgr_data_set_t, amd_comgr_data_t);
    status_t (*data_count)(amd_comgr_data_set_t, amd_comgr_data_kind_t, size_t *);
    status_t (*data_get)(amd_comgr_data_set_t, amd_comgr_data_kind_t, size_t, amd_comgr_data_t *);
    status_t (*create_info)(amd_comgr_action_info_t *);
    status_t (*destroy_info)(amd_comgr_action_info_t);
    status_t (*info_isa)(amd_comgr_action_info_t, const char *);
    status_t (*info_language)(amd_comgr_action_info_t, amd_comgr_language_t);
    status_t (*info_options)(amd_comgr_action_info_t, const char **, size_t);
    status_t (*info_logging)(amd_comgr_action_info_t, bool);
    status_t (*do_action)(amd_comgr_action_kind_t, amd_comgr_action_info_t, amd_comgr_data_set_t,
                          amd_comgr_data_set_t);
    status_t (*iterate_symbols)(amd_comgr_data_t, status_t (*)(amd_comgr_symbol_t, void *), void *);
    status_t (*symbol_info)(amd_comgr_symbol_t, amd_comgr_symbol_info_t, void *);
    status_t (*demangle)(amd_comgr_data_t, amd_comgr_data_t *);
    kpc_status status;
} cg;

static pthread_once_t cg_once = PTHREAD_ONCE_INIT;
/* comgr 2.4 is not safe to call from several threads: one compile at a time */
static pthread_mutex_t compile_lock = PTHREAD_MUTEX_INITIALIZER;

static kpc_status load_symbols(void)
{
    void *lib;
    kpc_status s = kpc_comgr_open(&lib);
    if (s != KPC_OK)
        return s;
    static const struct {
        size_t offset;
        const char *name;
    } syms[] = {
#define SYM(field, name) {offsetof(__typeof__(cg), field), name}
        SYM(status_string, "amd_comgr_status_string"), SYM(create_data, "amd_comgr_create_data"),
        SYM(release_data, "amd_comgr_release_data"), SYM(set_data, "amd_comgr_set_data"),
        SYM(set_data_name, "amd_comgr_set_data_name"), SYM(get_data, "amd_comgr_get_data"),
        SYM(create_set, "amd_comgr_create_data_set"), SYM(destroy_set, "amd_comgr_destroy_data_set"),
        SYM(set_add, "amd_comgr_data_set_add"), SYM(data_count, "amd_comgr_action_data_count"),
        SYM(data_get, "amd_comgr_action_data_get_data"), SYM(create_info, "amd_comgr_create_action_info"),
        SYM(destroy_info, "amd_comgr_destroy_action_info"), SYM(info_isa, "amd_comgr_action_info_set_isa_name"),
        SYM(info_language, "amd_comgr_action_info_set_language"),
        SYM(info_options, "amd_comgr_action_info_set_option_list"),
        SYM(info_logging, "amd_comgr_action_info_set_logging"), SYM(do_action, "amd_comgr_do_action"),
        SYM(iterate_symbols, "amd_comgr_iterate_symbols"), SYM(symbol_info, "amd_comgr_symbol_get_info"),
        SYM(demangle, "amd_comgr_demangle_symbol_name"),
#undef SYM
    };
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        void *f = dlsym(lib, syms[i].name);
        if (f == NULL) {
            KPC_LOG(KPC_LOG_ERROR, "dlsym(%s): %s", syms[i].name, dlerror());
            return KPC_E_UNAVAILABLE;
        }
        memcpy((char *)&cg + syms[i].offset, &f, sizeof f);
    }
    return KPC_OK;
}

static void load(void) { cg.status = load_symbols(); }
static kpc_status need_comgr(void) { return pthread_once(&cg_once, load), cg.status; }

#define DEFAULT_NAME "kpc_source.hip" /* a source without a name of its own */
/* ---- the options: hipRTC 5.2's, with its in-memory runtime header taken from disk --- */
/* Source to bitcode (the request's options come after these), the device libraries'
 * variant, code generation. The last of each is wave64's, which hipRTC 5.2 builds for
 * every processor; here only for those before gfx10, whose HIP headers refuse wave64
 * (hipRTC's header is preprocessed beforehand). */
static const char *const compile_options[] = {
    "-O3", "-mllvm", "-amdgpu-prelink", "-std=c++14", "-nogpuinc", "-D__HIPCC_RTC__", "-include",
    "__clang_hip_runtime_wrapper.h", "-include", "hip/hip_runtime.h", "-mwavefrontsize64"};
static const char *const library_options[] = {"wavefrontsize64"};
static const char *const codegen_options[] = {
    "-O3", "-mllvm", "-amdgpu-internalize-symbols", "-mcumode", "-mwavefrontsize64"};

/* ---- identity ----------------------------------------------------------------------- */
static kpc_status comgr_identity(const kpc_root *root, uint8_t id[16], char *desc, size_t desc_cap)
{
    desc[0] = '\0';
    if (kpc_identity_recall(root, "comgr", id))
        return KPC_OK;
    kpc_status s = need_comgr();
    if (s != KPC_OK)
        return s;
    XXH3_state_t st;
    XXH3_128bits_reset(&st);
    kpc_identity_files files = {0};
    kpc_identity_add_build_id(&st, &files, "libamd_comgr", desc, desc_cap);
    kpc_identity_add_build_id(&st, &files, "libLLVM", desc, desc_cap);
    kpc_comgr_identity_add_device_libs(&st, &files);
    const char *hip = kpc_amd_deps_hip_headers(); /* what every compile includes */
    if (hip)
        kpc_comgr_identity_add_hip_headers(&st, &files, hip);
    /* the options above are this file's: a kpc that changes them compiles otherwise */
    const char *const *lists[] = {compile_options, library_options, codegen_options};
    size_t counts[] = {sizeof compile_options / sizeof compile_options[0], 1,
                       sizeof codegen_options / sizeof codegen_options[0]};
    for (size_t l = 0; l < 3; l++)
        for (size_t i = 0; i < counts[l]; i++)
            XXH3_128bits_update(&st, lists[l][i], strlen(lists[l][i]) + 1);
    XXH128_canonicalFromHash((XXH128_canonical_t *)id, XXH3_128bits_digest(&st));
    kpc_identity_remember(root, "comgr", &files, id);
    KPC_LOG(KPC_LOG_INFO, "compiler identity: %s", desc);
    return KPC_OK;
}

static kpc_status comgr_target_normalize(const kpc_root *root, const uint8_t id[16], const char *target,
                                         char *out, size_t cap)
{
    return kpc_comgr_target_normalize(root, "comgr", id, target, out, cap);
}

/* ---- one program: the request, then what its compile made ----------------------------- */
typedef struct program {
    const kpc_source *src; /* the in-memory headers: the request outlives the program */
    char *code;            /* the source, then a constant per name expression */
    size_t code_len;
    char *name;
    char **exprs, **lowered; /* lowered[i]: NULL until found */
    size_t num_exprs;
    char *log;
    size_t log_len;
    char *exe;
    size_t exe_len;
} program;

/* the status of a kpc-side failure (out of memory), in comgr's terms; kpc's own (comgr's count
 * up from 0) for an expression naming no function of the object: a reason that says so */
#define NOMEM AMD_COMGR_STATUS_ERROR_OUT_OF_RESOURCES
#define NO_SYMBOL (-2)

static void cg_destroy(void **prog)
{
    program *p = *prog;
    for (size_t i = 0; i < p->num_exprs; i++) {
        free(p->exprs[i]);
        free(p->lowered[i]);
    }
    free(p->exprs);
    free(p->lowered);
    free(p->code);
    free(p->name);
    free(p->log);
    free(p->exe);
    free(p);
    *prog = NULL;
}

static int cg_create(void **out, const char *code, const char *name, const kpc_source *src)
{
    program *p = calloc(1, sizeof *p);
    if (p == NULL)
        return NOMEM;
    p->src = src;
    p->code_len = strlen(code);
    p->code = strdup(code);
    /* comgr writes the source to <its temporary dir>/input/<name>: the base name alone */
    const char *base = strrchr(name, '/') ? strrchr(name, '/') + 1 : name;
    p->name = strdup(strcmp(base, "") && strcmp(base, ".") && strcmp(base, "..") ? base : DEFAULT_NAME);
    *out = p;
    if (p->code == NULL || p->name == NULL) {
        cg_destroy(out);
        return NOMEM;
    }
    return AMD_COMGR_STATUS_SUCCESS;
}

/* A name expression is instantiated by a constant that takes its value (a template
 * kernel nothing else names is otherwise never emitted). */
static int cg_add_name(void *prog, const char *expr)
{
    program *p = prog;
    if (expr[0] == '\0')
        return AMD_COMGR_STATUS_ERROR_INVALID_ARGUMENT;
    char line[64];
    int head = snprintf(line, sizeof line, "\nextern \"C\" constexpr auto __kpc_name_%zu = ", p->num_exprs);
    size_t add = (size_t)head + strlen(expr) + 3;
    char *code = realloc(p->code, p->code_len + add + 1);
    char **exprs = realloc(p->exprs, (p->num_exprs + 1) * sizeof *exprs);
    if (code)
        p->code = code;
    if (exprs)
        p->exprs = exprs;
    char **lowered = realloc(p->lowered, (p->num_exprs + 1) * sizeof *lowered);
    if (lowered)
        p->lowered = lowered;
    if (code == NULL || exprs == NULL || lowered == NULL || (exprs[p->num_exprs] = strdup(expr)) == NULL)
        return NOMEM;
    lowered[p->num_exprs++] = NULL;
    p->code_len += (size_t)snprintf(code + p->code_len, add + 1, "%s%s;\n", line, expr);
    return AMD_COMGR_STATUS_SUCCESS;
}

/* Append the logs an action left in set to the program's log. */
static void take_logs(program *p, amd_comgr_data_set_t set)
{
    size_t n = 0;
    cg.data_count(set, AMD_COMGR_DATA_KIND_LOG, &n);
    for (size_t i = 0; i < n; i++) {
        amd_comgr_data_t d;
        size_t size = 0;
        if (cg.data_get(set, AMD_COMGR_DATA_KIND_LOG, i, &d) != 0)
            continue;
        char *log;
        if (cg.get_data(d, &size, NULL) == 0 && size > 0 && (log = realloc(p->log, p->log_len + size + 1))) {
            p->log = log;
            if (cg.get_data(d, &size, log + p->log_len) == 0)
                p->log_len += size;
        }
        cg.release_data(d);
    }
}

/* Add one data object of kind to set. */
static status_t add_data(amd_comgr_data_set_t set, amd_comgr_data_kind_t kind, const char *name,
                         const char *bytes, size_t size)
{
    amd_comgr_data_t d;
    status_t r = cg.create_data(kind, &d);
    if (r != 0)
        return r;
    if ((r = cg.set_data(d, size, bytes)) == 0 && (r = cg.set_data_name(d, name)) == 0)
        r = cg.set_add(set, d);
    cg.release_data(d);
    return r;
}

/* One action from in to a fresh *out with these options; its log kept. */
static status_t act(program *p, amd_comgr_action_kind_t kind, amd_comgr_action_info_t info,
                    const char *const *opts, size_t n, amd_comgr_data_set_t in, amd_comgr_data_set_t *out)
{
    status_t r = cg.create_set(out);
    if (r != 0)
        return r;
    if ((r = cg.info_options(info, (const char **)opts, n)) == 0)
        r = cg.do_action(kind, info, in, *out);
    take_logs(p, *out);
    return r;
}

/* The executable's bytes into the program. */
static status_t take_executable(program *p, amd_comgr_data_set_t set)
{
    amd_comgr_data_t d;
    size_t n = 0;
    status_t r = cg.data_count(set, AMD_COMGR_DATA_KIND_EXECUTABLE, &n);
    if (r != 0 || n != 1)
        return r != 0 ? r : AMD_COMGR_STATUS_ERROR;
    if ((r = cg.data_get(set, AMD_COMGR_DATA_KIND_EXECUTABLE, 0, &d)) != 0)
        return r;
    size_t size = 0;
    if ((r = cg.get_data(d, &size, NULL)) == 0 && (p->exe = malloc(size ? size : 1)) == NULL)
        r = NOMEM;
    if (r == 0 && (r = cg.get_data(d, &size, p->exe)) == 0)
        p->exe_len = size;
    cg.release_data(d);
    return r;
}

/* An expression as the demangler would spell its function: no '&', no enclosing
 * parentheses, no white space. */
static void strip_expression(const char *in, char *out, size_t cap)
{
    size_t n = 0;
    for (; *in && n + 1 < cap; in++)
        if (!isspace((unsigned char)*in))
            out[n++] = *in;
    out[n] = '\0';
    char *s = out;
    while (*s == '&' || (*s == '(' && n > 1 && s[n - 1] == ')')) {
        if (*s == '(')
            s[--n] = '\0';
        s++, n--;
    }
    memmove(out, s, n + 1);
}

/* A demangled function ("void scale<float>(float*, int)") as its name alone, without
 * white space ("scale<float>"): the parameter list and the return type dropped. */
static void strip_demangled(const char *in, char *out, size_t cap)
{
    size_t len = strlen(in), end = len;
    if (len > 0 && in[len - 1] == ')') { /* the parameter list: from its matching '(' */
        int depth = 0;
        for (size_t i = len; i-- > 0;) {
            depth += in[i] == ')' ? 1 : in[i] == '(' ? -1 : 0;
            if (depth == 0) {
                end = i;
                break;
            }
        }
    }
    size_t start = 0;
    int depth = 0;
    for (size_t i = 0; i < end; i++) { /* the return type: up to the last space outside <> */
        depth += in[i] == '<' ? 1 : in[i] == '>' ? -1 : 0;
        if (in[i] == ' ' && depth == 0)
            start = i + 1;
    }
    size_t n = 0;
    for (size_t i = start; i < end && n + 1 < cap; i++)
        if (!isspace((unsigned char)in[i]))
            out[n++] = in[i];
    out[n] = '\0';
}

struct symbol_walk {
    program *p;
    char **stripped; /* each expression, stripped */
};

static status_t match_symbol(amd_comgr_symbol_t sym, void *arg)
{
    struct symbol_walk *w = arg;
    amd_comgr_symbol_type_t type;
    uint64_t len = 0;
    if (cg.symbol_info(sym, AMD_COMGR_SYMBOL_INFO_TYPE, &type) != 0 || type != AMD_COMGR_SYMBOL_TYPE_FUNC ||
        cg.symbol_info(sym, AMD_COMGR_SYMBOL_INFO_NAME_LENGTH, &len) != 0 || len == 0 || len > 4096)
        return AMD_COMGR_STATUS_SUCCESS;
    char *mangled = calloc(1, len + 1);
    if (mangled == NULL || cg.symbol_info(sym, AMD_COMGR_SYMBOL_INFO_NAME, mangled) != 0) {
        free(mangled);
        return AMD_COMGR_STATUS_SUCCESS;
    }
    amd_comgr_data_t in, out;
    char *demangled = NULL;
    size_t size = 0;
    if (cg.create_data(AMD_COMGR_DATA_KIND_BYTES, &in) == 0) {
        if (cg.set_data(in, len, mangled) == 0 && cg.demangle(in, &out) == 0) {
            if (cg.get_data(out, &size, NULL) == 0 && (demangled = calloc(1, size + 1)) != NULL &&
                cg.get_data(out, &size, demangled) != 0) {
                free(demangled);
                demangled = NULL;
            }
            cg.release_data(out);
        }
        cg.release_data(in);
    }
    if (demangled) {
        char name[4200];
        strip_demangled(demangled, name, sizeof name);
        for (size_t i = 0; i < w->p->num_exprs; i++)
            if (w->p->lowered[i] == NULL && strcmp(name, w->stripped[i]) == 0)
                w->p->lowered[i] = strdup(mangled);
        free(demangled);
    }
    free(mangled);
    return AMD_COMGR_STATUS_SUCCESS;
}

/* The lowered name of each expression, from the executable's symbols. */
static void find_lowered(program *p, amd_comgr_data_set_t exe)
{
    amd_comgr_data_t d;
    if (p->num_exprs == 0 || cg.data_get(exe, AMD_COMGR_DATA_KIND_EXECUTABLE, 0, &d) != 0)
        return;
    char **stripped = calloc(p->num_exprs, sizeof *stripped);
    bool ok = stripped != NULL;
    for (size_t i = 0; ok && i < p->num_exprs; i++) {
        size_t cap = strlen(p->exprs[i]) + 1;
        if ((stripped[i] = malloc(cap)) == NULL)
            ok = false;
        else
            strip_expression(p->exprs[i], stripped[i], cap);
    }
    struct symbol_walk w = {p, stripped};
    if (ok)
        cg.iterate_symbols(d, match_symbol, &w);
    for (size_t i = 0; stripped && i < p->num_exprs; i++)
        free(stripped[i]);
    free(stripped);
    cg.release_data(d);
}

/* The steps, each into a set of its own; compile.c holds compile_lock around them. */
static int cg_compile(void *prog, int num_options, const char **options)
{
    program *p = prog;
    const size_t ncompile = sizeof compile_options / sizeof compile_options[0];
    const char **opts = calloc(ncompile + (size_t)num_options, sizeof *opts);
    if (opts == NULL)
        return NOMEM;
    /* the target option compile.c appends names the ISA; comgr adds its own for it */
    char isa[128] = "";
    for (int i = 0; i < num_options; i++)
        if (strncmp(options[i], "--offload-arch=", 15) == 0)
            snprintf(isa, sizeof isa, KPC_COMGR_ISA_PREFIX "%s", options[i] + 15);
    const char *proc = isa + strlen(KPC_COMGR_ISA_PREFIX) + 3; /* after "gfx" */
    size_t wave32 = isa[0] && proc[0] == '1' && strcspn(proc, ":") >= 4, n = 0; /* gfx10 on */
    for (size_t i = 0; i < ncompile - wave32; i++)
        opts[n++] = compile_options[i];
    for (int i = 0; i < num_options; i++)
        if (strncmp(options[i], "--offload-arch=", 15) != 0)
            opts[n++] = options[i];
    amd_comgr_data_set_t in = {0}, bc = {0}, libs = {0}, linked = {0}, reloc = {0}, exe = {0};
    amd_comgr_action_info_t info;
    status_t r = cg.create_info(&info);
    if (r != 0) {
        free(opts);
        return r;
    }
    if (isa[0] == '\0')
        r = AMD_COMGR_STATUS_ERROR_INVALID_ARGUMENT;
    if (r == 0 && (r = cg.info_isa(info, isa)) == 0 && (r = cg.info_language(info, AMD_COMGR_LANGUAGE_HIP)) == 0)
        r = cg.info_logging(info, true);
    if (r == 0 && (r = cg.create_set(&in)) == 0)
        r = add_data(in, AMD_COMGR_DATA_KIND_SOURCE, p->name, p->code, p->code_len);
    for (size_t i = 0; r == 0 && i < p->src->num_headers; i++)
        r = add_data(in, AMD_COMGR_DATA_KIND_INCLUDE, p->src->header_names[i], p->src->header_sources[i],
                     strlen(p->src->header_sources[i]));
#if AMD_COMGR_INTERFACE_VERSION_MAJOR >= 3 /* comgr 3 (ROCm 6): the compile links the device libraries */
    if (r == 0)
        r = act(p, AMD_COMGR_ACTION_COMPILE_SOURCE_WITH_DEVICE_LIBS_TO_BC, info, opts, n, in, &libs);
#else
    if (r == 0)
        r = act(p, AMD_COMGR_ACTION_COMPILE_SOURCE_TO_BC, info, opts, n, in, &bc);
#pragma GCC diagnostic push /* deprecated by comgr 2.6; 2.4 has no other way to pick wave64's libraries */
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    if (r == 0)
        r = act(p, AMD_COMGR_ACTION_ADD_DEVICE_LIBRARIES, info, library_options, 1 - wave32, bc, &libs);
#pragma GCC diagnostic pop
#endif
    if (r == 0)
        r = act(p, AMD_COMGR_ACTION_LINK_BC_TO_BC, info, NULL, 0, libs, &linked);
    if (r == 0)
        r = act(p, AMD_COMGR_ACTION_CODEGEN_BC_TO_RELOCATABLE, info, codegen_options,
                sizeof codegen_options / sizeof codegen_options[0] - wave32, linked, &reloc);
    if (r == 0)
        r = act(p, AMD_COMGR_ACTION_LINK_RELOCATABLE_TO_EXECUTABLE, info, NULL, 0, reloc, &exe);
    if (r == 0)
        r = take_executable(p, exe);
    if (r == 0)
        find_lowered(p, exe);
    amd_comgr_data_set_t sets[] = {in, bc, libs, linked, reloc, exe};
    for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++)
        if (sets[i].handle)
            cg.destroy_set(sets[i]);
    cg.destroy_info(info);
    free(opts);
    return r;
}

static int cg_log_size(void *prog, size_t *size) { return *size = ((program *)prog)->log_len, 0; }

static int cg_log(void *prog, char *out)
{
    program *p = prog;
    if (p->log_len)
        memcpy(out, p->log, p->log_len);
    return 0;
}

static int cg_code_size(void *prog, const char *target, size_t *size)
{
    (void)target;
    *size = ((program *)prog)->exe_len;
    return *size ? 0 : AMD_COMGR_STATUS_ERROR;
}

static int cg_code(void *prog, const char *target, void *out)
{
    (void)target;
    program *p = prog;
    memcpy(out, p->exe, p->exe_len);
    return 0;
}

static int cg_lowered(void *prog, const char *expr, const char **out)
{
    program *p = prog;
    for (size_t i = 0; i < p->num_exprs; i++)
        if (strcmp(p->exprs[i], expr) == 0 && p->lowered[i]) {
            *out = p->lowered[i];
            return 0;
        }
    return NO_SYMBOL;
}

static enum kpc_compile_class cg_classify(int r)
{
    return r == AMD_COMGR_STATUS_SUCCESS ? KPC_COMPILE_OK : r == NOMEM ? KPC_COMPILE_NOMEM : KPC_COMPILE_FAILED;
}

static const char *cg_error(int r)
{
    const char *s = NULL;
    if (r == NO_SYMBOL)
        return "NO_SYMBOL: the expression names no function of the code object";
    return cg.status_string((status_t)r, &s) == 0 && s ? s : "unknown comgr status";
}

static const kpc_compiler comgr_compiler = {
    .name = "comgr",
    .arch_option = "--offload-arch=",
    .default_name = DEFAULT_NAME,
    .lock = &compile_lock,
    .create = cg_create,
    .add_name = cg_add_name,
    .compile = cg_compile,
    .log_size = cg_log_size,
    .log = cg_log,
    .code_size = cg_code_size,
    .code = cg_code,
    .lowered = cg_lowered,
    .destroy = cg_destroy,
    .classify = cg_classify,
    .error_string = cg_error,
    /* comgr's clang writes the files it read, as under hipRTC (platform/amd_deps.c) */
    .deps_options = kpc_amd_deps_options,
    .deps_from_file = kpc_amd_deps_collect,
};

static kpc_status comgr_compile(const char *target, const kpc_source *src, kpc_build *b)
{
    memset(b, 0, sizeof *b);
    kpc_status s = need_comgr();
    return s != KPC_OK ? s : kpc_compile_run(&comgr_compiler, target, src, b);
}

/* ---- no device runtime ---------------------------------------------------------------- */
static kpc_status no_device(const char *what)
{
    KPC_LOG(KPC_LOG_ERROR, "%s: no GPU runtime: the comgr platform only compiles (use a compile-only "
            "context, kpc_context_create_for_target, and load its code objects with hipModuleLoadData)",
            what);
    return KPC_E_NO_DEVICE;
}

static kpc_status comgr_device_target(int device, char *out, size_t cap)
{
    (void)device, (void)out, (void)cap;
    return no_device("device context");
}

static kpc_status comgr_module_load(int device, const void *code, size_t size, void **module)
{
    (void)device, (void)code, (void)size, (void)module;
    return no_device("module load");
}

static void comgr_module_unload(int device, void *module) { (void)device, (void)module; }

static kpc_status comgr_module_function(int device, void *module, const char *name, void **fn)
{
    (void)device, (void)module, (void)name, (void)fn;
    return no_device("kernel lookup");
}

const kpc_platform kpc_platform_builtin = {
    .name = "comgr",
    .identity = comgr_identity,
    .target_normalize = comgr_target_normalize,
    .compile = comgr_compile,
    .device_target = comgr_device_target,
    .module_load = comgr_module_load,
    .module_unload = comgr_module_unload,
    .module_function = comgr_module_function,
    .parallel_compiles = false,
};
