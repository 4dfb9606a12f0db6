#!/usr/bin/env bash
# probe-run.sh - on the device machine, after scripts/bench-device.sh: the scratch probe
# tree (.carry/probe: b5d1716 with clock marks in the get) built, then steps.sh.
set -uo pipefail
. scripts/device-deps.sh
kpc_deps_use_unpacked
cmake -S .carry/probe -B /tmp/probe-build -DCMAKE_BUILD_TYPE=Release -DKPC_BUILD_TESTS=OFF -DKPC_BUILD_BENCH=ON \
  -DKPC_BUILD_MAN=OFF -DKPC_WERROR=OFF -DKPC_PLATFORM=nvidia >/dev/null &&
  cmake --build /tmp/probe-build -j16 --target bench_manifest kpc-shm-reset >/dev/null || { echo probe build failed; exit 1; }
bash .carry/steps.sh /tmp/probe-build/bench 41
bash .carry/steps.sh /tmp/probe-build/bench 41
