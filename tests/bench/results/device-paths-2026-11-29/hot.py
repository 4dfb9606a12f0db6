import re,sys,subprocess
fns = """kpc__get_fixed_str src/base/bytes.c
kpc__open src/base/fault.c
kpc__openat src/base/fault.c
kpc__fstat src/base/fault.c
kpc__fstatat src/base/fault.c
kpc__pread src/base/fault.c
kpc_grace_enter src/base/grace.c
kpc_grace_exit src/base/grace.c
avx_64 src/base/hash.c
avx_128 src/base/hash.c
avx_128_secret src/base/hash.c
kpc_xxh3_64bits src/base/hash.c
kpc_xxh3_128bits src/base/hash.c
kpc_xxh3_128bits_withSecret src/base/hash.c
kpc_root_entry_refusal src/base/root.c
tree_dir src/base/root.c
kpc_root_open_tree_dir src/base/root.c
kpc_root_check_tree_dir src/base/root.c
kpc_root_v1_fd src/base/root.c
kpc_root_rel src/base/root.c
kpc_root_target_ok src/base/root.c
put src/base/root.c
kpc_root_record_path src/base/root.c
kpc__read_fd_stat src/base/util.c
kpc__now_ns src/base/util.c
kpc__hex src/base/util.c
kpc__wall_ns src/base/util.c
kpc_hit_serves src/core/hit.c
compute_read src/core/key.c
kpc_key_compute_read src/core/key.c
file_matches src/core/manifest.c
stat_file src/core/manifest.c
dir_of src/core/manifest.c
kpc_manifest_file_at src/core/manifest.c
kpc_manifest_deps_match src/core/manifest.c
kpc_manifest_match src/core/manifest.c
kpc_manifest_take src/core/manifest.c
hand_back_tail src/core/manifest.c
kpc_manifest_free src/core/manifest.c
kpc_manifest_lookup src/core/manifest.c
get_file src/core/manifest_codec.c
get_files src/core/manifest_codec.c
reads_a_file src/core/manifest_codec.c
kpc_manifest_decode src/core/manifest_codec.c
look_up_manifest src/core/manifest_seen.c
kpc_seen_manifest_read src/core/manifest_seen.c
kpc_map_acquire src/core/map.c
kpc_map_publish src/core/map.c
tail_word src/core/map_key.c
put_string src/core/map_key.c
kpc_map_key_compute src/core/map_key.c
kpc_program_from_record src/core/program.c
kpc_request_cwd src/core/request.c
read_options src/core/request.c
kpc_program_get src/core/request.c
accepted src/core/resolve.c
take_record src/core/resolve.c
obtain_seen src/core/resolve.c
obtain src/core/resolve.c
resolve src/core/resolve.c
kpc_resolve_miss src/core/resolve.c
names_find src/platform/names.c
kpc_names_valid src/platform/names.c
matches src/platform/options.c
kpc_option_may_name_path_or_target src/platform/options.c
classify src/platform/options.c
kpc_option_classify_path src/platform/options.c
kpc_option_sets_target src/platform/options.c
kpc_claim_begin src/storage/claim.c
kpc_claim_finish src/storage/claim.c
kpc_record_decode_header src/storage/record.c
payload_sum_of src/storage/record.c
kpc_record_take_at src/storage/record.c
kpc_record_take src/storage/record.c
kpc_record_free src/storage/record.c
same_str src/storage/request_codec.c
kpc_request_compare src/storage/request_codec.c
kpc_store_read_fd src/storage/store.c
read_at src/storage/store.c
kpc_store_read src/storage/store.c
disk_read src/storage/store.c
copy_prefix src/storage/store_tree.c
target_dir src/storage/store_tree.c
kpc_store_record_at src/storage/store_tree.c
kpc_store_record_at_done src/storage/store_tree.c
kpc_tier_backfill src/storage/tier.c
kpc_tier_read src/storage/tier.c
kpc_tier_accept src/storage/tier.c
kpc_tier_coordinator src/storage/tier.c
kpc_index_begin shm/index.c
kpc_shm_lock shm/lock.c
kpc_shm_unlock shm/lock.c
kpc_shm_usable shm/segment.c""".split('\n')
byfile={}
for l in fns:
    f,p=l.split(); byfile.setdefault(p,[]).append(f)
for p,names in byfile.items():
    s=open(p).read().split('\n')
    for n in names:
        pat=re.compile(r'^(static |)(inline |)[A-Za-z_][A-Za-z_0-9 ]*[ \*]'+re.escape(n)+r'\(')
        hits=[i for i,l in enumerate(s) if pat.match(l) and not l.rstrip().endswith(';')]
        if len(hits)!=1: sys.exit(f"{p}: {n}: {len(hits)} definitions")
        i=hits[0]
        if s[i].startswith('KPC_HOT '): continue
        s[i]='KPC_HOT '+s[i]
    txt='\n'.join(s)
    # the include, after the file's own header include (the first #include line)
    if '#include "base/hot.h"' not in txt:
        lines=txt.split('\n')
        k=next(i for i,l in enumerate(lines) if l.startswith('#include "'))
        lines.insert(k+1,'#include "base/hot.h"')
        txt='\n'.join(lines)
    open(p,'w').write(txt)
    print(p, len(names))
