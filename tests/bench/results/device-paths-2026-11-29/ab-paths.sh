#!/usr/bin/env bash
# ab-paths.sh - on the device: the record's path laid down without snprintf (b-paths)
# against the tree before (a-head), alternated; then the code-warmed probe.
set -uo pipefail
. scripts/device-deps.sh
kpc_deps_unpack_missing .carry/debs > /dev/null || exit 1
kpc_deps_use_unpacked
kpc_ab_build bench_manifest bench_xproc || exit 1
grep -m1 "model name" /proc/cpuinfo; sync; sleep 10
kpc_ab_alternate 6 manifest '$1 ~ /^manifest_xproc_(0|50|50_at_floor)$/ {printf "%s %s %s  ", $1, $3, $6}' bench_manifest --runs 21
kpc_ab_alternate 4 xproc '$1 ~ /^xproc_get(_warm_process)?$/ {printf "%s %s  ", $1, $3}' bench_xproc --fake --runs 31
echo "### code warmed (the probe tree)"
cd .carry/probe
cmake -S . -B b -DCMAKE_BUILD_TYPE=Release -DKPC_BUILD_TESTS=OFF -DKPC_BUILD_BENCH=ON -DKPC_BUILD_MAN=OFF \
  -DKPC_WERROR=OFF -DKPC_PLATFORM=nvidia > /dev/null && cmake --build b -j16 --target bench_manifest kpc-shm-reset > /dev/null || { echo "build failed"; exit 1; }
for k in 1 2; do KPC_SHM_RESET=b/kpc-shm-reset bash ../warm.sh b/bench 41; done
