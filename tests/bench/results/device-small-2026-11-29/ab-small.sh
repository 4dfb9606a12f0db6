#!/usr/bin/env bash
# ab-small.sh - on the device machine, after scripts/bench-device.sh: bench_manifest of
# b3478a8 (a-before) and the stack buffers sized to the usual path (b-small), taking
# turns twelve times.
set -uo pipefail
. scripts/device-deps.sh
kpc_deps_use_unpacked
kpc_ab_build bench_manifest || exit 1
kpc_ab_alternate 12 mf '/^manifest_xproc_50_at_floor\t|^manifest_xproc_floor\t|^manifest_xproc_50_faults\t|^manifest_step_/ {printf "%s %s %s %s | ", $1, $3, $5, $6}' bench_manifest --runs 21
