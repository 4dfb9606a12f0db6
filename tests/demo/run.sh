#!/usr/bin/env bash
# The demo never touches the user's cache: with KPC_CACHE_DIR naming a cache that holds an
# object and has a live host index, scripts/demo.sh runs to the end, and afterwards that
# cache's files (names, sizes, times) and its index's counters are exactly as before.
# usage: run.sh SOURCE_DIR BUILD_DIR TARGET
set -euo pipefail
src=$1 build=$2 target=$3
tmp=$(mktemp -d)
user=$tmp/user-cache
cleanup() {
  "$build/kpc-shm-reset" --force --cache-dir "$user" >/dev/null 2>&1 || true
  "$build/kpc-shm-reset" --force --cache-dir "$tmp/demo" >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT

# the user's cache: one object, and its host index
"$build/kpc" compile --cache-dir "$user" --target "$target" "$src/examples/saxpy.hip" >/dev/null
snapshot() {
  (cd "$user" && find . -printf '%p %s %T@\n' | sort)
  "$build/kpc" stats --json --cache-dir "$user" | grep -E '"(index|index_name|lookups|hits|builds|entries)"'
}
before=$(snapshot)
grep -Eq '"index":[[:space:]]*"ok"' <<<"$before" || { echo "demo: the user's cache has no index to guard"; exit 1; }

out=$(cd "$src" && KPC_CACHE_DIR=$user KPC_DEMO_NO_SETUP=1 KPC_BUILD_DIR=$build KPC_DEMO_DIR=$tmp/demo \
      KPC_DEMO_TARGET=$target scripts/demo.sh 2>&1) || { echo "$out"; echo "demo: the demo failed"; exit 1; }
grep -q "^hit .*saxpy.hip" <<<"$out" || { echo "$out"; echo "demo: no hit in the second pass"; exit 1; }
after=$(snapshot)
if [ "$before" != "$after" ]; then
  echo "demo: the user's cache changed:"
  diff <(echo "$before") <(echo "$after") || true
  exit 1
fi
echo "demo: ran to the end; the user's KPC_CACHE_DIR and its index are untouched"
