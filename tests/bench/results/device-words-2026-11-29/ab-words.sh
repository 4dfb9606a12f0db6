#!/usr/bin/env bash
# ab-words.sh - on the device machine, after scripts/bench-device.sh: the 4 KB in-memory
# hit against its floor (bench_hit --only 4096) of 44ad8d2 (a-before) and the map key in
# words (b-words), taking turns twelve times; then the manifest bench of each, six turns.
set -uo pipefail
. scripts/device-deps.sh
kpc_deps_use_unpacked
kpc_ab_build bench_hit bench_manifest || exit 1
kpc_ab_alternate 12 hit '/^hit_4096_request_floor\t|^hit_4096\t|^hit_4096_8_options\t/ {printf "%s %s %s %s | ", $1, $3, $5, $6}' bench_hit --only 4096 --rounds 31
kpc_ab_alternate 6 manifest '/^manifest_xproc_50_at_floor\t|^manifest_xproc_50_faults\t/ {printf "%s %s %s %s | ", $1, $3, $5, $6}' bench_manifest
