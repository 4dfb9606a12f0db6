#!/usr/bin/env bash
# bench-device.sh - kpc's benchmarks on a many-core machine.
#
# Written for the 16-core machine lent through the device tool (Ubuntu 24.04, CUDA 13, no
# ROCm, no network): run it there from the repository root. It builds a Release tree in
# build-device/ and runs the benchmarks that make sense there, writing what
# scripts/bench.sh --render needs into $OUT (default tests/bench/results/device/):
#   rows.tsv (the rows), machine.txt, command.txt, section.txt, date.txt, log.txt. Back
#   here, write the commit that ran into commit.txt beside them.
# Back here: scripts/bench.sh --render <that folder> prints the table, writes
# tests/bench/results/bench-device.json and the "device" section of docs/benchmarks.md.
#
# The compiler: with CUDA's nvrtc.h and src/platform/nvidia.c present it builds the
# NVIDIA platform and the storm compiles real sources with NVRTC (no global lock: the
# processes compile in parallel); otherwise the AMD platform (headers only: it loads
# hipRTC lazily) and the storm runs on the fake platform (--fake-ms, a compile that burns
# CPU for as long as a real one here). Missing build dependencies (pkg-config, libbsd,
# libxxhash, cJSON for the kpc tool) are taken from the Debian packages in .carry/debs,
# unpacked with dpkg -x under /tmp/kpc-deps, never over /.
#
# The cluster tier's remote-hit rows (bench_cluster --hits-only) need hiredis, libsodium and
# redis-server, also taken from .carry/debs where missing; their ext4 rows use
# $KPC_BENCH_TMP when /tmp is not on ext4 there.
#
# usage: scripts/bench-device.sh [--quick] [--procs 2,8,16,32,64,128] [--depth D]
#                                [--fake-ms MS]
#                                [--only hit,xproc,storm,index,disk,manifest,cluster,nvrtc]
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=${OUT:-$root/tests/bench/results/device}
mkdir -p "$out"
exec > >(tee "$out/log.txt") 2>&1

quick=0 procs=2,8,16,32,64,128 depth=190 fake_ms=170 only=""
args="$*"
while (($#)); do
  case $1 in
    --quick) quick=1 ;;
    --procs) procs=$2; shift ;;
    --depth) depth=$2; shift ;;
    --fake-ms) fake_ms=$2; shift ;;
    --only) only=$2; shift ;;
    *) echo "bench-device.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
want() { [ -z "$only" ] || [[ ",$only," == *",$1,"* ]]; }

# ---- build dependencies from .carry/debs, each only where the machine lacks it --------
. scripts/device-deps.sh
deps=/tmp/kpc-deps
kpc_deps_unpack_missing .carry/debs

platform=amd
cmake_extra=()
if [ -f src/platform/nvidia.c ] && [ -f /usr/local/cuda/include/nvrtc.h ]; then
  platform=nvidia
else
  # the AMD platform needs HIP's and comgr's headers to build, none of its libraries
  if [ ! -f /opt/rocm/include/hip/hiprtc.h ] && [ ! -f /usr/include/hip/hiprtc.h ]; then
    kpc_deps_unpack hip libamdhip64-dev libamd-comgr-dev libhsa-runtime-dev
    cmake_extra+=(-DHIP_INCLUDE_DIR="$deps/hip/usr/include" -DCOMGR_INCLUDE_DIR="$deps/hip/usr/include")
  fi
fi
echo "bench-device: platform $platform; $(nproc) cores; $(grep -m1 '^model name' /proc/cpuinfo)"
build=build-device
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DKPC_BUILD_TESTS=OFF -DKPC_BUILD_BENCH=ON -DKPC_BUILD_MAN=OFF \
  -DKPC_WERROR=OFF -DKPC_PLATFORM="$platform" "${cmake_extra[@]}" >/dev/null
cmake --build "$build" -j"$(nproc)" >/dev/null
bin=$root/$build/bench

unset KPC_CACHE_DIR KPC_DISABLE KPC_CACHE_MAX_SIZE KPC_MEM_MAX_PROGRAMS KPC_SHM_ENTRIES
export KPC_LOG=error
export KPC_BENCH_ROWS=$out/rows.tsv
: >"$KPC_BENCH_ROWS"
storm_args=(--procs "$procs" --k 16 --tag _16core)
if [ "$platform" = nvidia ]; then
  storm_args+=(--depth "$depth")
else
  storm_args+=(--fake-ms "$fake_ms")
fi
# a benchmark that fails (or runs past 300 s) is reported and the others still run
failed=()
step() {
  local name=$1 t0=$SECONDS; shift
  echo "bench-device: == $name: $*"
  timeout 300 "$@" || { echo "bench-device: == $name FAILED (exit $?)"; failed+=("$name"); }
  echo "bench-device: == $name: $((SECONDS - t0)) s"
}
if ((quick)); then
  want hit && step hit "$bin/bench_hit" --rounds 5 --seconds 0.1
  want storm && step storm "$bin/bench_storm" "${storm_args[@]}" --repeats 1 --noindex-max 16
else
  # the two figures held against a floor at the goal's edge take more turns here than
  # bench.sh's default: one run of 21 paired rounds (hit) or 11 turns (manifest) moved by
  # 0.1x and 7 us from the median of the same machine's alternated runs
  want hit && step hit "$bin/bench_hit" --rounds 61
  want xproc && step xproc "$bin/bench_xproc" $([ "$platform" = nvidia ] || echo --fake)
  want storm && step storm "$bin/bench_storm" "${storm_args[@]}" --repeats 3 --noindex-max 128
  want index && step index "$bin/bench_index"
  want disk && step disk "$bin/bench_disk" --files 100000 --runs 3
  want manifest && step manifest "$bin/bench_manifest" --runs 41
  want cluster && [ -x "$bin/bench_cluster" ] && step cluster "$bin/bench_cluster" --hits-only --runs 25
fi
# figure 10: kpc beside NVRTC's own cache (built on the NVIDIA platform only)
if want nvrtc && [ -x "$bin/bench_nvrtc_cache" ]; then
  step nvrtc "$bin/bench_nvrtc_cache" --k 8 --depth "$depth" --procs 16
fi

cpu=$(grep -m1 '^model name' /proc/cpuinfo | sed 's/^[^:]*: *//')
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || true)
os=$(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME")
compiler="the fake platform (each compile burns ${fake_ms} ms of CPU)"
[ "$platform" = nvidia ] && compiler="NVRTC $(ls /usr/local/cuda/lib64/libnvrtc.so.* 2>/dev/null | head -1 | sed 's/.*\.so\.//') (platform nvidia), storm sources of template depth $depth"
echo "$(nproc) cores ($cpu), $(awk '/^MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo), $os, Linux $(uname -r)${gpu:+, $gpu}: the machine lent through the device tool; compiler: $compiler" >"$out/machine.txt"
echo "scripts/bench-device.sh${args:+ $args}" >"$out/command.txt"
echo device >"$out/section.txt"
# the commit is not asked of git here: the device tool's copy of the tree carries a .git
# whose HEAD is not the tree's (it named 8a31744 for 2f7b2aa); write commit.txt by hand
date -u +%Y-%m-%dT%H:%MZ >"$out/date.txt"
echo "bench-device: done; rows in $out/rows.tsv"
if ((${#failed[@]})); then
  echo "bench-device: failed: ${failed[*]}"
  exit 1
fi
