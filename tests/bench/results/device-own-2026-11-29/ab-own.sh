#!/usr/bin/env bash
# ab-own.sh - on the device machine, after scripts/bench-device.sh: bench_hit's 4 KB rows
# of d302439 (.carry/ab/base: every hit counted with a locked add) and of the same with
# each thread's own hit counter (.carry/ab/own), alternated six times.
set -uo pipefail
. scripts/device-deps.sh
kpc_deps_use_unpacked
kpc_ab_build bench_hit || exit 1
KPC_AB_NAMES="base own"
kpc_ab_alternate 6 hit '/^hit_4096_request_floor\t|^hit_4096\t/ {printf "%s %s %s %s | ", $1, $3, $5, $6}' bench_hit --fake --only 4096 --rounds 21
