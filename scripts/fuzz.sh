#!/usr/bin/env bash
# fuzz.sh - build the libFuzzer targets with clang (build-fuzz/: ASan + UBSan + coverage)
# and run each for a bounded time on its corpus (tests/fuzz/corpus/<name>/, plus the
# seeds the target writes from the library's own writer at start). Exits non-zero when a
# target finds a crash, a leak, a timeout or a wrong answer; the input is kept under
# build-fuzz/artifacts/. The compiler: the release's clang (`clang`, Debian's package of
# that name, with libclang-rt-dev for libFuzzer: clang 14 on Debian 12, 19 on 13, 21 on
# sid), or KPC_FUZZ_CC; skipped (exit 0) without it. Used by scripts/test.sh.
#   KPC_FUZZ_CC       the clang to build with (default: clang)
#   KPC_FUZZ_SECONDS  seconds per target (default 15)
#   KPC_FUZZ_MERGE=1  merge what the run found back into tests/fuzz/corpus/ (minimized)
set -euo pipefail
cd "$(dirname "$0")/.."
cc=$(command -v "${KPC_FUZZ_CC:-clang}" || true)
if [ -z "$cc" ]; then
  echo "fuzz: ${KPC_FUZZ_CC:-clang} not found: skipped"
  exit 0
fi
echo "fuzz: $("$cc" --version | head -n 1)"
seconds=${KPC_FUZZ_SECONDS:-15}
CC=$cc cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKPC_FUZZ=ON \
  -DKPC_SANITIZE=address,undefined -DKPC_BUILD_TESTS=OFF -DKPC_BUILD_BENCH=OFF >/dev/null
cmake --build build-fuzz -j"$(nproc)" --target fuzz_record fuzz_segment fuzz_manifest >/dev/null
mkdir -p build-fuzz/artifacts
# tmpfs when there is one: the record target writes a file per input
work=$(mktemp -d -p /dev/shm kpc-fuzz.XXXXXX 2>/dev/null || mktemp -d)
trap 'rm -rf "$work"' EXIT
rc=0
for name in record segment manifest; do
  mkdir -p "$work/$name/corpus" "$work/$name/tmp"
  cp tests/fuzz/corpus/$name/* "$work/$name/corpus/"
  # TMPDIR: the target's scratch cache dir lives (and dies) in the work dir
  # the segment target also locks and walks what it attached, with bounds of a millisecond
  # (a fuzzed lock word or a fuzzed live builder must cost 1 ms, not the defaults' 5 s)
  if ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
     KPC_FUZZ_SEGMENT_DEEP=1 KPC_SHM_LOCK_TIMEOUT_MS=1 KPC_BUILD_WAIT_MAX_MS=1 \
     TMPDIR="$work/$name/tmp" KPC_FUZZ_SEED_DIR="$work/$name/corpus" \
     build-fuzz/tests/fuzz/fuzz_$name -max_total_time="$seconds" -timeout=10 -print_final_stats=1 \
       -artifact_prefix="$PWD/build-fuzz/artifacts/$name-" "$work/$name/corpus" >"$work/$name.log" 2>&1; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/$name.log")
    echo "fuzz_$name: $runs executions in ${seconds} s, nothing found"
  else
    rc=1
    echo "fuzz_$name: FAILED (input under build-fuzz/artifacts/):"
    grep -v '^INFO\|^#' "$work/$name.log" | tail -40
  fi
  if [ "${KPC_FUZZ_MERGE:-0}" = 1 ]; then
    build-fuzz/tests/fuzz/fuzz_$name -merge=1 tests/fuzz/corpus/$name "$work/$name/corpus" >/dev/null 2>&1
  fi
done
exit $rc
