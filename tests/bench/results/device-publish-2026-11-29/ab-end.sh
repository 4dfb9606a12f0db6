#!/usr/bin/env bash
# ab-end.sh - on the device machine, after scripts/bench-device.sh: the 4 KB in-memory hit
# against its floor of d020573 (a-before) and 1c37266 (b-head: programs made holding the
# map's reference), taking turns eight times; then the manifest bench of each, six turns.
set -uo pipefail
. scripts/device-deps.sh
kpc_deps_use_unpacked
kpc_ab_build bench_hit bench_manifest || exit 1
kpc_ab_alternate 8 hit '/^hit_4096_request_floor\t|^hit_4096_8_options\t/ {printf "%s %s %s %s | ", $1, $3, $5, $6}' bench_hit --only 4096 --rounds 31
kpc_ab_alternate 6 manifest '/^manifest_xproc_50_at_floor\t|^manifest_xproc_50_faults\t/ {printf "%s %s %s %s | ", $1, $3, $5, $6}' bench_manifest
