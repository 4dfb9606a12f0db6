#!/usr/bin/env bash
# ab-shared.sh - on the device machine, after scripts/bench-device.sh has unpacked the
# build dependencies: libkpc.so of each tree in .carry/ab/<name>, hit_shared.c linked
# against each, the trees taking turns five times (3M hits a batch, sm_90).
set -uo pipefail
. scripts/device-deps.sh
kpc_deps_use_unpacked
kpc_ab_build kpc || exit 1
here=$(dirname "$0")
for n in $KPC_AB_NAMES; do
  cc -O2 -I.carry/ab/$n/include "$here/hit_shared.c" -o /tmp/hit-shared-$n -L/tmp/ab-$n -lkpc \
    -Wl,-rpath,/tmp/ab-$n || exit 1
  mkdir -p /tmp/hit-shared-cache-$n
done
for i in 1 2 3 4 5; do
  for n in $KPC_AB_NAMES; do
    printf '%s ' "$n"
    /tmp/hit-shared-$n /tmp/hit-shared-cache-$n 3000000 sm_90
  done
done
