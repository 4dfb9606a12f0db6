/*
 * nvrtc_app.c - a program written against the plain NVRTC API (no kpc include), run by
 * nvrtc.sh unchanged against a fake NVRTC (fake_rtc.c) directly, under LD_PRELOAD, linked
 * with -lkpc-nvrtc, and through the libnvrtc.so.13 shim directory.
 *
 * usage: nvrtc_app MODE OUTDIR [dlopen]
 * With "dlopen" it loads NVRTC as many applications do, dlopen("libnvrtc.so.13") and
 * dlsym on that handle, where LD_PRELOAD does not reach; else it calls the linked symbols.
 * It writes OUTDIR/report and OUTDIR/N.cubin, N.ptx, N.log per program.
 * MODE: good (sm_90 cubin with name expressions and a header; compute_90 PTX; the PTX of
 * an sm_90 build), error, include (-I ./headers as two options, --include-path= attached),
 * forward (-isystem, an invalid option, no target), threads (8 threads
 * x 4 programs at once).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int nvrtcResult;
typedef struct _nvrtcProgram *nvrtcProgram;
#define NVRTC_FUNCTIONS(X)                                                                                  \
    X(nvrtcCreateProgram, (nvrtcProgram *, const char *, const char *, int, const char *const *,            \
                           const char *const *))                                                              \
    X(nvrtcAddNameExpression, (nvrtcProgram, const char *const))                                             \
    X(nvrtcCompileProgram, (nvrtcProgram, int, const char *const *))                                         \
    X(nvrtcGetCUBINSize, (nvrtcProgram, size_t *))                                                           \
    X(nvrtcGetCUBIN, (nvrtcProgram, char *))                                                                 \
    X(nvrtcGetPTXSize, (nvrtcProgram, size_t *))                                                             \
    X(nvrtcGetPTX, (nvrtcProgram, char *))                                                                   \
    X(nvrtcGetLoweredName, (nvrtcProgram, const char *const, const char **))                                 \
    X(nvrtcGetProgramLogSize, (nvrtcProgram, size_t *))                                                      \
    X(nvrtcGetProgramLog, (nvrtcProgram, char *))                                                            \
    X(nvrtcDestroyProgram, (nvrtcProgram *))                                                                 \
    X(nvrtcVersion, (int *, int *))
#define DECLARE(name, params) nvrtcResult name params;
NVRTC_FUNCTIONS(DECLARE)
const char *nvrtcGetErrorString(nvrtcResult);
#define FIELD(name, params) nvrtcResult(*name) params;
static struct {
    NVRTC_FUNCTIONS(FIELD)
    const char *(*nvrtcGetErrorString)(nvrtcResult);
} nv;

static FILE *report;
static const char *outdir;

static const char *templ =
    "#include \"params.h\"\n"
    "template <typename T> __global__ void scale(T *x, T f, int n)\n"
    "{ int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= f * K; }\n";
static const char *saxpy = "extern \"C\" __global__ void saxpy(float a, float *x) { x[0] *= a; }\n";

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

static void compile(FILE *out, int n, const char *src, const char *name, const char **exprs, int ne,
                    const char **opts, int no, int want_ptx)
{
    nvrtcProgram p;
    const char *hs[] = {"#define K 3\n"}, *hn[] = {"params.h"};
    fprintf(out, "%d create %d\n", n, nv.nvrtcCreateProgram(&p, src, name, 1, hs, hn));
    for (int i = 0; i < ne; i++)
        fprintf(out, "%d add %s %d\n", n, exprs[i], nv.nvrtcAddNameExpression(p, exprs[i]));
    int c = nv.nvrtcCompileProgram(p, no, opts);
    fprintf(out, "%d compile %d %s\n", n, c, nv.nvrtcGetErrorString(c));
    size_t size = 0;
    int r = nv.nvrtcGetProgramLogSize(p, &size);
    char *log = calloc(1, size + 1);
    if (size)
        r = nv.nvrtcGetProgramLog(p, log);
    fprintf(out, "%d log %d %zu\n", n, r, size);
    if (outdir)
        save(n, "log", log, size);
    free(log);
    const char *kind = want_ptx ? "ptx" : "cubin";
    r = want_ptx ? nv.nvrtcGetPTXSize(p, &size) : nv.nvrtcGetCUBINSize(p, &size);
    fprintf(out, "%d %s size %d %zu\n", n, kind, r, size);
    if (r == 0 && size) {
        char *code = malloc(size);
        r = want_ptx ? nv.nvrtcGetPTX(p, code) : nv.nvrtcGetCUBIN(p, code);
        fprintf(out, "%d %s %d\n", n, kind, r);
        if (outdir)
            save(n, kind, code, size);
        free(code);
    }
    for (int i = 0; c == 0 && i < ne; i++) {
        const char *lowered = NULL;
        r = nv.nvrtcGetLoweredName(p, exprs[i], &lowered);
        fprintf(out, "%d lowered %s %d %s\n", n, exprs[i], r, r == 0 ? lowered : "-");
    }
    fprintf(out, "%d destroy %d %s\n", n, nv.nvrtcDestroyProgram(&p), p ? "not NULL" : "NULL");
}

static void *thread_main(void *arg)
{
    FILE *out = arg;
    for (int i = 0; i < 4; i++) {
        char d[32];
        snprintf(d, sizeof d, "-DSEED=%d", i);
        const char *opts[] = {"-arch=sm_90", d};
        const char *exprs[] = {"scale<float>"};
        compile(out, i, templ, "prog.cu", exprs, 1, opts, 2, 0);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: nvrtc_app MODE OUTDIR [dlopen]\n");
        return 2;
    }
    if (argc > 3 && strcmp(argv[3], "dlopen") == 0) {
        /* NVRTC_APP_PRELOAD=PATH: first load NVRTC by path, as PyTorch's __init__ does
         * (ctypes.CDLL of site-packages/nvidia/cuNN/lib/libnvrtc.so.NN) */
        const char *pre = getenv("NVRTC_APP_PRELOAD");
        if (pre && *pre && dlopen(pre, RTLD_NOW | RTLD_GLOBAL) == NULL) {
            fprintf(stderr, "dlopen %s: %s\n", pre, dlerror());
            return 2;
        }
        void *h = dlopen("libnvrtc.so.13", RTLD_NOW | RTLD_LOCAL);
        if (h == NULL) {
            fprintf(stderr, "dlopen: %s\n", dlerror());
            return 2;
        }
#define LOOKUP(name, params) *(void **)&nv.name = dlsym(h, #name);
        NVRTC_FUNCTIONS(LOOKUP)
        *(void **)&nv.nvrtcGetErrorString = dlsym(h, "nvrtcGetErrorString");
    } else {
#ifdef NVRTC_DLOPEN_ONLY /* built without NVRTC on its link line */
        fprintf(stderr, "nvrtc_app: built for dlopen only\n");
        return 2;
#else
#define LINK(name, params) nv.name = name;
        NVRTC_FUNCTIONS(LINK)
        nv.nvrtcGetErrorString = nvrtcGetErrorString;
#endif
    }
    const char *mode = argv[1];
    outdir = argv[2];
    char path[4096];
    snprintf(path, sizeof path, "%s/report", outdir);
    if ((report = fopen(path, "w")) == NULL) {
        perror(path);
        return 2;
    }
    const char *exprs[] = {"scale<float>", "scale<double>"};
    if (strcmp(mode, "good") == 0) {
        const char *sm[] = {"--std=c++17", "--gpu-architecture=sm_90", "-default-device"};
        const char *cp[] = {"-arch=compute_90", "--use_fast_math"};
        compile(report, 0, templ, "prog.cu", exprs, 2, sm, 3, 0);
        compile(report, 1, saxpy, NULL, NULL, 0, cp, 2, 1); /* no name, as PyTorch's jiterator */
        compile(report, 2, saxpy, "prog.cu", NULL, 0, sm, 3, 1); /* the PTX of a cubin build */
        int major = 0, minor = 0;
        fprintf(report, "version %d %d.%d\n", nv.nvrtcVersion(&major, &minor), major, minor);
    } else if (strcmp(mode, "error") == 0) {
        const char *sm[] = {"-arch=sm_90"};
        compile(report, 0, "#error broken\n", "prog.cu", NULL, 0, sm, 1, 0);
    } else if (strcmp(mode, "include") == 0) {
        /* ./headers/dep.h, relative to the working directory: as the next option, then attached */
        const char *dep = "#include \"dep.h\"\nextern \"C\" __global__ void f(float *x) { x[0] *= D; }\n";
        const char *two[] = {"-arch=sm_90", "-I", "./headers"};
        const char *joined[] = {"-arch=sm_90", "--include-path=./headers"};
        compile(report, 0, dep, "dep.cu", NULL, 0, two, 3, 0);
        compile(report, 1, dep, "dep.cu", NULL, 0, joined, 2, 0);
    } else if (strcmp(mode, "forward") == 0) {
        const char *inc[] = {"-arch=sm_90", "-isystem", "/nonexistent/include"};
        const char *bogus[] = {"-arch=sm_90", "--bogus"};
        const char *none[] = {"-DX=1"};
        compile(report, 0, saxpy, "prog.cu", NULL, 0, inc, 3, 0);
        compile(report, 1, saxpy, "prog.cu", NULL, 0, bogus, 2, 0);
        compile(report, 2, saxpy, "prog.cu", NULL, 0, none, 1, 1);
    } else if (strcmp(mode, "threads") == 0) {
        pthread_t t[8];
        FILE *outs[8];
        outdir = NULL;
        for (int i = 0; i < 8; i++) {
            snprintf(path, sizeof path, "%s/report.%d", argv[2], i);
            outs[i] = fopen(path, "w");
            if (outs[i] == NULL || pthread_create(&t[i], NULL, thread_main, outs[i]) != 0)
                return 2;
        }
        for (int i = 0; i < 8; i++) {
            pthread_join(t[i], NULL);
            fclose(outs[i]);
        }
    } else {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 2;
    }
    fclose(report);
    return 0;
}
