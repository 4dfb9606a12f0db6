#!/usr/bin/env bash
# steps-run.sh - on the device: bench_manifest's rows (floor, steps, reads) and the in-get
# step instrument (.carry/steps.patch on a copy of this tree), lazy and LD_BIND_NOW
# alternated, all in one call.
set -uo pipefail
OUTD=${OUT:-/tmp/out}; mkdir -p $OUTD
[ -d /tmp/kpc-deps/xxhash ] || { OUT=$OUTD/r bash scripts/bench-device.sh --only manifest > $OUTD/bd.log 2>&1; echo "bench-device rc=$?"; }
. scripts/device-deps.sh
kpc_deps_use_unpacked
rm -rf /tmp/steps && mkdir /tmp/steps && tar --exclude='./build*' --exclude=./.git --exclude=./.carry -cf - . | tar -C /tmp/steps -xf -
cd /tmp/steps && patch -p1 -s < $OLDPWD/.carry/steps.patch || { echo "patch failed"; exit 1; }
cmake -S . -B b -DCMAKE_BUILD_TYPE=Release -DKPC_BUILD_TESTS=OFF -DKPC_BUILD_BENCH=ON -DKPC_BUILD_MAN=OFF \
  -DKPC_WERROR=OFF -DKPC_PLATFORM=nvidia > /dev/null && cmake --build b -j16 --target bench_manifest kpc-shm-reset > /dev/null ||
  { echo "build failed"; exit 1; }
S=tests/bench/results/device-vector-2026-11-29/in-get-steps-here.sh
cc -O2 -Wall $OLDPWD/.carry/pf.c -o /tmp/pf && for i in 1 2 3 4 5; do /tmp/pf; done
echo "### in-get steps"; KPC_SHM_RESET=b/kpc-shm-reset bash $S b/bench
echo "### in-get minor faults (counts, shown x1000 as us)"; KPC_MF=1 KPC_SHM_RESET=b/kpc-shm-reset bash $S b/bench
