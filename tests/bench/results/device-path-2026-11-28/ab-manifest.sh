#!/usr/bin/env bash
# ab-manifest.sh - on the device machine, after scripts/bench-device.sh (its unpacked
# build dependencies in /tmp/kpc-deps reused): bench_manifest of the tree before the
# traced-path change (8a84687, carried in .carry/base-mf) and of this tree, alternated.
set -uo pipefail
. scripts/device-deps.sh
kpc_deps_use_unpacked
build() { # src dir
  cmake -S "$1" -B "$2" -DCMAKE_BUILD_TYPE=Release -DKPC_BUILD_TESTS=OFF -DKPC_BUILD_BENCH=ON \
    -DKPC_BUILD_MAN=OFF -DKPC_WERROR=OFF -DKPC_PLATFORM=nvidia >/dev/null &&
    cmake --build "$2" -j"$(nproc)" --target bench_manifest bench_hit >/dev/null
}
build .carry/base-mf /tmp/ab-base || { echo "base build failed"; exit 1; }
build . /tmp/ab-main || { echo "main build failed"; exit 1; }
for i in 1 2 3 4 5 6; do
  for b in base main; do
    printf '%s ' "$b"
    /tmp/ab-$b/bench/bench_manifest 2>&1 | awk -F'\t' '/^manifest_xproc_50\t|^manifest_xproc_50_at_floor\t|^manifest_xproc_floor\t/ {printf "%s %s %s  ", $1, $3, $5}'
    echo
  done
done
for i in 1 2 3 4; do
  for b in base main; do
    printf '%s ' "$b"
    /tmp/ab-$b/bench/bench_hit --only 4096 --rounds 11 2>&1 | grep -E '^bench: 1 in-memory hit, 4 KB source, against' | tr '\n' '|'
    echo
  done
done
