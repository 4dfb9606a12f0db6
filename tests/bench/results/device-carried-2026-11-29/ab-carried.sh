#!/usr/bin/env bash
# ab-carried.sh - on the device machine, after scripts/bench-device.sh: bench_manifest of
# 7575077 (.carry/ab/before: the object read from its own record) and of d0cee11
# (.carry/ab/carried: carried in the manifest's record), alternated six times.
set -uo pipefail
. scripts/device-deps.sh
kpc_deps_use_unpacked
kpc_ab_build bench_manifest || exit 1
kpc_ab_alternate 6 mf '/^manifest_xproc_50_at_floor\t|^manifest_xproc_floor\t|^manifest_xproc_50_faults\t|^manifest_step_/ {printf "%s %s %s %s | ", $1, $3, $5, $6}' bench_manifest --runs 21
