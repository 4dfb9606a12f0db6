#!/usr/bin/env bash
# ab-order.sh - on the device: this tree's bench_manifest as CMake's Release builds it
# (plain) and with the functions a get runs laid out together (ordered: each function in
# its own section, gold placing those of .carry/order.txt first), alternated.
set -uo pipefail
. scripts/device-deps.sh
kpc_deps_unpack_missing .carry/debs > /dev/null || exit 1
kpc_deps_use_unpacked
command -v ld.gold || { echo "no gold here"; exit 1; }
common=(-DCMAKE_BUILD_TYPE=Release -DKPC_BUILD_TESTS=OFF -DKPC_BUILD_BENCH=ON -DKPC_BUILD_MAN=OFF -DKPC_WERROR=OFF -DKPC_PLATFORM=nvidia)
cmake -S . -B /tmp/ab-plain "${common[@]}" >/dev/null && cmake --build /tmp/ab-plain -j16 --target bench_manifest >/dev/null || exit 1
cmake -S . -B /tmp/ab-ordered "${common[@]}" -DCMAKE_C_FLAGS="-ffunction-sections" \
  -DCMAKE_EXE_LINKER_FLAGS="-fuse-ld=gold -Wl,--section-ordering-file,$PWD/.carry/order.txt" >/dev/null &&
  cmake --build /tmp/ab-ordered -j16 --target bench_manifest >/dev/null || exit 1
nm -n /tmp/ab-ordered/bench/bench_manifest | grep -c " [tT] "
grep -m1 "model name" /proc/cpuinfo; sync; sleep 10
KPC_AB_NAMES="plain ordered"
kpc_ab_alternate 8 manifest '$1 ~ /^manifest_xproc_(0|50|50_at_floor)$/ {printf "%s %s %s  ", $1, $3, $6}' bench_manifest --runs 21
