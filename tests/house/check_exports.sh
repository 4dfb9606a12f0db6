#!/usr/bin/env bash
# check_exports.sh - the release libraries carry no test hook, and libkpc.so exports only
# the public API of include/kpc/kpc.h; the test build of the library has the hooks (so
# this check can fail: a hook name mistyped here would not pass unnoticed).
# usage: check_exports.sh LIBKPC_SO LIBKPC_A LIBKPC_TEST_A KPC_H
set -euo pipefail
so=$1 a=$2 test_a=$3 header=$4
hooks='^(kpc__sys_fault_set|kpc_platform_set|kpc_index_check)$|^kpc_(index|tier)_test_'
fail=0

# 1. the dynamic symbols: only functions kpc.h declares
public=$(grep -oE '\bkpc_[a-z_0-9]+[[:space:]]*\(' "$header" | tr -d ' (' | sort -u)
while read -r sym; do
  if ! grep -qx "$sym" <<<"$public"; then
    echo "check_exports: $so exports $sym, which include/kpc/kpc.h does not declare" >&2
    fail=1
  fi
done < <(nm -D --defined-only "$so" | awk '$2 ~ /^[TDBRW]$/ {print $3}' | grep '^kpc' || true)

# 2. no test hook in any release symbol table (the .so's own, not only its dynamic one:
# a hidden function is a local symbol there). kpc__sys_fault itself is not listed: in a
# release build it is a static inline that answers 0, which an unoptimized build emits.
for lib in "$so" "$a"; do
  found=$(nm "$lib" 2>/dev/null | awk '{print $NF}' | grep -E "$hooks" | sort -u || true)
  if [ -n "$found" ]; then
    echo "check_exports: the release library $lib has test hooks: $(echo $found)" >&2
    fail=1
  fi
done

# 3. the control: the test build has them (nm's output read whole first: grep -q stopping
# at the first match would cut nm off with SIGPIPE, and pipefail would call that a miss)
test_syms=$(nm "$test_a" | awk '$2 == "T" {print $3}')
for h in kpc__sys_fault_set kpc_platform_set kpc_index_test_hold_lock kpc_index_check kpc_tier_test_add; do
  if ! grep -qx "$h" <<<"$test_syms"; then
    echo "check_exports: the test library $test_a lacks the hook $h (is the check still right?)" >&2
    fail=1
  fi
done
[ $fail -eq 0 ] && echo "check_exports: release libraries export only kpc.h and carry no test hook"
exit $fail
