import sys,os
os.chdir(sys.argv[1])
def patch(p, old, new):
    s=open(p).read()
    assert s.count(old)>=1, (p, old)
    s=s.replace(old,new,1)
    open(p,'w').write(s)
patch('src/core/manifest.c','#define OBJECT_KEY_TAG','uint64_t kpc_probe[16];\n#define OBJECT_KEY_TAG')
patch('src/core/manifest.c','#include <unistd.h>','#include <unistd.h>\n#include <time.h>')
patch('src/core/manifest.c','''    int64_t now = (int64_t)kpc__wall_ns();
    dir_cache c = {.next = 0};''','''    { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); kpc_probe[4] = (uint64_t)t.tv_sec*1000000000ull+(uint64_t)t.tv_nsec; }
    int64_t now = (int64_t)kpc__wall_ns();
    dir_cache c = {.next = 0};''')
patch('src/core/manifest.c','''    dir_cache_close(&c);
    return ok;''','''    dir_cache_close(&c);
    { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); kpc_probe[5] = (uint64_t)t.tv_sec*1000000000ull+(uint64_t)t.tv_nsec; }
    return ok;''')
P='#include <time.h>\nextern uint64_t kpc_probe[16];\nstatic inline void probe(int i){ struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); kpc_probe[i] = (uint64_t)t.tv_sec*1000000000ull+(uint64_t)t.tv_nsec; }\n'
for f in ('src/core/resolve.c','src/core/request.c'):
    s=open(f).read(); s=s.replace('#include <stdlib.h>', P+'#include <stdlib.h>',1); open(f,'w').write(s)
patch('src/core/resolve.c','''    read_manifest(ctx, key, &m);
    const kpc_manifest_entry *e = kpc_manifest_match(&m);''','''    probe(2);
    read_manifest(ctx, key, &m);
    probe(3);
    const kpc_manifest_entry *e = kpc_manifest_match(&m);
    probe(6);''')
patch('src/core/resolve.c','''        s = kpc_tier_read(&ctx->cache->tiers, &e->object, ctx->target, kind, rec);''','''        s = kpc_tier_read(&ctx->cache->tiers, &e->object, ctx->target, kind, rec);
        probe(7);''')
patch('src/core/request.c','''    kpc_request_key(ctx, src, have_no_cwd ? &no_cwd : NULL, &key);
''','''    probe(0);
    kpc_request_key(ctx, src, have_no_cwd ? &no_cwd : NULL, &key);
    probe(1);
''')
p='tests/bench/bench_manifest.c'
patch(p,'''static int helper(const char *which, const char *dir, const char *hdir)
{
    if (strcmp(which, "floor") == 0)
        return floor_helper(hdir);''','''extern uint64_t kpc_probe[16];
static int helper(const char *which, const char *dir, const char *hdir)
{
    if (strcmp(which, "floor") == 0)
        return floor_helper(hdir);
    int floorkpc = strcmp(which, "floorkpc") == 0;
    if (floorkpc) which = "files";''')
patch(p,'''    uint64_t t0 = bn_now_ns();
    kpc_status s = kpc_program_get(ctx, pick(&r, which), &p);
    uint64_t t1 = bn_now_ns();''','''    if (floorkpc) {
        int rc = floor_helper(hdir);
        kpc_context_destroy(ctx);
        kpc_cache_close(cache);
        return rc;
    }
    uint64_t t0 = bn_now_ns();
    kpc_status s = kpc_program_get(ctx, pick(&r, which), &p);
    uint64_t t1 = bn_now_ns();
    const char *pf = getenv("PROBE_FILE");
    if (pf && strcmp(which, "files") == 0) {
        FILE *f = fopen(pf, "a");
        uint64_t *k = kpc_probe;
        fprintf(f, "total %llu prekey %llu key %llu tomf %llu mfread %llu tocheck %llu check %llu aftercheck %llu objread %llu tail %llu\\n",
            (unsigned long long)(t1-t0), (unsigned long long)(k[0]-t0), (unsigned long long)(k[1]-k[0]),
            (unsigned long long)(k[2]-k[1]), (unsigned long long)(k[3]-k[2]), (unsigned long long)(k[4]-k[3]),
            (unsigned long long)(k[5]-k[4]), (unsigned long long)(k[6]-k[5]), (unsigned long long)(k[7]-k[6]),
            (unsigned long long)(t1-k[7]));
        fclose(f);
    }''')
patch(p,'''    double xp_floor = xproc_ns("floor", dir, hdir, runs);''','''    double xp_floor = xproc_ns("floor", dir, hdir, runs);
    double xp_floorkpc = xproc_ns("floorkpc", dir, hdir, runs);
    fprintf(stderr, "PROBE floor %.0f floorkpc %.0f files %.0f none %.0f\\n", xp_floor, xp_floorkpc, xp_files, xp_none);''')
