#!/usr/bin/env bash
# gpu-run.sh - the end-to-end run on a machine with an NVIDIA GPU (issue #6): build the
# NVIDIA platform, run the suite, then the GPU suite with the GPU required (kernels
# launched and checked element by element, 16 processes on a cold cache, the stale-object
# bulwark, the figures), then the kpc tool on the GPU. docs/gpu-run.md records a run.
#
# The lent GPU machine has no network: where a build dependency is missing there, it is
# taken from Debian .deb files carried beside the tree (.carry/debs, fetched here with
# `apt-get download`, see docs/gpu-run.md) and unpacked with dpkg -x into a private prefix
# (scripts/device-deps.sh); nothing is installed into the system.
#
# usage: scripts/gpu-run.sh [LOG_DIR]   (default: $OUT, else /tmp/kpc-gpu-run)
# Exits non-zero if any step failed; every step runs regardless, so one log tells all.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-${OUT:-/tmp/kpc-gpu-run}}
mkdir -p "$out"
exec > >(tee "$out/gpu-run.log") 2>&1
jobs=$(nproc)
build=${KPC_GPU_BUILD_DIR:-build-gpu}
debs=${KPC_GPU_DEBS:-.carry/debs}
failed=()
step() { echo; echo "== $*"; }
check() { # name command...: run it, remember a failure
  "${@:2}"
  local rc=$?
  if [ $rc -ne 0 ]; then failed+=("$1 (exit $rc)"); echo "!! $1 failed with exit $rc"; fi
  return 0
}

step "machine"
date -u +%Y-%m-%dT%H:%M:%SZ
uname -srm
(. /etc/os-release && echo "$PRETTY_NAME")
echo "cores: $jobs"
nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv,noheader || echo "no nvidia-smi"
command -v nvcc >/dev/null && nvcc --version | tail -1
ls /usr/local/cuda/lib64/libnvrtc.so.* 2>/dev/null | head -2
cc --version | head -1
cmake --version | head -1

step "build dependencies (a module the system lacks comes from $debs: scripts/device-deps.sh)"
. scripts/device-deps.sh
check "build dependencies" kpc_deps_unpack_missing "$debs"

step "configure and build $build (KPC_PLATFORM=nvidia; warnings counted, not fatal: another compiler)"
check configure cmake -S . -B "$build" -DKPC_PLATFORM=nvidia -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKPC_BUILD_MAN=OFF \
  -DKPC_BUILD_BENCH=OFF -DKPC_WERROR=OFF
check build bash -c "cmake --build '$build' -j$jobs 2>&1 | tee '$out/build.log' | grep -E 'warning|error' ; exit \${PIPESTATUS[0]}"
echo "compiler warnings: $(grep -c 'warning:' "$out/build.log" 2>/dev/null)"

export KPC_LOG=${KPC_LOG:-error}
unset KPC_CACHE_DIR KPC_DISABLE KPC_CACHE_MAX_SIZE KPC_MEM_MAX_PROGRAMS KPC_SHM_ENTRIES

step "the suite on the GPU machine (core, store, tool, index, install, NVRTC platform)"
check ctest bash -c "cd '$build' && ctest --output-on-failure --timeout 600 -j$jobs -LE 'mpi|gpu'"

step "the GPU suite, GPU required (KPC_TEST_GPU_REQUIRED=1)"
check test_gpu bash -c "cd '$build' && KPC_TEST_GPU_REQUIRED=1 ctest -L gpu -V --timeout 600"

step "the kpc tool on the GPU (no --target: the first GPU's)"
tool=$build/kpc
export KPC_CACHE_DIR=$(mktemp -d)/cache
check "kpc compile (cold)" "$tool" compile examples/saxpy.hip examples/reduce.hip examples/stencil.hip
check "kpc compile (warm)" "$tool" compile examples/saxpy.hip examples/reduce.hip examples/stencil.hip
check "kpc compile (template)" "$tool" compile --name-expr 'scale<float>' examples/scale.hip
check "kpc compile (PTX)" "$tool" compile --target compute_90 -o "$KPC_CACHE_DIR/../saxpy.ptx" examples/saxpy.hip
head -12 "$KPC_CACHE_DIR/../saxpy.ptx"
check "kpc ls" "$tool" ls
check "kpc verify" "$tool" verify
check "kpc stats" "$tool" stats
"$build/kpc-shm-reset" --cache-dir "$KPC_CACHE_DIR" --force >/dev/null
rm -rf "$(dirname "$KPC_CACHE_DIR")"
unset KPC_CACHE_DIR

step "figures"
grep -h "figure:" "$out/gpu-run.log" | sed 's/^.*figure: /  /' | sort -u

step "result"
if ((${#failed[@]})); then
  printf 'FAILED: %s\n' "${failed[@]}"
  exit 1
fi
echo "PASSED: every step"
