# mark.py TREE - the scratch instrument of this folder's probe: puts clock marks (and, with
# KPC_MF set, minor-fault counts) between the steps of one kpc_program_get into TREE, a
# copy of the repository at e391ca5 (`git archive HEAD | tar -x -C TREE`), and makes
# bench_manifest keep its directory when KEEP is set. Never committed to src/. With KPC_T
# set, the get prints "MK step ns" to stderr; tests/bench/results/device-vector-2026-11-29/
# in-get-steps-here.sh (copied to .carry/steps.sh) takes the medians.
import sys,re
root=sys.argv[1]
def ins(path, anchor, text, after=True, count=1):
    p=root+'/'+path; s=open(p).read()
    n=s.count(anchor)
    if n<count: sys.exit(f"anchor not found {path}: {anchor!r} ({n})")
    i=s.index(anchor)
    if after:
        j=s.index('\n', i+len(anchor)-1) if not anchor.endswith('\n') else i+len(anchor)
        j = j+1 if not anchor.endswith('\n') else j
        s=s[:j]+text+'\n'+s[j:]
    else:
        k=s.rfind('\n',0,i)+1
        s=s[:k]+text+'\n'+s[k:]
    open(p,'w').write(s)
def decl(path):
    p=root+'/'+path; s=open(p).read(); s="void kpc__mark(const char *w);\n"+s; open(p,'w').write(s)
M=lambda w: f'    kpc__mark("{w}");'
# util.c: definition + marks
p=root+'/src/base/util.c'; s=open(p).read()
s = s.replace('#include', '''#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <sys/resource.h>
unsigned long long kpc__tt[96]; const char *kpc__tw[96]; int kpc__tn; long kpc__mf[96];
void kpc__mark(const char *w);
void kpc__mark(const char *w){if(kpc__tn>=96)return;if(getenv("KPC_MF")){struct rusage r;getrusage(RUSAGE_SELF,&r);kpc__mf[kpc__tn]=r.ru_minflt;}struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);kpc__tt[kpc__tn]=t.tv_sec*1000000000ull+t.tv_nsec;kpc__tw[kpc__tn++]=w;}
void kpc__mark_print(void);
void kpc__mark_print(void){if(!getenv("KPC_T"))return;for(int i=1;i<kpc__tn;i++)fprintf(stderr,"MK %s %llu\\n",kpc__tw[i],getenv("KPC_MF")?(unsigned long long)(kpc__mf[i]-kpc__mf[i-1])*1000:kpc__tt[i]-kpc__tt[i-1]);}
#include''',1)
open(p,'w').write(s)
ins('src/base/util.c','    size_t want = (size_t)st.st_size;', M('u-fstat'))
ins('src/base/util.c','    char *b = malloc(want + 1);', M('u-malloc'))
ins('src/base/util.c','    b[got] = \'\\0\';', M('u-pread'), after=False)
# store.c
decl('src/storage/store.c')
ins('src/storage/store.c','    kpc_status s = read_at(st, a.fd, a.name, path, key, target, kind, out);', M('s-at'), after=False)
ins('src/storage/store.c','    int fd = kpc__openat(at, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0);', M('s-open'))
ins('src/storage/store.c','    const char *why = kpc_store_read_fd(fd, key, target, kind, out, &s, &sb);', M('s-readfd'))
ins('src/storage/store.c','    uint64_t now = kpc__wall_ns();', M('s-refusal'), after=False)
# manifest.c
decl('src/core/manifest.c')
ins('src/core/manifest.c','    kpc_status s = kpc_manifest_decode(bytes, size, m);', M('decoded'))
ins('src/core/manifest.c','    const kpc_manifest_entry *e = match ? kpc_manifest_match(m) : NULL;', M('matched'))
ins('src/core/manifest.c','    match->found = match->deps != NULL;', M('taken'))
# manifest_seen.c
decl('src/core/manifest_seen.c')
ins('src/core/manifest_seen.c','    if (kpc_tier_read(tiers, key, ctx->target, KPC_RECORD_MANIFEST, &rec, &from) != KPC_OK)', M('pre-mf'), after=False)
ins('src/core/manifest_seen.c','    kpc_tier_accept(tiers, from, &rec);', M('mf-read-accept'))
ins('src/core/manifest_seen.c','    rec.block = rec.payload = NULL; /* taken */', M('lookup-done'))
ins('src/core/manifest_seen.c','    if (why == NULL) { /* where borrowed', M('carried-take'), after=False)
# resolve.c
decl('src/core/resolve.c')
ins('src/core/resolve.c','            kpc_claim_begin(&claim, cache->index, key, flags | watch.flags, &verdict, &waited);', M('claim'))
ins('src/core/resolve.c','            if (via == KPC_OK && !accepted(ctx, &a, from, &rec)) {', M('via'), after=False)
ins('src/core/resolve.c','                if (rec.kind == KPC_RECORD_CODE)\n                    return take_record', M('accepted'), after=False)
ins('src/core/resolve.c','    kpc_status s = obtain(ctx, req, false, nowait, held, out, log, &from_disk, busy);', M('obtained'))
# request.c
decl('src/core/request.c')
p=root+'/src/core/request.c'; s=open(p).read(); s="void kpc__mark_print(void);\nextern int kpc__tn;\n"+s; open(p,'w').write(s)
ins('src/core/request.c','        s = kpc_map_acquire(ctx->map, key, out, entry, &waited);', M('map'))
ins('src/core/request.c','        if (req->cwd_pending && mentions_include(req->src)) {', M('a-miss'), after=False)
ins('src/core/request.c','        kpc_key_compute_read(&ctx->key_prefix, req->src, req->needs_cwd ? req->cwd : NULL, &req->key);', M('a-key'))
ins('src/core/request.c','            kpc_request_cwd(req->cwd);\n        }', M('a-scan'), after=False)
ins('src/core/request.c','        kpc_key_compute_read(&ctx->key_prefix, req->src, req->needs_cwd ? req->cwd : NULL, &req->key);', M('a-cwd'), after=False)
ins('src/core/request.c','    kpc_status s = kpc_cache_check_process(ctx->cache, "kpc_program_get");', '    kpc__tn = 0; kpc__mark("start");', after=False)
ins('src/core/request.c','    if ((s = read_request(ctx, src, &req)) != KPC_OK)', M('read'), after=False)
ins('src/core/request.c','    s = kpc_resolve_miss(ctx, &req, &prog, &log);', M('resolved'))
ins('src/core/request.c','    kpc_request_publish(ctx, &req, entry, s, prog, log);', M('published') + '\n    kpc__mark_print();')
# bench KEEP
ins('tests/bench/bench_manifest.c','    bn_get(ctx, &r.none);', '    if (getenv("KEEP")) { printf("KEPT %s %s\\n", dir, hdir); return 0; }')
print("ok")
