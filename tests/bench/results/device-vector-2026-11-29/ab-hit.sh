#!/usr/bin/env bash
# ab-hit.sh - on the device machine, after scripts/bench-device.sh: bench_hit --only 4096
# of each tree in .carry/ab/<name>, alternated four times.
set -uo pipefail
. scripts/device-deps.sh
kpc_deps_use_unpacked
names=$(ls .carry/ab)
for n in $names; do
  cmake -S .carry/ab/$n -B /tmp/ab-$n -DCMAKE_BUILD_TYPE=Release -DKPC_BUILD_TESTS=OFF -DKPC_BUILD_BENCH=ON \
    -DKPC_BUILD_MAN=OFF -DKPC_WERROR=OFF -DKPC_PLATFORM=nvidia >/dev/null &&
    cmake --build /tmp/ab-$n -j"$(nproc)" --target bench_hit bench_xproc >/dev/null || { echo "$n build failed"; exit 1; }
done
for i in 1 2 3 4 5; do
  for n in $names; do
    printf '%s ' "$n"
    /tmp/ab-$n/bench/bench_hit --fake --only 4096 --rounds 11 2>&1 | awk -F'\t' '/^hit_4096_request/ {printf "%s (%s) %s", $3, $5, $6}'
    echo
  done
done
for i in 1 2 3; do
  for n in $names; do
    printf 'xproc %s ' "$n"
    /tmp/ab-$n/bench/bench_xproc --fake --runs 21 2>&1 | awk -F'\t' '/^xproc_get\t|^xproc_get_warm_process\t/ {printf "%s %s  ", $1, $3}'
    echo
  done
done
