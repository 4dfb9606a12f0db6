#!/usr/bin/env bash
# probe-run2.sh - on the device: the marked tree (.carry/probe) built, a pause for the
# build's aftermath, then steps2.sh (the 50-file get, the no-include get and the floor in
# turns, each step's median) twice, once counting faults, and bench_manifest twice.
set -uo pipefail
. scripts/device-deps.sh
kpc_deps_unpack_missing .carry/debs > /dev/null || exit 1
kpc_deps_use_unpacked
cd .carry/probe
cmake -S . -B b -DCMAKE_BUILD_TYPE=Release -DKPC_BUILD_TESTS=OFF -DKPC_BUILD_BENCH=ON -DKPC_BUILD_MAN=OFF \
  -DKPC_WERROR=OFF -DKPC_PLATFORM=nvidia > /dev/null && cmake --build b -j16 --target bench_manifest kpc-shm-reset > /dev/null || { echo "build failed"; exit 1; }
grep -m1 "model name" /proc/cpuinfo; sync; sleep 15
for k in 1 2; do echo "### turns $k"; KPC_SHM_RESET=b/kpc-shm-reset bash ../steps2.sh b/bench 41; done
echo "### faults (counts x1000, shown as us)"; KPC_MF=1 KPC_SHM_RESET=b/kpc-shm-reset bash ../steps2.sh b/bench 11 | grep -v " 0.00 us"
for k in 1 2; do b/bench/bench_manifest --runs 41 2>/dev/null | grep -E "^manifest_(xproc_50_at_floor|step|xproc_floor|xproc_0|xproc_50_faults)" | cut -f1,3,5,6; done
