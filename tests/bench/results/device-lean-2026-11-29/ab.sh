#!/usr/bin/env bash
# ab.sh - on the device machine, after scripts/bench-device.sh has unpacked the build
# dependencies: each tree in .carry/ab/<name> built (Release, NVIDIA platform), then
# bench_hit --only 4096 alternated between the trees five times and bench_manifest
# alternated three times; the rows that compare a hit with its floor are printed.
set -uo pipefail
. scripts/device-deps.sh
kpc_deps_use_unpacked
kpc_ab_build bench_hit bench_manifest || exit 1
kpc_ab_alternate 5 hit '/^hit_4096_request/ {printf "%s (floor %s) %s", $3, $5, $6}' \
  bench_hit --fake --only 4096 --rounds 11
kpc_ab_alternate 3 manifest '/^manifest_xproc_50_at_floor\t|^manifest_xproc_0\t|^manifest_xproc_floor\t/ {printf "%s %s  ", $1, $3}' \
  bench_manifest --runs 21
