#!/usr/bin/env bash
# demo.sh - the main job: compile the example kernels through the cache twice (first
# built, then hit), in new processes each time, and print the host-wide stats.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
kpc=build/kpc
export KPC_CACHE_DIR=${KPC_CACHE_DIR:-$PWD/build/demo-cache}
target=${KPC_DEMO_TARGET:-gfx90a}

# start cold so the first pass really compiles
build/kpc-shm-reset --force >/dev/null 2>&1 || true
$kpc clear >/dev/null

compile_examples() {
  $kpc compile --target "$target" examples/saxpy.hip examples/stencil.hip examples/reduce.hip
  $kpc compile --target "$target" --name-expr 'scale<float>' --name-expr 'scale<double>' examples/scale.hip
}
echo "== first pass: a cold cache compiles each kernel (cache: $KPC_CACHE_DIR, target: $target)"
compile_examples
echo
echo "== second pass: a new process gets every code object from the cache"
compile_examples
echo
echo "== the library itself: build, then in-memory and cross-process hits"
build/examples/kpc_example "$target" examples/saxpy.hip
echo
echo "== kpc stats"
$kpc stats
echo
$kpc ls
