#!/usr/bin/env bash
# Install kpc from a build tree into a temporary prefix, then build and run a consumer
# against it twice: with CMake's find_package(kpc) and with pkg-config.
# usage: run.sh BUILD_DIR SOURCE_DIR TARGET
set -euo pipefail
build=$1 src=$2 target=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
test -x "$tmp/prefix/bin/kpc" && test -x "$tmp/prefix/bin/kpc-shm-reset"
ls "$tmp"/prefix/lib*/libkpc.so.1 "$tmp"/prefix/lib*/libkpc.a "$tmp"/prefix/include/kpc/kpc.h >/dev/null
export KPC_CACHE_DIR=$tmp/cache
libdir=$(dirname "$(ls "$tmp"/prefix/lib*/libkpc.so.1)")

cmake -S "$src/tests/install" -B "$tmp/cmake-build" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/cmake-build" >/dev/null
LD_LIBRARY_PATH=$libdir "$tmp/cmake-build/consumer" "$target"

export PKG_CONFIG_PATH=$libdir/pkgconfig
# the .pc file finds the prefix relative to itself, whatever the libdir's depth
test -f "$(pkg-config --variable=includedir kpc)/kpc/kpc.h"
test -f "$(pkg-config --variable=libdir kpc)/libkpc.so.1"
cc -Wall -Werror "$src/tests/install/consumer.c" $(pkg-config --cflags --libs kpc) -o "$tmp/consumer-pc"
LD_LIBRARY_PATH=$libdir "$tmp/consumer-pc" "$target"
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
  LD_LIBRARY_PATH=$libdir "$tmp/dropin-$d/dropin_consumer"
done
echo "install: CMake and pkg-config consumers passed"
