#!/usr/bin/env bash
# flags-ab.sh - on the device: bench_manifest of this tree built four ways (-O3, the
# Release default; -O2; -Os; -O2 with link-time optimization), run in turn, four turns.
set -uo pipefail
. scripts/device-deps.sh
kpc_deps_unpack_missing .carry/debs > /dev/null || exit 1
kpc_deps_use_unpacked
build() { # NAME FLAGS [cmake args]
  local n=$1 f=$2; shift 2
  cmake -S . -B /tmp/v-$n -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS_RELEASE="$f -DNDEBUG" "$@" \
    -DKPC_BUILD_TESTS=OFF -DKPC_BUILD_BENCH=ON -DKPC_BUILD_MAN=OFF -DKPC_WERROR=OFF -DKPC_PLATFORM=nvidia >/dev/null &&
    cmake --build /tmp/v-$n -j16 --target bench_manifest >/dev/null || echo "build $n failed"
}
build O3 -O3; build O2 -O2; build Os -Os; build lto -O2 -DCMAKE_INTERPROCEDURAL_OPTIMIZATION=ON
ls -la /tmp/v-*/bench/bench_manifest | awk '{print $5, $9}'
sync; sleep 10
for k in 1 2 3 4; do for n in O3 O2 Os lto; do
  echo -n "$k $n "; /tmp/v-$n/bench/bench_manifest --runs 21 2>/dev/null |
    grep -E "^manifest_xproc_(50_at_floor|0|floor)	" | cut -f1,3,6 | tr '\n\t' '  '; echo
done; done
