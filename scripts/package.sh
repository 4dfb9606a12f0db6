#!/usr/bin/env bash
# package.sh - kpc's Debian packages, built from this tree: libkpc1 (the shared library),
# libkpc-dev (headers, kpc.pc, the CMake package, the static library, kpc(3)), kpc (the
# tools and their pages) and the drop-in of the build's platform (libkpc-hiprtc1; in an
# NVIDIA build, -DKPC_PLATFORM=nvidia, libkpc-nvrtc1). CPack's DEB generator makes them
# (cmake/packaging.cmake says which file goes where) in a tree of their own, with
# Debian's build flags (dpkg-buildflags, hardening on); their dependencies on Debian's
# packages come from the binaries (dpkg-shlibdeps). Then lintian checks them: an error
# fails the run; the warnings it keeps are listed, with why, in docs/packaging.md.
#
# usage: scripts/package.sh [--build-dir DIR] [--no-lintian] [-h|--help] [CMAKE-ARGS...]
#   --build-dir DIR  the tree to build in (default build-deb); the packages land in DIR/deb
#   --no-lintian     build only
#   CMAKE-ARGS       more for cmake's configure, e.g. -DKPC_PLATFORM=nvidia
# Prints the path of each package, then lintian's tags. Needs what scripts/setup.sh
# installs for the build, and dpkg-dev and lintian (scripts/test.sh installs both).
# Install them with `apt-get install ./build-deb/deb/*.deb` (apt pulls in what they need);
# `apt-get purge kpc libkpc-dev libkpc1 libkpc-hiprtc1` removes them.
set -euo pipefail
cd "$(dirname "$0")/.."

build=build-deb lintian=1 cmake_args=()
while (($#)); do
  case $1 in
    --build-dir) build=$2; shift ;;
    --no-lintian) lintian=0 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -D*) cmake_args+=("$1") ;;
    *) echo "package: unknown argument '$1' (see scripts/package.sh --help)" >&2; exit 2 ;;
  esac
  shift
done

need=()
command -v dpkg-shlibdeps >/dev/null || need+=(dpkg-dev)
((lintian == 0)) || command -v lintian >/dev/null || need+=(lintian)
if ((${#need[@]})); then
  echo "package: missing ${need[*]}: apt-get install --no-install-recommends ${need[*]}" >&2
  exit 1
fi

# Debian's flags for a package build: optimisation, hardening (fortify, stack protector,
# relro, bind-now), no build path in the binaries. CMake reads CFLAGS and LDFLAGS, not
# CPPFLAGS: the preprocessor's go with CFLAGS.
export DEB_BUILD_MAINT_OPTIONS=hardening=+all
eval "$(dpkg-buildflags --export=sh)"
export CFLAGS="$CFLAGS $CPPFLAGS"

commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo "")
date=$(git log -1 --format=%aD 2>/dev/null || date -R)
rm -rf "$build/deb"
cmake -S . -B "$build" -DKPC_DEB=ON -DCMAKE_INSTALL_PREFIX=/usr -DCMAKE_BUILD_TYPE=None \
  -DKPC_BUILD_TESTS=OFF -DKPC_BUILD_BENCH=OFF -DKPC_DEB_COMMIT="$commit" -DKPC_DEB_DATE="$date" \
  "${cmake_args[@]}" >"$build.log" 2>&1 ||
  { tail -n 40 "$build.log" >&2; echo "package: configure failed (log: $build.log)" >&2; exit 1; }
{ cmake --build "$build" -j"$(nproc)" && (cd "$build" && cpack -G DEB); } >>"$build.log" 2>&1 ||
  { tail -n 40 "$build.log" >&2; echo "package: build failed (log: $build.log)" >&2; exit 1; }
rm -f "$build.log"
ls "$build"/deb/*.deb
((lintian)) || exit 0
# --fail-on error: a warning is reported, not fatal; each kept one is in docs/packaging.md
lintian --fail-on error --tag-display-limit 0 "$build"/deb/*.deb
