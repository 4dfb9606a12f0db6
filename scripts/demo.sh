#!/usr/bin/env bash
# demo.sh - the main job: compile the example kernels through the cache twice (built, then
# hit, each pass in a new process), use the library from an application, and print the
# host-wide stats and the cached objects.
#
# The demo uses its own cache directory, build/demo-cache, always: it never reads, clears
# or resets the cache of KPC_CACHE_DIR or its host index. No GPU is needed: it compiles for
# a named target (KPC_DEMO_TARGET, default gfx90a). At the end it removes its own host index
# from /dev/shm; the objects stay in build/demo-cache.
#
# usage: scripts/demo.sh [-v] [-h|--help]
#   -v          show everything: the package installation, the build, the library's log
#   -h, --help  this text; runs nothing
set -euo pipefail
cd "$(dirname "$0")/.."
verbose=()
while (($#)); do
  case $1 in
    -v) verbose=(-v) ;;
    -h|--help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "demo: unknown argument '$1' (usage: scripts/demo.sh [-v] [-h|--help])" >&2; exit 2 ;;
  esac
  shift
done

# KPC_DEMO_NO_SETUP=1: the build exists already (the demo's own test uses it)
[ -n "${KPC_DEMO_NO_SETUP:-}" ] || scripts/setup.sh "${verbose[@]}"
build=${KPC_BUILD_DIR:-build}
kpc=$build/kpc
cache=${KPC_DEMO_DIR:-$PWD/$build/demo-cache}
target=${KPC_DEMO_TARGET:-gfx90a}

# the demo's own cache and settings only: whatever the user's environment says
unset KPC_DISABLE KPC_CACHE_MAX_SIZE KPC_MEM_MAX_PROGRAMS KPC_SHM_ENTRIES KPC_SHM_LOCK_TIMEOUT_MS \
  KPC_BUILD_WAIT_MAX_MS
export KPC_CACHE_DIR=$cache
if ((${#verbose[@]})); then export KPC_LOG=info; else export KPC_LOG=error; fi

# start cold so the first pass really compiles: the demo's index and objects only
"$build/kpc-shm-reset" --force --cache-dir "$cache" >/dev/null
rm -rf "$cache"
trap '"$build/kpc-shm-reset" --force --cache-dir "$cache" >/dev/null 2>&1 || true' EXIT

compile_examples() {
  "$kpc" compile --target "$target" examples/saxpy.hip examples/stencil.hip examples/reduce.hip
  "$kpc" compile --target "$target" --name-expr 'scale<float>' --name-expr 'scale<double>' examples/scale.hip
}
echo "== first pass: a cold cache builds each kernel (target $target, no GPU needed)"
echo "   cache: $cache"
compile_examples
echo
echo "== second pass: a new process gets every code object from the cache"
compile_examples
echo
echo "== the library in an application (examples/kpc_example.c): the first get comes from"
echo "   the host cache the passes above filled, the next two from the process's own map"
"$build/examples/kpc_example" "$target" examples/saxpy.hip
echo
echo "== kpc stats: the host index's counters (shared by every process above)"
"$kpc" stats
echo
echo "== kpc ls: the objects on disk (file size = a record header + the code object)"
"$kpc" ls
echo
echo "The objects stay in $cache; the demo removed its host index from /dev/shm."
echo "Next: build/kpc --help, man -l $build/man/man1/kpc.1, scripts/test.sh"
