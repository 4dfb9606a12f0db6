# common.sh - what hiprtc.sh and nvrtc.sh share; sourced after they set $build and $lib.
# A temporary directory (removed at exit, with the host index of every cache made by
# newcache), $preload (the drop-in, after the sanitizer runtime of a sanitized build: it
# must come first in the initial library list), and the assertions on a run's figures.
tmp=$(mktemp -d)
caches=()
cleanup() {
  for c in "${caches[@]}"; do "$build/kpc-shm-reset" --cache-dir "$c" --force >/dev/null 2>&1 || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
san=$(ldd "$lib" | grep -oE '/[^ ]*lib[at]san[^ ]*' | head -1 || true)
preload=$lib
[ -n "$san" ] && preload=$san:$lib
export KPC_LOG=error
fail() { echo "FAIL: $*" >&2; exit 1; }
newcache() { export KPC_CACHE_DIR=$tmp/cache-$1; caches+=("$KPC_CACHE_DIR"); }
stat_of() { # stat_of NAME FIELD: the field of the run's KPC_DROPIN_STATS line
  sed -n "s/.* $2=\([0-9]*\).*/\1/p" "$tmp/$1.stats"
}
expect() { # expect NAME FIELD VALUE
  local v
  v=$(stat_of "$1" "$2")
  [ "$v" = "$3" ] || fail "$1: $2=$v, expected $3 ($(cat "$tmp/$1.stats" 2>/dev/null))"
}
same() { # same A B: the reports, and every code object and log, byte for byte
  cmp "$tmp/$1/report" "$tmp/$2/report" || { diff "$tmp/$1/report" "$tmp/$2/report" >&2; fail "$1 and $2 differ"; }
  local f
  for f in "$tmp/$1"/*.co "$tmp/$1"/*.cubin "$tmp/$1"/*.ptx "$tmp/$1"/*.linked; do
    [ -e "$f" ] || continue
    cmp "$f" "$tmp/$2/$(basename "$f")" || fail "$1 and $2: $(basename "$f") differs"
  done
}
