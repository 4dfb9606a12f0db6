#!/usr/bin/env bash
# test-nvidia.sh - build the NVIDIA platform (NVRTC + CUDA driver API, -DKPC_PLATFORM=nvidia)
# into build-nvidia/ and run every test that makes sense there without a GPU: core, store,
# tool, index, install, the NVRTC platform suite, and the GPU suite, which skips itself
# where there is no GPU and runs where there is one. The MPI storm is left to the amd
# build (it tests the host index, which is the same code). NVRTC needs no GPU, so CI runs
# this; scripts/test.sh calls it when /usr/local/cuda/include/nvrtc.h exists.
#
# Needs what scripts/setup.sh installs (cmake, pkg-config, libbsd, libxxhash, cJSON,
# Check) and CUDA 12 or 13 at /usr/local/cuda. Exits non-zero if anything fails.
# usage: scripts/test-nvidia.sh [extra ctest arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
build=${KPC_NVIDIA_BUILD_DIR:-build-nvidia}

if [ ! -f /usr/local/cuda/include/nvrtc.h ] && [ ! -f "${CUDA_HOME:-/nonexistent}/include/nvrtc.h" ]; then
  echo "test-nvidia: no CUDA (nvrtc.h in /usr/local/cuda/include or \$CUDA_HOME/include): nothing to test" >&2
  exit 1
fi
cuda_args=()
if [ -n "${CUDA_HOME:-}" ] && [ -f "$CUDA_HOME/include/nvrtc.h" ]; then
  cuda_args=(-DCUDA_INCLUDE_DIR="$CUDA_HOME/include")
fi

# the tests make their own cache dirs; keep the user's cache and settings out of it
export KPC_LOG=${KPC_LOG:-error}
unset KPC_CACHE_DIR KPC_DISABLE KPC_CACHE_MAX_SIZE KPC_MEM_MAX_PROGRAMS KPC_SHM_ENTRIES

# the benchmarks are not tests: leave them to scripts/bench.sh
cmake -S . -B "$build" -DKPC_PLATFORM=nvidia -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DKPC_BUILD_BENCH=OFF "${cuda_args[@]}" >/dev/null
cmake --build "$build" -j"$jobs" >/dev/null
(cd "$build" && ctest --output-on-failure --timeout 600 -j"$jobs" -LE mpi "$@")
