#!/usr/bin/env bash
# ab-straight.sh - on the device: the request's straight path (b-straight: the map
# resolves and publishes a miss in one call, the manifest's look and record in files of
# their own) against the tree before it (a-head), alternated: the new-process hits of
# bench_manifest, then the in-memory hit and its threads of bench_hit.
set -uo pipefail
. scripts/device-deps.sh
kpc_deps_unpack_missing .carry/debs > /dev/null || exit 1
kpc_deps_use_unpacked
kpc_ab_build bench_manifest bench_hit || exit 1
grep -m1 "model name" /proc/cpuinfo; sync; sleep 5
kpc_ab_alternate 8 manifest '$1 ~ /^manifest_xproc_(0|50_at_floor)$/ {printf "%s %s %s  ", $1, $3, $6}' bench_manifest --runs 21
kpc_ab_alternate 4 hit '$1 ~ /^hit_(4096_request_floor|threads_scale_(2|8|16))$/ {printf "%s %s %s  ", $1, $3, $6}' bench_hit --rounds 5 --seconds 0.1
