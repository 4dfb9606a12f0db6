#!/usr/bin/env bash
# gpu-dropin.sh - the drop-in libkpc-nvrtc on a machine with an NVIDIA GPU:
#   1. build the NVIDIA platform's drop-ins and run their suite (fake NVRTC, real NVRTC);
#   2. tests/dropin/cuda_app.c (NVRTC + the CUDA driver API, no kpc in its source):
#      without kpc, then under LD_PRELOAD cold and warm, linked with -lkpc-nvrtc, and
#      through the libnvrtc.so.N shim directory; every element checked, cubins compared;
#   3. PyTorch's jiterator kernels (tests/dropin/torch_jiterator.py) with PyTorch's own
#      kernel cache off (USE_PYTORCH_KERNEL_CACHE=0): without kpc, then twice through the
#      shim, each of three ways to put it in front of PyTorch's NVRTC (below); results
#      compared bit for bit, the second run's kernels from kpc (KPC_DROPIN_STATS, kpc stats).
# docs/gpu-run.md records a run. Dependencies as gpu-run.sh takes them (device-deps.sh).
# usage: scripts/gpu-dropin.sh [LOG_DIR]   Exits non-zero if a step failed.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-${OUT:-/tmp/kpc-gpu-dropin}}
mkdir -p "$out"
exec > >(tee "$out/gpu-dropin.log") 2>&1
jobs=$(nproc)
build=${KPC_GPU_BUILD_DIR:-build-gpu-dropin}
debs=${KPC_GPU_DEBS:-.carry/debs}
cuda=${CUDA_HOME:-/usr/local/cuda}
py=${KPC_TORCH_PYTHON:-/opt/torch/.venv/bin/python}
tmp=$(mktemp -d)
failed=()
step() { echo; echo "== $*"; }
check() {
  "${@:2}"
  local rc=$?
  if [ $rc -ne 0 ]; then failed+=("$1 (exit $rc)"); echo "!! $1 failed with exit $rc"; fi
  return 0
}
ms_since() { echo "$(( ($(date +%s%N) - $1) / 1000000 ))"; }

step "machine"
date -u +%Y-%m-%dT%H:%M:%SZ
nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader || echo "no nvidia-smi"
ls "$cuda"/lib64/libnvrtc.so.* 2>/dev/null | head -2
"$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1 | tail -1

step "build dependencies"
. scripts/device-deps.sh
check "build dependencies" kpc_deps_unpack_missing "$debs"

step "build the drop-ins ($build, KPC_PLATFORM=nvidia)"
check configure cmake -S . -B "$build" -DKPC_PLATFORM=nvidia -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKPC_BUILD_MAN=OFF \
  -DKPC_BUILD_BENCH=OFF -DKPC_WERROR=OFF >/dev/null
check build bash -c "cmake --build '$build' -j$jobs --target kpc_nvrtc kpc_nvrtc_shim13 kpc_nvrtc_shim12 \
  kpc_tool kpc-shm-reset nvrtc_app nvrtc_app_dl nvrtc_app_kpc fake_nvrtc 2>&1 | tee '$out/build.log' | grep -E 'warning|error'; exit \${PIPESTATUS[0]}"
echo "compiler warnings: $(grep -c 'warning:' "$out/build.log" 2>/dev/null)"
shim=$PWD/$build/nvrtc-shim
real_nvrtc=$(ls "$cuda"/lib64/libnvrtc.so.1[0-9] 2>/dev/null | head -1)
echo "real NVRTC: $real_nvrtc; NVRTC calls it exports that the shim does not:"
comm -23 <(nm -D --defined-only "$real_nvrtc" | awk '$2=="T"{print $3}' | sed 's/@.*//' | sort -u) \
  <(nm -D --defined-only "$shim/libnvrtc.so.13" | awk '$2=="T"{print $3}' | sed 's/@.*//' | sort -u) | tr '\n' ' '
echo

step "the drop-in suite (fake NVRTC; real NVRTC through the shim)"
check dropin_nvrtc bash -c "cd '$build' && ctest -R dropin_nvrtc --output-on-failure -V 2>&1 | grep -E '^2: (==|real|preload|FAIL)|tests passed|Failed'"

export KPC_LOG=error
unset KPC_CACHE_DIR KPC_DISABLE KPC_REAL_NVRTC
stats_line() { [ -f "$1" ] && cat "$1" || echo "(no drop-in stats: kpc was not reached)"; }

step "an NVRTC + CUDA driver application: a kernel built through the drop-in"
app=$tmp/cuda_app app_kpc=$tmp/cuda_app_kpc
check "build cuda_app" cc -O2 -I"$cuda/include" tests/dropin/cuda_app.c -L"$cuda/lib64" -lnvrtc \
  -L"$cuda/lib64/stubs" -lcuda -o "$app"
check "build cuda_app_kpc" cc -O2 -I"$cuda/include" tests/dropin/cuda_app.c -L"$build" -lkpc-nvrtc \
  -Wl,-rpath,"$PWD/$build" -L"$cuda/lib64" -lnvrtc -L"$cuda/lib64/stubs" -lcuda -o "$app_kpc"
export KPC_CACHE_DIR=$tmp/cache-cuda
cuda_run() { # name env...
  local name=$1; shift
  echo "-- $name"
  check "cuda_app $name" env KPC_DROPIN_STATS="$tmp/$name.stats" "$@" "$tmp/$name.cubin"
  echo "   $(stats_line "$tmp/$name.stats")"
}
cuda_run reference "$app"
cuda_run preload-cold env LD_PRELOAD="$PWD/$build/libkpc-nvrtc.so" "$app"
cuda_run preload-warm env LD_PRELOAD="$PWD/$build/libkpc-nvrtc.so" "$app"
cuda_run linked-warm "$app_kpc"
cuda_run shim-warm env LD_LIBRARY_PATH="$shim:$cuda/lib64:${LD_LIBRARY_PATH:-}" KPC_REAL_NVRTC="$real_nvrtc" "$app"
for r in preload-cold preload-warm linked-warm shim-warm; do
  check "cubin $r = reference" cmp "$tmp/reference.cubin" "$tmp/$r.cubin"
done
grep -q "builds=1 " "$tmp/preload-cold.stats" 2>/dev/null || check "cold run built once" false
for r in preload-warm linked-warm shim-warm; do
  grep -q "builds=0 .*disk_hits=1 " "$tmp/$r.stats" 2>/dev/null || check "$r: from the cache" false
done
"$build/kpc" stats | grep -E '^(lookups|hits|builds) '
"$build/kpc-shm-reset" --cache-dir "$KPC_CACHE_DIR" --force >/dev/null

step "PyTorch jiterator, its kernel cache off (USE_PYTORCH_KERNEL_CACHE=0)"
export USE_PYTORCH_KERNEL_CACHE=0
tmajor=$("$py" -c 'import torch; print(torch.version.cuda.split(".")[0])' 2>/dev/null)
venv_nvrtc=$(find "$(dirname "$(dirname "$py")")" -name "libnvrtc.so.$tmajor*" 2>/dev/null | grep -v builtins | head -1)
torch_real=${venv_nvrtc:-$(ls "$cuda"/lib64/libnvrtc.so."$tmajor" 2>/dev/null)}
echo "torch's CUDA $tmajor; its NVRTC: ${venv_nvrtc:-none in the venv}; the real one for kpc: $torch_real"
torch_run() { # name env...
  local name=$1; shift
  echo "-- $name"
  local t0
  t0=$(date +%s%N)
  check "torch $name" env KPC_DROPIN_STATS="$tmp/$name.stats" "$@" "$py" tests/dropin/torch_jiterator.py \
    "$tmp/$name.pt" 2>"$tmp/$name.err"
  echo "   process wall time $(ms_since "$t0") ms"
  [ -f "$tmp/$name.pt" ] || tail -15 "$tmp/$name.err"
  grep -E "not keyed|forwarding|error" "$tmp/$name.err" | sort | uniq -c | head -5
  echo "   $(stats_line "$tmp/$name.stats")"
}
same_pt() {
  "$py" -c "
import sys, torch
a, b = torch.load(sys.argv[1]), torch.load(sys.argv[2])
assert a.keys() == b.keys(), 'different kernels'
bad = [k for k in a if not torch.equal(a[k], b[k])]
assert not bad, bad
print('   results equal bit for bit:', len(a), 'tensors')" "$tmp/$1.pt" "$tmp/$2.pt"
}
torch_run torch-reference
# Three ways to put the shim in front of PyTorch's NVRTC:
#   dir:     the shim directory first on LD_LIBRARY_PATH (dlopen by soname);
#   preload: the shim itself in LD_PRELOAD (it then answers every later dlopen of its soname);
#   site:    a directory first on PYTHONPATH holding nvidia/cuNN/lib/libnvrtc.so.NN -> the
#            shim: PyTorch's __init__ preloads NVRTC by path, from the first sys.path entry
#            that has it, and its C++ side then uses that library.
echo "PyTorch's own NVRTC loading (torch/__init__.py):"
grep -n "nvrtc" "$(dirname "$(dirname "$py")")"/lib/python3*/site-packages/torch/__init__.py | head -8
served=""
site=$tmp/kpc-site
if [ -n "$venv_nvrtc" ]; then
  rel=${venv_nvrtc#*/site-packages/}
  mkdir -p "$site/$(dirname "$rel")"
  ln -s "$shim/libnvrtc.so.$tmajor" "$site/$rel"
fi
for mode in dir preload site; do
  export KPC_CACHE_DIR=$tmp/cache-torch-$mode
  case $mode in
    dir) menv=(LD_LIBRARY_PATH="$shim:${LD_LIBRARY_PATH:-}") ;;
    preload) menv=(LD_PRELOAD="$shim/libnvrtc.so.$tmajor") ;;
    site) [ -n "$venv_nvrtc" ] || continue; menv=(PYTHONPATH="$site") ;;
  esac
  menv+=(KPC_REAL_NVRTC="$torch_real" KPC_LOG=info)
  torch_run "torch-$mode-cold" env "${menv[@]}"
  torch_run "torch-$mode-warm" env "${menv[@]}"
  check "torch $mode cold = reference" same_pt torch-reference "torch-$mode-cold"
  check "torch $mode warm = reference" same_pt torch-reference "torch-$mode-warm"
  "$build/kpc" stats | grep -E '^(lookups|hits|builds|build failures) '
  "$build/kpc" ls | head -10
  if grep -q "builds=0 " "$tmp/torch-$mode-warm.stats" 2>/dev/null && ! grep -q " kpc=0 " "$tmp/torch-$mode-warm.stats"; then
    served="$served $mode"
    echo "PyTorch's kernels came from kpc ($mode)"
  else
    echo "the shim ($mode) did not serve PyTorch's compiles"
  fi
done
echo "ways that served PyTorch:${served:- none}"
[ -n "$served" ] || check "a warm PyTorch run answered from kpc" false
for c in "$tmp"/cache-*; do "$build/kpc-shm-reset" --cache-dir "$c" --force >/dev/null 2>&1; done

step "figures"
for f in "$tmp"/*.stats; do echo "  $(basename "$f" .stats): $(cat "$f")"; done

step "result"
rm -rf "$tmp"
if ((${#failed[@]})); then
  printf 'FAILED: %s\n' "${failed[@]}"
  exit 1
fi
echo "PASSED: every step"
