#!/usr/bin/env bash
# check_nvidia_compiles.sh - the NVIDIA platform (src/platform/nvidia.c, and the NVIDIA
# parts of the tests) still compiles
# against the seams where CUDA is absent: compiled (not linked) with the project's warnings,
# against stub cuda.h/nvrtc.h that name only what it uses (tests/house/cuda-stub/). The
# real build and tests are scripts/test-nvidia.sh's, where CUDA is installed.
# usage: check_nvidia_compiles.sh SOURCE_DIR [CC]
set -euo pipefail
cd "$1"
root=$1 cc=${2:-cc}
for f in src/platform/nvidia.c tests/support*.c tests/*_support.c tests/chaos_worker.c tests/test_*.c; do
  # the comgr platform's own test: built only in that platform's tree, with its definitions
  [ "$f" = tests/test_comgr.c ] && continue
  "$cc" -std=c11 -Wall -Wextra -Werror -c -o /dev/null -DKPC_PLATFORM_NVIDIA=1 -DKPC_TEST_HOOKS=1 \
    -I"$root/tests/house/cuda-stub" -I"$root/src" -I"$root" -I"$root/include" -I"$root/tests" \
    $(pkg-config --cflags check) "$f"
done
echo "check_nvidia_compiles: the NVIDIA platform and its tests compile against the seams"
