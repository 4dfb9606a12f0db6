#!/usr/bin/env bash
# ab-hot.sh - on the device: the functions of a new process's hit marked KPC_HOT (b-hot)
# against the same tree without (a-paths), alternated; then the in-memory hit.
set -uo pipefail
. scripts/device-deps.sh
kpc_deps_unpack_missing .carry/debs > /dev/null || exit 1
kpc_deps_use_unpacked
kpc_ab_build bench_manifest bench_hit || exit 1
grep -m1 "model name" /proc/cpuinfo; sync; sleep 10
kpc_ab_alternate 12 manifest '$1 ~ /^manifest_xproc_(0|50|50_at_floor)$/ {printf "%s %s %s  ", $1, $3, $6}' bench_manifest --runs 21

