#!/usr/bin/env bash
# ab-order.sh - on the device: the straight path (b-straight, 0418cac) against the tree
# before it (a-head, eb133ed) and against itself with the core files linked in the order
# a request runs through them (c-order: request, map_key, map, miss, key, resolve,
# manifest_seen, manifest, manifest_decode, hit, program, then the rest), the three
# taking turns: the new-process hits of bench_manifest, then the in-memory hit.
set -uo pipefail
. scripts/device-deps.sh
kpc_deps_unpack_missing .carry/debs > /dev/null || exit 1
kpc_deps_use_unpacked
kpc_ab_build bench_manifest bench_hit 2>/dev/null || exit 1
grep -m1 "model name" /proc/cpuinfo; sync; sleep 5
kpc_ab_alternate 10 manifest '$1 ~ /^manifest_xproc_(0|50_at_floor)$/ {printf "%s %s %s  ", $1, $3, $6}' bench_manifest --runs 21
kpc_ab_alternate 2 hit '$1 ~ /^hit_(4096_request_floor|threads_scale_(2|8|16))$/ {printf "%s %s %s  ", $1, $3, $6}' bench_hit --rounds 5 --seconds 0.1
