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
# equivalent A B: two code objects (ELF) from two compiles of one request: byte for byte,
# or, where the compiler itself varies from run to run (hipRTC 6.4 lays out the variables
# and strings it generates for a program's name expressions in another order each time),
# the same size, the same symbols (name, size, kind, section; not where in the section,
# and the string literals .str, .str.1, ... by their sizes, not by the order that names
# them) and the same instructions
code_view() { # the symbols, sorted, and the instructions of a code object
  readelf -sW "$1" |
    awk '$1 ~ /^[0-9]+:$/ { n = $8; if (n ~ /^\.str(\.[0-9]+)?$/) n = ".str"; print n, $3, $4, $5, $7 }' | sort
  readelf -x .text "$1"
}
equivalent() {
  cmp -s "$1" "$2" && return 0
  [ "$(stat -c %s "$1")" = "$(stat -c %s "$2")" ] || return 1
  local a b
  a=$(code_view "$1") && b=$(code_view "$2") && [ -n "$a" ] && [ "$a" = "$b" ]
}
same() { # same A B: the reports equal, every log and other output byte for byte, every code
  # object equivalent (byte for byte where the compiler is deterministic)
  cmp "$tmp/$1/report" "$tmp/$2/report" || { diff "$tmp/$1/report" "$tmp/$2/report" >&2; fail "$1 and $2 differ"; }
  local f
  for f in "$tmp/$1"/*.co "$tmp/$1"/*.cubin "$tmp/$1"/*.ptx "$tmp/$1"/*.linked; do
    [ -e "$f" ] || continue
    case $f in
      *.co) equivalent "$f" "$tmp/$2/$(basename "$f")" || fail "$1 and $2: $(basename "$f") differs" ;;
      *) cmp "$f" "$tmp/$2/$(basename "$f")" || fail "$1 and $2: $(basename "$f") differs" ;;
    esac
  done
}
identical() { # identical A B: kpc's answers to the same request, byte for byte
  local f
  for f in "$tmp/$1"/*.co; do
    [ -e "$f" ] || continue
    cmp "$f" "$tmp/$2/$(basename "$f")" || fail "$1 and $2: $(basename "$f") is not kpc's stored object"
  done
}
