#!/usr/bin/env bash
# ab-pad.sh - on the device machine, after scripts/bench-device.sh: bench_hit whole (the
# threads' rows too) of the map key in words (b-words) and of the same with every
# per-thread slot on 128 bytes, not 64 (c-pad: the hit counters, the programs' reference
# slots, the grace records), taking turns three times.
set -uo pipefail
. scripts/device-deps.sh
kpc_deps_use_unpacked
kpc_ab_build bench_hit || exit 1
KPC_AB_NAMES="b-words c-pad"
kpc_ab_alternate 3 all '/^hit_4096_request_floor\t|^hit_threads_scale_/ {printf "%s %s %s %s | ", $1, $3, $5, $6}' bench_hit
