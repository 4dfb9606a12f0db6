#!/usr/bin/env bash
# check_includes_refuses.sh - scripts/check-includes.sh fails on a forbidden edge, a
# relative include and a loosened rule that makes a cycle (a check that cannot fail is
# no check), and on shm/ including anything of src/ but base/. Works on a copy of src/ and
# shm/ in a temporary directory.
# usage: check_includes_refuses.sh SOURCE_DIR
set -euo pipefail
root=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
expect_refused() { # what src_dir [script]
  local what=$1 dir=$2 script=${3:-$root/scripts/check-includes.sh}
  if bash "$script" "$dir" >/dev/null 2>"$tmp/err"; then
    echo "check_includes_refuses: $what was not refused" >&2
    fail=1
  elif ! grep -q "check-includes:" "$tmp/err"; then
    echo "check_includes_refuses: $what failed without saying why" >&2
    fail=1
  fi
}
bash "$root/scripts/check-includes.sh" "$root" >/dev/null
copy() { mkdir -p "$tmp/$1" && cp -r "$root/src" "$root/shm" "$tmp/$1/"; }

copy a
echo '#include "core/cache.h"' >>"$tmp/a/src/base/log.h"
expect_refused "base/ including core/" "$tmp/a"

copy b
echo '#include "storage/store.h"' >>"$tmp/b/src/platform/compile.c"
expect_refused "platform/ including storage/" "$tmp/b"

copy c
echo '#include "core/key.h"' >>"$tmp/c/src/storage/tier.c"
expect_refused "storage/ including core/" "$tmp/c"

copy d
echo '#include "../core/key.h"' >>"$tmp/d/src/core/cache.c"
expect_refused "a relative include" "$tmp/d"

copy f
echo '#include "storage/record.h"' >>"$tmp/f/shm/index.c"
expect_refused "shm/ including storage/" "$tmp/f"

copy g
echo '#include "core/config.h"' >>"$tmp/g/shm/index.h"
expect_refused "shm/ including core/ (only the kpc-shm-reset program may)" "$tmp/g"

# a rule loosened so that base/ may include core/, and an include that uses it: a cycle
copy e
echo '#include "core/key.h"' >>"$tmp/e/src/base/util.c"
sed 's/\[base\]="base"/[base]="base core"/' "$root/scripts/check-includes.sh" >"$tmp/loose.sh"
expect_refused "a cycle between folders" "$tmp/e" "$tmp/loose.sh"
if ! grep -q "a cycle" "$tmp/err"; then
  echo "check_includes_refuses: the cycle was not named as one" >&2
  fail=1
fi
[ $fail -eq 0 ] && echo "check_includes_refuses: every forbidden include was refused"
exit $fail
