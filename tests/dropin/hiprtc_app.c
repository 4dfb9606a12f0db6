/*
 * hiprtc_app.c - a program written against the plain hipRTC API (no kpc include), the
 * application the drop-in tests run unchanged: against the real hipRTC, under
 * LD_PRELOAD=libkpc-hiprtc.so, and linked with -lkpc-hiprtc.
 *
 * usage: hiprtc_app MODE OUTDIR
 * It writes OUTDIR/report (every status, size, lowered name, and the log sizes) and
 * OUTDIR/N.co (code) and OUTDIR/N.log (log) per program, so that runs compare with cmp.
 * MODE: good (3 sources: extern "C", templates with name expressions, an in-memory
 * header), error (a compile error), include (-I ./headers, two-token and attached,
 * relative to the working directory), forward (an option kpc does not know; -imacros, keyed),
 * nogpu (no target option: the current device's), edge (odd calls, statuses only),
 * inputs (an empty source, header, header name or program name; NULL header arrays),
 * null_inputs (a NULL source, header or header name: the drop-in alone, hipRTC aborts),
 * storm (4 sources, for many processes at once), link (the link API, by dlsym),
 * corpus (the cases a warm run must answer without a compile: a warning log under -Wall,
 * -Rpass remarks, a name expression hipRTC cannot lower, names asked that were not added
 * or NULL, --gpu-max-threads-per-block, an empty option, a compile error, a NULL
 * program name, -fgpu-rdc: its bitcode, OUTDIR/N.bc, where hipRTC gives bitcode, -mtune=).
 */
#define __HIP_PLATFORM_AMD__ 1
#include <hip/hiprtc.h>

#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static FILE *report;
static const char *outdir;
static int probe_names; /* corpus: also ask for a name never added, and a NULL one */

static const char *saxpy =
    "extern \"C\" __global__ void saxpy(float a, const float *x, float *y, int n)\n"
    "{ int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = a * x[i] + y[i]; }\n";
static const char *templ =
    "template <typename T> __global__ void scale(T *x, T f, int n)\n"
    "{ int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= f; }\n"
    "namespace ns { template <int N> __global__ void fill(int *x) { x[threadIdx.x] = N; } }\n";
static const char *with_header =
    "#include \"params.h\"\n"
    "extern \"C\" __global__ void add_k(int *x) { x[threadIdx.x] += K; }\n";
static const char *unused_var =
    "extern \"C\" __global__ void unused(float *x) { int spare = 3; x[threadIdx.x] = 1.0f; }\n";
static const char *loop =
    "extern \"C\" __global__ void sum(float *x, int n)\n"
    "{ float s = 0; for (int i = 0; i < 64; i++) s += x[i * n]; x[threadIdx.x] = s; }\n";
static const char *broken =
    "extern \"C\" __global__ void broken(int *x) { x[0] = undeclared_thing; }\n";

static void save(int n, const char *suffix, const void *bytes, size_t size)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%d.%s", outdir, n, suffix);
    FILE *f = fopen(path, "wb");
    if (f == NULL || fwrite(bytes, 1, size, f) != size) {
        perror(path);
        exit(2);
    }
    fclose(f);
}

/* Whether opts ask for relocatable device code of a hipRTC that then gives bitcode
 * (ROCm 5.3 and later have hiprtcGetBitcode; 5.2 links it into a code object as usual).
 * Asked of the hipRTC library this program loaded (its version call says 9.0 on 5.2). */
static int gives_bitcode(const char **opts, int no)
{
    static const char *const libs[] = {"libhiprtc.so.7", "libhiprtc.so.6", "libamdhip64.so.6",
                                       "libamdhip64.so.5", NULL};
    int rdc = 0, has = 0;
    for (int i = 0; i < no; i++)
        rdc |= strcmp(opts[i], "-fgpu-rdc") == 0;
    for (int i = 0; rdc && !has && libs[i]; i++) {
        void *h = dlopen(libs[i], RTLD_NOW | RTLD_NOLOAD);
        if (h) {
            has = dlsym(h, "hiprtcGetBitcodeSize") != NULL;
            dlclose(h);
        }
    }
    return has;
}

typedef hiprtcResult (*size_fn)(hiprtcProgram, size_t *);
typedef hiprtcResult (*get_fn)(hiprtcProgram, char *);

/* What the program gives back (what: "code" or "bitcode"): its size and status in the
 * report, its bytes in OUTDIR/N.suffix. */
static void output(int n, hiprtcProgram p, const char *what, const char *suffix, size_fn get_size, get_fn get)
{
    size_t size = 0;
    hiprtcResult r = get_size(p, &size);
    fprintf(report, "%d %s size %d %zu\n", n, what, r, size);
    if (r == HIPRTC_SUCCESS && size > 0) {
        char *bytes = malloc(size);
        fprintf(report, "%d %s %d\n", n, what, get(p, bytes));
        save(n, suffix, bytes, size);
        free(bytes);
    }
}

/* Compile one program and write all the API says about it. */
static int compile(int n, const char *src, const char *name, int nh, const char **hs, const char **hn,
                   const char **exprs, int ne, const char **opts, int no)
{
    hiprtcProgram p;
    hiprtcResult r = hiprtcCreateProgram(&p, src, name, nh, hs, hn);
    fprintf(report, "%d create %d\n", n, r);
    if (r != HIPRTC_SUCCESS)
        return r;
    for (int i = 0; i < ne; i++)
        fprintf(report, "%d add %s %d\n", n, exprs[i], hiprtcAddNameExpression(p, exprs[i]));
    hiprtcResult c = hiprtcCompileProgram(p, no, opts);
    fprintf(report, "%d compile %d %s\n", n, c, hiprtcGetErrorString(c));
    size_t size = 0;
    r = hiprtcGetProgramLogSize(p, &size);
    char *log = calloc(1, size + 1); /* hipRTC does not terminate its log */
    if (r == HIPRTC_SUCCESS && size > 0)
        r = hiprtcGetProgramLog(p, log);
    fprintf(report, "%d log %d %s\n", n, r, size ? "non-empty" : "empty");
    save(n, "log", log, size);
    free(log);
    if (gives_bitcode(opts, no)) /* what an rdc program is for: its bitcode, for a link; by
                                  * name, as 5.2's header does not declare the calls */
        output(n, p, "bitcode", "bc", (size_fn)dlsym(RTLD_DEFAULT, "hiprtcGetBitcodeSize"),
               (get_fn)dlsym(RTLD_DEFAULT, "hiprtcGetBitcode"));
    else
        output(n, p, "code", "co", hiprtcGetCodeSize, hiprtcGetCode);
    for (int i = 0; c == HIPRTC_SUCCESS && i < ne; i++) {
        const char *lowered = NULL;
        r = hiprtcGetLoweredName(p, exprs[i], &lowered);
        fprintf(report, "%d lowered %s %d %s\n", n, exprs[i], r, r == HIPRTC_SUCCESS ? lowered : "-");
    }
    if (probe_names && c == HIPRTC_SUCCESS && ne > 0) {
        const char *lowered = NULL;
        fprintf(report, "%d lowered never-added %d\n", n, hiprtcGetLoweredName(p, "scale<short>", &lowered));
        fprintf(report, "%d lowered NULL %d\n", n, hiprtcGetLoweredName(p, NULL, &lowered));
        fprintf(report, "%d lowered NULL out %d\n", n, hiprtcGetLoweredName(p, exprs[0], NULL));
    }
    fprintf(report, "%d destroy %d\n", n, hiprtcDestroyProgram(&p));
    return c;
}

static void edge(void)
{
    hiprtcProgram p;
    const char *opts[] = {"--offload-arch=gfx90a"};
    const char *lowered = NULL;
    size_t size = 0;
    fprintf(report, "create NULL prog %d\n", hiprtcCreateProgram(NULL, saxpy, "a.hip", 0, NULL, NULL));
    fprintf(report, "create -1 headers %d\n", hiprtcCreateProgram(&p, saxpy, "a.hip", -1, NULL, NULL));
    fprintf(report, "create %d\n", hiprtcCreateProgram(&p, templ, "t.hip", 0, NULL, NULL));
    fprintf(report, "lowered before compile %d\n", hiprtcGetLoweredName(p, "scale<float>", &lowered));
    fprintf(report, "add NULL %d\n", hiprtcAddNameExpression(p, NULL));
    fprintf(report, "add %d\n", hiprtcAddNameExpression(p, "scale<float>"));
    fprintf(report, "compile %d\n", hiprtcCompileProgram(p, 1, opts));
    fprintf(report, "lowered not added %d\n", hiprtcGetLoweredName(p, "scale<int>", &lowered));
    fprintf(report, "lowered NULL %d\n", hiprtcGetLoweredName(p, NULL, &lowered));
    fprintf(report, "lowered NULL out %d\n", hiprtcGetLoweredName(p, "scale<float>", NULL));
    fprintf(report, "code size NULL %d\n", hiprtcGetCodeSize(p, NULL));
    fprintf(report, "code NULL %d\n", hiprtcGetCode(p, NULL));
    fprintf(report, "log size NULL %d\n", hiprtcGetProgramLogSize(p, NULL));
    fprintf(report, "add after compile %d\n", hiprtcAddNameExpression(p, "scale<int>"));
    fprintf(report, "compile again %d\n", hiprtcCompileProgram(p, 1, opts));
    fprintf(report, "code size after %d\n", hiprtcGetCodeSize(p, &size));
    fprintf(report, "destroy %d\n", hiprtcDestroyProgram(&p));
    fprintf(report, "destroy NULL %d\n", hiprtcDestroyProgram(NULL));
    int major = -1, minor = -1;
    fprintf(report, "version %d %d.%d\n", hiprtcVersion(&major, &minor), major, minor);
    fprintf(report, "error string %s\n", hiprtcGetErrorString(HIPRTC_ERROR_COMPILATION));
}

/* The link API (ROCm 5.3 and later), looked up by name: absent from hipRTC 5.2. */
static void link_api(void)
{
    typedef int (*create_fn)(unsigned, int *, void **, void **);
    typedef int (*add_fn)(void *, int, void *, size_t, const char *, unsigned, int *, void **);
    typedef int (*complete_fn)(void *, void **, size_t *);
    typedef int (*destroy_fn)(void *);
    create_fn create = (create_fn)dlsym(RTLD_DEFAULT, "hiprtcLinkCreate");
    add_fn add = (add_fn)dlsym(RTLD_DEFAULT, "hiprtcLinkAddData");
    complete_fn complete = (complete_fn)dlsym(RTLD_DEFAULT, "hiprtcLinkComplete");
    destroy_fn destroy = (destroy_fn)dlsym(RTLD_DEFAULT, "hiprtcLinkDestroy");
    if (!create || !add || !complete || !destroy) {
        fprintf(report, "no link API\n");
        return;
    }
    void *state = NULL, *bin = NULL;
    size_t size = 0;
    char data[] = "bitcode-bytes";
    fprintf(report, "link create %d\n", create(0, NULL, NULL, &state));
    fprintf(report, "link add %d\n", add(state, 3, data, sizeof data, "a.bc", 0, NULL, NULL));
    fprintf(report, "link complete %d %zu\n", complete(state, &bin, &size), size);
    if (bin && size)
        save(0, "linked", bin, size);
    fprintf(report, "link destroy %d\n", destroy(state));
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: hiprtc_app MODE OUTDIR\n");
        return 2;
    }
    const char *mode = argv[1];
    outdir = argv[2];
    char path[4096];
    snprintf(path, sizeof path, "%s/report", outdir);
    if ((report = fopen(path, "w")) == NULL || setvbuf(report, NULL, _IOLBF, 0) != 0) {
        perror(path);
        return 2;
    }
    const char *arch[] = {"--offload-arch=gfx90a", "-O3", "-DN=4"};
    const char *arch2[] = {"-DUNUSED=1", "--gpu-architecture=gfx90a"};
    if (strcmp(mode, "good") == 0) {
        const char *exprs[] = {"scale<float>", "scale<double>", "ns::fill<7>"};
        const char *hs[] = {"#define K 5\n"}, *hn[] = {"params.h"};
        compile(0, saxpy, "saxpy.hip", 0, NULL, NULL, NULL, 0, arch, 3);
        compile(1, templ, "templ.hip", 0, NULL, NULL, exprs, 3, arch2, 2);
        compile(2, with_header, "header.hip", 1, hs, hn, NULL, 0, arch, 3);
    } else if (strcmp(mode, "error") == 0) {
        compile(0, broken, "broken.hip", 0, NULL, NULL, NULL, 0, arch, 3);
    } else if (strcmp(mode, "include") == 0) {
        /* ./headers/params.h, relative to the working directory (the test writes and
         * edits it): the path as the next option, then attached */
        const char *opts[] = {"--offload-arch=gfx90a", "-I", "./headers"};
        const char *opts2[] = {"--offload-arch=gfx90a", "-I./headers", "-DTWO=1"};
        compile(0, with_header, "header.hip", 0, NULL, NULL, NULL, 0, opts, 3);
        compile(1, with_header, "header.hip", 0, NULL, NULL, NULL, 0, opts2, 3);
    } else if (strcmp(mode, "forward") == 0) {
        /* -Rpass is an option kpc does not know (forwarded); -imacros reads a file that
         * hipRTC's -MD list names, so the hipRTC table keys it */
        snprintf(path, sizeof path, "%s/macros.h", outdir);
        FILE *m = fopen(path, "w");
        if (m == NULL || fputs("#define K 3\n", m) < 0 || fclose(m) != 0)
            return 2;
        const char *opts[] = {"--offload-arch=gfx90a", "-Rpass=unroll"};
        const char *opts2[] = {"--offload-arch=gfx90a", "-imacros", path};
        const char *no_include = "extern \"C\" __global__ void add_k(int *x) { x[threadIdx.x] += K; }\n";
        compile(0, saxpy, "saxpy.hip", 0, NULL, NULL, NULL, 0, opts, 2);
        compile(1, no_include, "macros.hip", 0, NULL, NULL, NULL, 0, opts2, 3);
    } else if (strcmp(mode, "nogpu") == 0) {
        const char *opts[] = {"-O3"};
        compile(0, saxpy, "saxpy.hip", 0, NULL, NULL, NULL, 0, opts, 1);
    } else if (strcmp(mode, "edge") == 0) {
        edge();
    } else if (strcmp(mode, "inputs") == 0) {
        /* empty inputs: hipRTC 5.2 refuses an empty source, header or header name at
         * create; an empty program name it compiles */
        const char *hs[] = {"#define K 1\n"}, *hn[] = {"k.h"}, *empty[] = {""};
        compile(0, "", "empty.hip", 0, NULL, NULL, NULL, 0, arch, 3);
        compile(1, saxpy, "a.hip", 1, hs, empty, NULL, 0, arch, 3);
        compile(2, saxpy, "a.hip", 1, empty, hn, NULL, 0, arch, 3);
        compile(3, "", "a.hip", 1, hs, hn, NULL, 0, arch, 3);
        compile(4, saxpy, "a.hip", 1, NULL, hn, NULL, 0, arch, 3);
        compile(5, saxpy, "a.hip", 1, hs, NULL, NULL, 0, arch, 3);
        compile(6, saxpy, "", 0, NULL, NULL, NULL, 0, arch, 3);
    } else if (strcmp(mode, "null_inputs") == 0) {
        /* a NULL source, header or header name: hipRTC 5.2 aborts (a C++ exception), the
         * drop-in answers INVALID_INPUT; run under the drop-in only */
        const char *hs[] = {"#define K 1\n"}, *hn[] = {"k.h"}, *none[] = {NULL};
        compile(0, NULL, "a.hip", 0, NULL, NULL, NULL, 0, arch, 3);
        compile(1, saxpy, "a.hip", 1, none, hn, NULL, 0, arch, 3);
        compile(2, saxpy, "a.hip", 1, hs, none, NULL, 0, arch, 3);
    } else if (strcmp(mode, "storm") == 0) {
        for (int i = 0; i < 4; i++) {
            char seed[32];
            snprintf(seed, sizeof seed, "-DSEED=%d", i);
            const char *opts[] = {"--offload-arch=gfx90a", seed};
            compile(i, saxpy, "saxpy.hip", 0, NULL, NULL, NULL, 0, opts, 2);
        }
    } else if (strcmp(mode, "corpus") == 0) {
        probe_names = 1;
        const char *wall[] = {"--offload-arch=gfx90a", "-Wall"};
        const char *rpass[] = {"--offload-arch=gfx90a", "-O3", "-Rpass=loop-unroll"};
        const char *maxt[] = {"--offload-arch=gfx90a", "--gpu-max-threads-per-block=256"};
        const char *empty[] = {"--offload-arch=gfx90a", ""};
        const char *rdc[] = {"--offload-arch=gfx90a", "-fgpu-rdc"};
        const char *tune[] = {"--offload-arch=gfx90a", "-mtune=gfx908"};
        const char *exprs[] = {"scale<float>", "(void (*)(double *, double, int))scale<double>", "ns::fill<7>"};
        compile(0, unused_var, "unused.hip", 0, NULL, NULL, NULL, 0, wall, 2);
        compile(1, loop, "loop.hip", 0, NULL, NULL, NULL, 0, rpass, 3);
        compile(2, templ, "templ.hip", 0, NULL, NULL, exprs, 3, arch2, 2);
        compile(3, saxpy, "saxpy.hip", 0, NULL, NULL, NULL, 0, maxt, 2);
        compile(4, saxpy, "saxpy.hip", 0, NULL, NULL, NULL, 0, empty, 2);
        compile(5, broken, "broken.hip", 0, NULL, NULL, NULL, 0, wall, 2);
        compile(6, saxpy, NULL, 0, NULL, NULL, NULL, 0, arch, 3);
        compile(7, saxpy, "rdc.hip", 0, NULL, NULL, NULL, 0, rdc, 2);
        compile(8, saxpy, "tune.hip", 0, NULL, NULL, NULL, 0, tune, 2);
    } else if (strcmp(mode, "link") == 0) {
        link_api();
    } else {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 2;
    }
    fclose(report);
    return 0;
}
