#!/usr/bin/env bash
# probe-run.sh - on the device: the in-get step marks (.carry/probe, a scratch copy of HEAD
# with marks) for the 50-file and the no-include new-process hit, their faults, and the
# plain helpers' medians side by side.
set -uo pipefail
. scripts/device-deps.sh
kpc_deps_unpack_missing .carry/debs > /dev/null || exit 1
kpc_deps_use_unpacked
cd .carry/probe
cmake -S . -B b -DCMAKE_BUILD_TYPE=Release -DKPC_BUILD_TESTS=OFF -DKPC_BUILD_BENCH=ON -DKPC_BUILD_MAN=OFF \
  -DKPC_WERROR=OFF -DKPC_PLATFORM=nvidia > /dev/null && cmake --build b -j16 --target bench_manifest kpc-shm-reset > /dev/null || { echo "build failed"; exit 1; }
grep -m1 "model name" /proc/cpuinfo
B=b/bench/bench_manifest
for k in 1 2; do echo "### steps $k"; KPC_SHM_RESET=b/kpc-shm-reset bash ../steps.sh b/bench; done
echo "### faults"; KPC_MF=1 KPC_SHM_RESET=b/kpc-shm-reset bash ../steps.sh b/bench
line=$(KEEP=1 $B --runs 3 --rounds 3 2>/dev/null | grep KEPT); D=$(echo $line | awk '{print $2}'); H=$(echo $line | awk '{print $3}')
echo "### plain helpers, medians of 41, turns"
for k in 1 2 3; do for w in floor files none; do for i in $(seq 41); do $B --helper $w $D $H; done | awk '{print $1}' | sort -n | awk -v w=$w '{a[NR]=$1} END{printf "%s %.1f  ", w, a[21]/1000}'; done; echo; done
b/kpc-shm-reset -d "$D" >/dev/null 2>&1; rm -rf "$(dirname "$D")"
for k in 1 2; do $B --runs 41 2>/dev/null | grep -E "^manifest_(xproc_50_at_floor|step|xproc_floor|xproc_0|xproc_50_faults)" | cut -f1,3,5,6; done
