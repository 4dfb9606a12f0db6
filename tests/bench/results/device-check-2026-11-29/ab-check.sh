#!/usr/bin/env bash
# ab-check.sh - on the device machine, after scripts/bench-device.sh: the 4 KB in-memory
# hit against its floor (bench_hit --only 4096) of 6a41927 (a-before) and 2fa5bf3
# (b-check: a request of a source alone checked by one test), taking turns ten times.
set -uo pipefail
. scripts/device-deps.sh
kpc_deps_use_unpacked
kpc_ab_build bench_hit || exit 1
kpc_ab_alternate 10 hit '/^hit_4096_request_floor\t|^hit_4096\t/ {printf "%s %s %s %s | ", $1, $3, $5, $6}' bench_hit --only 4096 --rounds 31
