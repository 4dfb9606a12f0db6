#!/usr/bin/env bash
# setup.sh - install what kpc needs to build and test on Debian 12 (only what is missing),
# then configure and build into build/. Safe to run again. Used by demo.sh and test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake pkg-config
  libbsd-dev libxxhash-dev libcjson-dev libzstd-dev check
  libamdhip64-dev libamd-comgr-dev rocm-device-libs hipcc
  openmpi-bin libopenmpi-dev
  libhiredis-dev libsodium-dev redis-server util-linux
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

build=${KPC_BUILD_DIR:-build}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo ${KPC_CMAKE_ARGS:-} >/dev/null
cmake --build "$build" -j"$(nproc)"
