#!/usr/bin/env bash
# ab-compact.sh - on the device machine, after scripts/bench-device.sh: bench_manifest of
# 647be99 (a-before: the manifest's part copied out), 5e7841b (b-rotate: the two parts
# rotated in place) and 7902f59 (c-compact: the lists' files as offsets, 12 bytes each),
# taking turns eight times.
set -uo pipefail
. scripts/device-deps.sh
kpc_deps_use_unpacked
kpc_ab_build bench_manifest || exit 1
kpc_ab_alternate 8 mf '/^manifest_xproc_50_at_floor\t|^manifest_xproc_floor\t|^manifest_xproc_50_faults\t|^manifest_step_/ {printf "%s %s %s %s | ", $1, $3, $5, $6}' bench_manifest --runs 21
