#!/usr/bin/env bash
# Install kpc from a build tree into a temporary prefix, then build and run a consumer
# against it twice: with CMake's find_package(kpc) and with pkg-config; check that
# `man kpc`, `man kpc-shm-reset` and `man 3 kpc` show the installed pages. Leaves nothing
# behind: the temporary prefix and cache, and the cache's shared-memory segment, go.
# usage: run.sh BUILD_DIR SOURCE_DIR TARGET [MAN]   (MAN: ON when the man pages were built)
set -euo pipefail
build=$1 src=$2 target=$3 man=${4:-ON}
tmp=$(mktemp -d)
cleanup() {
  # the consumers attached the cache's host index: remove it with the cache
  if [ -x "$tmp/prefix/bin/kpc-shm-reset" ] && [ -d "$tmp/cache" ]; then
    "$tmp/prefix/bin/kpc-shm-reset" --force --cache-dir "$tmp/cache" >/dev/null
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
test -x "$tmp/prefix/bin/kpc" && test -x "$tmp/prefix/bin/kpc-shm-reset"
ls "$tmp"/prefix/lib*/libkpc.so.1 "$tmp"/prefix/lib*/libkpc.a "$tmp"/prefix/include/kpc/kpc.h >/dev/null
export KPC_CACHE_DIR=$tmp/cache
libdir=$(dirname "$(ls "$tmp"/prefix/lib*/libkpc.so.1)")
# the consumers' library path: the prefix first, then the caller's (where kpc's own
# libraries may have been unpacked: scripts/device-deps.sh)
run_path=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

cmake -S "$src/tests/install" -B "$tmp/cmake-build" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/cmake-build" >/dev/null
LD_LIBRARY_PATH=$run_path "$tmp/cmake-build/consumer" "$target"

export PKG_CONFIG_PATH=$libdir/pkgconfig
# the .pc file finds the prefix relative to itself, whatever the libdir's depth
test -f "$(pkg-config --variable=includedir kpc)/kpc/kpc.h"
test -f "$(pkg-config --variable=libdir kpc)/libkpc.so.1"
cc -Wall -Werror "$src/tests/install/consumer.c" $(pkg-config --cflags --libs kpc) -o "$tmp/consumer-pc"
LD_LIBRARY_PATH=$run_path "$tmp/consumer-pc" "$target"
# the second consumer found the first one's object on disk: the installed tool sees it
"$tmp/prefix/bin/kpc" ls --cache-dir "$tmp/cache" | grep -q consumer.hip
# the drop-ins (src/dropin): installed, found by CMake (kpc::hiprtc / kpc::nvrtc) and by
# pkg-config (kpc-hiprtc / kpc-nvrtc); the NVRTC shims in lib/kpc/nvrtc
ls "$libdir"/libkpc-nvrtc.so.1 "$libdir"/kpc/nvrtc/libnvrtc.so.13 "$libdir"/kpc/nvrtc/libnvrtc.so.12 >/dev/null
dropins=nvrtc
[ -f "$libdir/libkpc-hiprtc.so.1" ] && dropins="hiprtc nvrtc"
for d in $dropins; do
  pkg-config --libs "kpc-$d" | grep -q -- "-lkpc-$d"
  cmake -S "$src/tests/install/dropin" -B "$tmp/dropin-$d" -DCMAKE_PREFIX_PATH="$tmp/prefix" -DDROPIN=$d >/dev/null
  cmake --build "$tmp/dropin-$d" >/dev/null
  readelf -d "$tmp/dropin-$d/dropin_consumer" | grep -q "libkpc-$d.so.1"
  LD_LIBRARY_PATH=$run_path "$tmp/dropin-$d/dropin_consumer"
done

# the man pages, installed where man looks under a prefix
if [ "$man" = ON ]; then
  man_text() { MANPATH=$tmp/prefix/share/man MANPAGER=cat MANWIDTH=80 man "$@" 2>/dev/null; }
  for page in "1 kpc" "1 kpc-shm-reset" "3 kpc"; do
    set -- $page
    test -f "$tmp/prefix/share/man/man$1/$2.$1"
    text=$(man_text "$1" "$2")
    grep -q "^NAME" <<<"$text"
  done
  text=$(man_text kpc)
  # (newer groff justifies the NAME line: "kpc  -  the kpc ...")
  grep -qE "kpc +- +the kpc code-object cache tool" <<<"$text"
fi
what="CMake and pkg-config consumers"
[ "$man" = ON ] && what="$what and the man pages"
echo "install: $what passed"
