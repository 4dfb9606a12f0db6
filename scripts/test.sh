#!/usr/bin/env bash
# test.sh - every test: the suite as built, again under AddressSanitizer and
# UndefinedBehaviorSanitizer, the threaded tests under ThreadSanitizer, and the NVIDIA
# platform build where CUDA is installed. Exits non-zero if anything fails.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
scripts/setup.sh

# the tests make their own cache dirs; keep the user's cache out of it
export KPC_LOG=${KPC_LOG:-error}
unset KPC_CACHE_DIR KPC_DISABLE KPC_CACHE_MAX_SIZE KPC_MEM_MAX_PROGRAMS KPC_SHM_ENTRIES

run_ctest() { # dir [ctest args...]
  local dir=$1; shift
  (cd "$dir" && ctest --output-on-failure --timeout 600 -j"$jobs" "$@")
}

echo "== build/: the whole suite"
run_ctest build

echo "== build-asan/: AddressSanitizer + UndefinedBehaviorSanitizer"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DKPC_SANITIZE=address,undefined -DKPC_BUILD_BENCH=OFF >/dev/null
cmake --build build-asan -j"$jobs" >/dev/null
# use_sigaltstack=0: LLVM inside comgr replaces a thread's alternate signal stack, and
# ASan then fails to unmap its own at thread exit. Leak checking is opt-in
# (KPC_LEAK_CHECK=1): on some kernels LeakSanitizer's tracer thread itself crashes while it
# stops hipRTC's threads, failing tests that leak nothing. With it on, leaks inside the
# ROCm libraries are suppressed (tests/lsan.supp); ours fail the run.
ASAN_OPTIONS=detect_leaks=${KPC_LEAK_CHECK:-0}:abort_on_error=1:use_sigaltstack=0 \
LSAN_OPTIONS=suppressions=$PWD/tests/lsan.supp:print_suppressions=0 \
UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  run_ctest build-asan -LE "gpu|install"

echo "== build-tsan/: ThreadSanitizer on the threaded tests"
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=Debug -DKPC_SANITIZE=thread -DKPC_BUILD_BENCH=OFF >/dev/null
cmake --build build-tsan -j"$jobs" >/dev/null
TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 run_ctest build-tsan -L threads

if [ -f /usr/local/cuda/include/nvrtc.h ] && [ -x scripts/test-nvidia.sh ]; then
  echo "== build-nvidia/: the NVIDIA platform (NVRTC + CUDA driver), compile-only here"
  scripts/test-nvidia.sh
fi

echo "== build-fuzz/: libFuzzer on the record and segment parsers (clang; ${KPC_FUZZ_SECONDS:-20} s each)"
scripts/fuzz.sh
