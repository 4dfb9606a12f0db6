#!/usr/bin/env bash
# ab-now.sh - on the device machine, after scripts/bench-device.sh --only manifest:
# bench_manifest and bench_hit of HEAD (.carry/ab/base) and of HEAD linked -z now
# (.carry/ab/now) alternated; then the probe tree's per-step times (P lines).
set -uo pipefail
. scripts/device-deps.sh
kpc_deps_use_unpacked
kpc_ab_build bench_manifest bench_hit || exit 1
KPC_AB_NAMES="base now"
kpc_ab_alternate 8 mf '/^manifest_xproc_50_at_floor\t|^manifest_xproc_floor\t|^manifest_xproc_50_cost\t|^manifest_step_/ {printf "%s %s %s %s | ", $1, $3, $5, $6}' bench_manifest --runs 21
for i in 1 2 3; do /tmp/ab-probe/bench/bench_manifest --runs 21 2>&1 >/dev/null | grep '^P '; done > "$OUT/probe.txt"
python3 - "$OUT/probe.txt" <<'PY'
import collections, statistics, sys
d = collections.defaultdict(list)
for l in open(sys.argv[1]):
    p = l.split()
    d[(p[1], ' '.join(p[2:-1]))].append(int(p[-1]))
for k in sorted(d):
    print('probe', k[0], k[1], len(d[k]), round(statistics.median(d[k]) / 1000, 2), 'us')
PY
kpc_ab_alternate 4 hit '/^hit_4096_request_floor\t/ {printf "%s %s %s %s", $1, $3, $5, $6}' bench_hit --fake --only 4096 --rounds 21
