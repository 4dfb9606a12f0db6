#!/usr/bin/env bash
# ab-hit.sh - on the device machine, after scripts/bench-device.sh: bench_hit --only 4096
# of each tree in .carry/ab/<name>, alternated four times.
set -uo pipefail
. scripts/device-deps.sh
kpc_deps_use_unpacked
kpc_ab_build bench_hit bench_xproc || exit 1
kpc_ab_alternate 5 '' '/^hit_4096_request/ {printf "%s (%s) %s", $3, $5, $6}' bench_hit --fake --only 4096 --rounds 11
kpc_ab_alternate 3 xproc '/^xproc_get\t|^xproc_get_warm_process\t/ {printf "%s %s  ", $1, $3}' bench_xproc --fake --runs 21
