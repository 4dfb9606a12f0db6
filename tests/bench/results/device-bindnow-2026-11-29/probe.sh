#!/usr/bin/env bash
set -uo pipefail
. scripts/device-deps.sh
kpc_deps_use_unpacked
KPC_AB_NAMES=probe
cmake -S .carry/ab/probe -B /tmp/ab-probe -DCMAKE_BUILD_TYPE=Release -DKPC_BUILD_TESTS=OFF -DKPC_BUILD_BENCH=ON \
      -DKPC_BUILD_MAN=OFF -DKPC_WERROR=OFF -DKPC_PLATFORM=nvidia >/dev/null && cmake --build /tmp/ab-probe -j16 --target bench_manifest >/dev/null || exit 1
for i in 1 2 3 4; do /tmp/ab-probe/bench/bench_manifest --runs 21 2>&1 >/dev/null | grep -E '^(P|R) '; done > "$OUT/probe.txt"
python3 .carry/agg.py "$OUT/probe.txt" files none
awk '/^R/ {s[$2]+=$3; n[$2]++} END {for (k in s) print "raw read", k, s[k]/n[k]/1000, "us mean of", n[k]}' "$OUT/probe.txt"
