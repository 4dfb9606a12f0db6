#!/usr/bin/env bash
# ab.sh - on the device machine, after scripts/bench-device.sh (whose unpacked build
# dependencies in /tmp/kpc-deps it reuses): the new-process and warm hit of a 16 KB source
# (bench_xproc --fake --kernels 80 --runs 15), the build before any collision check
# (a288dd0, carried in .carry/base) and this tree's, alternated three times each; and
# bench_hit --only 4096 of both, alternated.
set -uo pipefail
. scripts/device-deps.sh
kpc_deps_use_unpacked
build() { # src dir
  cmake -S "$1" -B "$2" -DCMAKE_BUILD_TYPE=Release -DKPC_BUILD_TESTS=OFF -DKPC_BUILD_BENCH=ON \
    -DKPC_BUILD_MAN=OFF -DKPC_WERROR=OFF -DKPC_PLATFORM=nvidia >/dev/null &&
    cmake --build "$2" -j"$(nproc)" --target bench_xproc bench_hit >/dev/null
}
build .carry/base /tmp/ab-base || { echo "base build failed"; exit 1; }
build . /tmp/ab-main || { echo "main build failed"; exit 1; }
KPC_AB_NAMES="base main"
kpc_ab_alternate 3 '' '/^xproc_get\t|^xproc_get_warm_process\t|^xproc_request_check_floor\t|^xproc_page_fault\t/ {printf "%s %s  ", $1, $3}' \
  bench_xproc --fake --kernels 80 --runs 15
kpc_ab_alternate 3 '' '/^bench: 1 in-memory hit, 4 KB source/ && n++ < 2 {printf "%s|", $0}' bench_hit --fake --only 4096 --rounds 11
