#!/usr/bin/env bash
# test.sh - every test, in passes: the suite as built (plain), again under AddressSanitizer
# and UndefinedBehaviorSanitizer, the threaded tests under ThreadSanitizer, the NVIDIA
# platform build where CUDA is installed, the comgr platform build (HIP through comgr
# alone: its own tests) where comgr's header is installed, and the libFuzzer targets (scripts/fuzz.sh, the release's clang)
# for a bounded time. Then a check that no test left anything behind:
# a shared-memory segment, a file in /tmp, or a process. As root the tests run with a
# private, empty /tmp and /dev/shm (a mount namespace; a checkout under /tmp is carried
# into it), so whatever is there afterwards is theirs; elsewhere what of this user
# appeared in /tmp (kpc-*) and /dev/shm during the run counts. Ends with one verdict line
# over everything, which CI reads:
#   kpc tests: 590 passed, 9 skipped, 0 failed (plain, asan+ubsan, tsan, nvidia: skipped, comgr, fuzz)
# preceded by a line of each pass's wall and CPU seconds and one line per skip with its
# reason. The passes run in two lanes side by side (asan beside the others, in order;
# each pass's output is printed whole when it ends), since the suites mostly wait on the
# processes they start: KPC_TEST_LANES=1 runs them one after another.
# A skip is a test case that printed "CASE: skipped: REASON", a test that CTest reports
# skipped (it printed "skipped: REASON"), or a pass that could not run here; a skip that
# names no reason is a failure. Counted are the cases of the Check tests (what Check ran,
# less the skipped ones) and each other test as one. Exits non-zero if anything failed.
#
# Adding a pass: write pass_NAME (build what it needs, then run_ctest DIR [ctest args], or
# skip_pass "why") and add NAME to `passes` below.
#
# usage: scripts/test.sh [-v] [-h|--help]
#   -v          the set-up's full output
#   -h, --help  this text; runs nothing
# environment: KPC_TEST_PASSES="plain tsan" runs only those passes (the verdict names
# what ran); KPC_LEAK_CHECK=1 turns LeakSanitizer on in the asan pass; KPC_FUZZ_SECONDS
# the seconds per fuzz target (default 15); KPC_TEST_LANES=1 one pass at a time.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
jobs=$(nproc)
passes=(plain asan tsan nvidia comgr fuzz)
# KPC_TEST_PASSES="plain tsan": only those (a quick run; the verdict names what ran)
[ -z "${KPC_TEST_PASSES:-}" ] || read -r -a passes <<<"$KPC_TEST_PASSES"
declare -A pass_title=([plain]="plain" [asan]="asan+ubsan" [tsan]="tsan" [nvidia]="nvidia" [comgr]="comgr" [fuzz]="fuzz")

setup=1 verbose=()
while (($#)); do
  case $1 in
    -v) verbose=(-v) ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    --no-setup) setup=0 ;; # (internal: the re-run inside the private mount namespace)
    *) echo "test: unknown argument '$1' (usage: scripts/test.sh [-v] [-h|--help])" >&2; exit 2 ;;
  esac
  shift
done

# the test-only packages: Open MPI for the MPI start-up storm, man-db for `man kpc` in the
# install test, redis-server (and util-linux) for the cluster tier's tests, clang and its
# libFuzzer runtime for the fuzz pass: the release's own, the clang scripts/fuzz.sh uses
# (the packages clang and libclang-rt-dev name its default LLVM's: 14 on Debian 12, 19 on
# 13, 21 on sid); dpkg-dev and lintian for the package test, prometheus for promtool
# (test_tool_metrics)
fuzz_packages=(clang libclang-rt-dev)
if ((setup)); then
  scripts/setup.sh "${verbose[@]}" --also openmpi-bin libopenmpi-dev man-db redis-server util-linux \
      dpkg-dev lintian prometheus \
      "${fuzz_packages[@]}" || {
    echo "kpc tests: 0 passed, 0 skipped, 1 failed (set-up failed)"; exit 1; }
fi

# Run the rest in a private /tmp and /dev/shm where we may (root): see the header.
if [ -z "${KPC_TEST_PRIVATE:-}" ] && [ "$(id -u)" -eq 0 ] && command -v unshare >/dev/null &&
   unshare --mount --propagation private true 2>/dev/null; then
  exec env KPC_TEST_PRIVATE=1 unshare --mount --propagation private "$0" --no-setup "${verbose[@]}"
fi
private=0 private_tmp=0 keep_tmp=""
if [ "${KPC_TEST_PRIVATE:-}" = 1 ]; then
  mount -t tmpfs -o mode=1777 kpc-test-shm /dev/shm && private=1
  case $root/ in
    /tmp/*) # a checkout under /tmp: carry its top folder into the private /tmp
      keep_tmp=/tmp/$(cut -d/ -f3 <<<"$root")
      mount --bind /tmp /mnt && mount -t tmpfs -o mode=1777 kpc-test-tmp /tmp &&
        mkdir "$keep_tmp" && mount --bind "/mnt/${keep_tmp#/tmp/}" "$keep_tmp" && private_tmp=1 ;;
    *) mount -t tmpfs -o mode=1777 kpc-test-tmp /tmp && private_tmp=1 ;;
  esac
fi

# the tests make their own cache dirs; keep the user's cache and settings out of it
export KPC_LOG=${KPC_LOG:-error}
unset KPC_CACHE_DIR KPC_DISABLE KPC_CACHE_MAX_SIZE KPC_MEM_MAX_PROGRAMS KPC_SHM_ENTRIES \
  KPC_SHM_LOCK_TIMEOUT_MS KPC_BUILD_WAIT_MAX_MS
logs=$root/build/test-logs
mkdir -p "$logs"

total_passed=0 total_failed=0 total_skipped=0
summary=() skips=()

# What there is before the run, to tell what the run left.
# (without a private /dev/shm, only this user's segments: kpc-<uid>-...)
shm_mine="^kpc-"; ((private)) || shm_mine="^kpc-$(id -u)-"
shm_before=$(ls /dev/shm 2>/dev/null | grep "$shm_mine" | sort)
tmp_before=$(ls -d /tmp/* 2>/dev/null | grep -vx "$keep_tmp" | sort)

# Count a ctest run's results: its console log LOG says which tests failed and which CTest
# skipped; DIR's LastTest.log holds each test's output, with Check's "Checks: N, Failures:
# F, Errors: E" and the skip lines. count LOG DIR PASS
count() {
  local log=$1 dir=$2 pass=$3 line ctest_skipped kind name a b c
  line=$(grep -E '^[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+' "$log" | tail -n 1)
  if [ -z "$line" ] || [ ! -f "$dir/Testing/Temporary/LastTest.log" ]; then
    total_failed=$((total_failed + 1))
    summary+=("${pass_title[$pass]}: ctest did not finish")
    return
  fi
  ctest_skipped=" $(sed -n '/The following tests did not run:/,/^$/p' "$log" | grep -E '\(Skipped\)|\(Disabled\)' |
                    sed -E 's/^[[:space:]]*[0-9]+ - ([^ ]+) .*/\1/' | tr '\n' ' ')"
  # per test: "T name Passed|Failed checks bad" (checks -1: not a Check test), then one
  # "S name case reason" per skip line it printed ("CASE: skipped: WHY", or "skipped: WHY")
  local failed_before=$total_failed ctest_failed
  ctest_failed=$(sed -E 's/.* ([0-9]+) tests? failed.*/\1/' <<<"$line")
  while IFS=$'\037' read -r kind name a b c; do
    case $kind in
      S) local why=${b#"${b%%[![:space:]]*}"}
         if [[ $ctest_skipped == *" $name "* ]]; then
           [ -n "${test_reason[$name]:-}" ] || test_reason[$name]=${why:-"-"}
           continue
         fi
         if [ -z "$why" ]; then
           total_failed=$((total_failed + 1))
           skips+=("skipped: ${pass_title[$pass]} $name ${a:+$a }without a reason: a failure")
           continue
         fi
         test_case_skips[$name]=$((${test_case_skips[$name]:-0} + 1))
         total_skipped=$((total_skipped + 1))
         skips+=("skipped: ${pass_title[$pass]} $name${a:+ $a}: $why") ;;
      T) test_status[$name]=$a test_checks[$name]=$b test_bad[$name]=$c ;;
    esac
  done < <(awk '
    /^[0-9]+\/[0-9]+ Testing: / { name = $3; checks = -1; bad = 0; out = 0; next }
    /^Output:$/ { out = 1; getline; next }
    /^<end of output>$/ { out = 0; next }
    out && match($0, /[0-9]+%: Checks: [0-9]+, Failures: [0-9]+, Errors: [0-9]+/) {
      split(substr($0, RSTART, RLENGTH), f, /[:,] */); if (checks < 0) checks = 0
      checks += f[3]; bad += f[5] + f[7]; next }
    out && /^skipped:/ { r = $0; sub(/^skipped:/, "", r); printf "S\037%s\037\037%s\n", name, r; next }
    out && /^[^[:space:]:][^:]*: skipped:/ {
      c = $0; sub(/: skipped:.*$/, "", c); r = $0; sub(/^[^:]*: skipped:/, "", r)
      printf "S\037%s\037%s\037%s\n", name, c, r; next }
    /^Test (Passed|Failed)\.$/ { printf "T\037%s\037%s\037%d\037%d\n", name, ($2 == "Passed." ? "Passed" : "Failed"), checks, bad }
  ' "$dir/Testing/Temporary/LastTest.log")
  for name in "${!test_status[@]}"; do
    local cs=${test_case_skips[$name]:-0} checks=${test_checks[$name]} bad=${test_bad[$name]}
    if [[ $ctest_skipped == *" $name "* ]]; then
      if [ -z "${test_reason[$name]:-}" ] || [ "${test_reason[$name]}" = "-" ]; then
        total_failed=$((total_failed + 1))
        skips+=("skipped: ${pass_title[$pass]} $name without a reason (it printed no \"skipped: WHY\"): a failure")
      else
        total_skipped=$((total_skipped + 1))
        skips+=("skipped: ${pass_title[$pass]} $name: ${test_reason[$name]}")
      fi
    elif ((checks >= 0)); then
      # Check counts a skipped case as passed
      if [ "${test_status[$name]}" = Failed ] && ((bad == 0)); then bad=1; fi
      total_failed=$((total_failed + bad))
      local ok=$((checks - bad - cs)); ((ok > 0)) || ok=0
      total_passed=$((total_passed + ok))
    elif [ "${test_status[$name]}" = Failed ]; then
      total_failed=$((total_failed + 1))
    else
      total_passed=$((total_passed + 1))
    fi
  done
  # what CTest counts failed (a test that did not run, say) is failed here too
  ((total_failed - failed_before >= ctest_failed)) || total_failed=$((failed_before + ctest_failed))
  test_status=() test_checks=() test_bad=() test_case_skips=() test_reason=()
  summary+=("${pass_title[$pass]}")
}
declare -A test_status=() test_checks=() test_bad=() test_case_skips=() test_reason=()

# run_ctest DIR [ctest args...]: run the tests of a build tree, count them
run_ctest() {
  local dir=$1; shift
  local log=$logs/ctest-$current.log
  (cd "$dir" && ctest --output-on-failure --timeout 600 -j"$jobs" "$@") 2>&1 | tee "$log"
  count "$log" "$dir" "$current"
  rm -f "$log"
}

skip_pass() {
  summary+=("${pass_title[$current]}: skipped")
  total_skipped=$((total_skipped + 1))
  skips+=("skipped: the ${pass_title[$current]} pass: $1")
}

# build_tree DIR CMAKE-ARGS...: configure and build a tree quietly (its log on failure);
# build_targets, where set, names the targets to build (default: all)
build_tree() {
  local dir=$1; shift
  local log=$logs/build-$current.log
  if cmake -S . -B "$dir" "$@" >"$log" 2>&1 &&
     cmake --build "$dir" -j"$jobs" ${build_targets:+--target $build_targets} >>"$log" 2>&1; then
    rm -f "$log"; return 0
  fi
  tail -n 60 "$log"; rm -f "$log"
  total_failed=$((total_failed + 1))
  summary+=("${pass_title[$current]}: build failed")
  return 1
}

pass_plain() {
  echo "== build/: the whole suite"
  run_ctest build
}

pass_asan() {
  echo "== build-asan/: AddressSanitizer + UndefinedBehaviorSanitizer"
  build_tree build-asan -DCMAKE_BUILD_TYPE=Debug -DKPC_SANITIZE=address,undefined -DKPC_BUILD_BENCH=OFF || return 0
  # use_sigaltstack=0: LLVM inside comgr replaces a thread's alternate signal stack, and
  # ASan then fails to unmap its own at thread exit. Leak checking is opt-in
  # (KPC_LEAK_CHECK=1): on some kernels LeakSanitizer's tracer thread itself crashes while
  # it stops hipRTC's threads, failing tests that leak nothing. With it on, leaks inside
  # the ROCm libraries are suppressed (tests/lsan.supp); ours fail the run.
  ASAN_OPTIONS=detect_leaks=${KPC_LEAK_CHECK:-0}:abort_on_error=1:use_sigaltstack=0 \
  LSAN_OPTIONS=suppressions=$root/tests/lsan.supp:print_suppressions=0 \
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    run_ctest build-asan -LE "gpu|install|demo"
}

pass_tsan() {
  echo "== build-tsan/: ThreadSanitizer on the threaded tests"
  build_tree build-tsan -DCMAKE_BUILD_TYPE=Debug -DKPC_SANITIZE=thread -DKPC_BUILD_BENCH=OFF || return 0
  TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=$root/tests/tsan.supp run_ctest build-tsan -L threads
}

pass_nvidia() {
  if [ ! -f /usr/local/cuda/include/nvrtc.h ] || [ ! -x scripts/test-nvidia.sh ]; then
    skip_pass "no CUDA"; return 0
  fi
  echo "== build-nvidia/: the NVIDIA platform (NVRTC + CUDA driver), compile-only here"
  local log=$logs/ctest-nvidia.log
  scripts/test-nvidia.sh 2>&1 | tee "$log"
  count "$log" "${KPC_NVIDIA_BUILD_DIR:-build-nvidia}" nvidia
  rm -f "$log"
}

pass_comgr() {
  if [ ! -f /usr/include/amd_comgr.h ] && [ ! -f /usr/include/amd_comgr/amd_comgr.h ] &&
     [ ! -f /opt/rocm/include/amd_comgr.h ] && [ ! -f /opt/rocm/include/amd_comgr/amd_comgr.h ]; then
    skip_pass "no comgr header (libamd-comgr-dev)"; return 0
  fi
  echo "== build-comgr/: the comgr platform (HIP through comgr alone, no hipRTC)"
  # only what its tests run: the library, the tool and test_comgr
  build_targets="kpc_tool kpc-shm-reset test_comgr" build_tree build-comgr -DKPC_PLATFORM=comgr \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKPC_BUILD_BENCH=OFF -DKPC_BUILD_MAN=OFF || return 0
  run_ctest build-comgr -L comgr
}

pass_fuzz() {
  if ! command -v "${KPC_FUZZ_CC:-clang}" >/dev/null; then
    skip_pass "no ${KPC_FUZZ_CC:-clang}"; return 0
  fi
  echo "== build-fuzz/: libFuzzer on the record, segment and manifest parsers (${KPC_FUZZ_SECONDS:-15} s each)"
  if scripts/fuzz.sh; then
    total_passed=$((total_passed + 2))
    summary+=("fuzz")
  else
    total_failed=$((total_failed + 1))
    summary+=("fuzz: failed")
  fi
}

# ---- the passes, in lanes ----------------------------------------------------------------
# Lanes run side by side, each its passes in order: the suites spend most of their time
# waiting (on the processes they start, on Redis, on lease and lock timeouts), so the
# longest pass, asan, runs in a lane of its own beside the others. KPC_TEST_LANES=1: every pass in one lane, in order.
# A pass's output is printed whole when it ends; its counts are merged below in the
# order of `passes`, with its wall and CPU seconds.
children_cpu() { # cpu_s: user + sys seconds of this shell's waited-for children so far
  local f=$logs/times.$BASHPID
  times >"$f" # a builtin: this shell's, not a subshell's
  cpu_s=$(tail -n 1 "$f" | awk '{ s = 0; for (i = 1; i <= 2; i++) { split($i, t, /[ms]/); s += t[1] * 60 + t[2] }
                                  printf "%.0f", s }')
  rm -f "$f"
}
run_pass() { # run_pass PASS, in a subshell: its output and counts under $logs
  current=$1
  total_passed=0 total_failed=0 total_skipped=0 summary=() skips=()
  local start=$SECONDS cpu_s cpu0
  children_cpu; cpu0=$cpu_s
  "pass_$current" >"$logs/pass-$current.out" 2>&1
  children_cpu
  { echo "$total_passed $total_failed $total_skipped $((SECONDS - start)) $((cpu_s - cpu0))"
    ((${#summary[@]} == 0)) || printf 'S%s\n' "${summary[@]}"
    ((${#skips[@]} == 0)) || printf 'K%s\n' "${skips[@]}"; } >"$logs/pass-$current.counts"
  flock "$logs/print.lock" cat "$logs/pass-$current.out" # whole, one pass at a time
}
lanes=(); alone=asan
if [ "${KPC_TEST_LANES:-2}" -gt 1 ] && [[ " ${passes[*]} " == *" $alone "* ]] && ((${#passes[@]} > 1)); then
  lanes=("$alone" "$(printf '%s\n' "${passes[@]}" | grep -vx "$alone" | tr '\n' ' ')")
else
  lanes=("${passes[*]}")
fi
run_start=$SECONDS
for lane in "${lanes[@]}"; do
  echo "== running: $lane"
  ( for p in $lane; do run_pass "$p"; done ) &
done
wait
timing=()
for current in "${passes[@]}"; do
  counts=$logs/pass-$current.counts
  if [ ! -f "$counts" ]; then
    total_failed=$((total_failed + 1)); summary+=("${pass_title[$current]}: did not finish"); continue
  fi
  { read -r p f k secs cpu
    total_passed=$((total_passed + p)) total_failed=$((total_failed + f)) total_skipped=$((total_skipped + k))
    timing+=("${pass_title[$current]} ${secs} s (CPU ${cpu} s)")
    while IFS= read -r line; do
      case $line in S*) summary+=("${line#S}") ;; K*) skips+=("${line#K}") ;; esac
    done; } <"$counts"
  rm -f "$counts" "$logs/pass-$current.out"
done
rm -f "$logs/print.lock"

# ---- what the run left behind ----------------------------------------------------------
left=()
# segments that appeared during the run, are still there, and no live process maps (a
# segment some other program on this host is using is its own business)
for seg in $(comm -13 <(echo "$shm_before") <(ls /dev/shm 2>/dev/null | grep "$shm_mine" | sort)); do
  [ -e "/dev/shm/$seg" ] || continue
  ((private)) || ! grep -qs "/dev/shm/$seg" /proc/[0-9]*/maps || continue
  left+=("segment /dev/shm/$seg")
done
for f in $(comm -13 <(echo "$tmp_before") <(ls -d /tmp/* 2>/dev/null | grep -vx "$keep_tmp" | sort)); do
  ((private_tmp)) || { [[ $f == /tmp/kpc-* ]] && [ -O "$f" ]; } || continue
  left+=("file $f")
done
# processes still running a program of this tree's builds, or in a test's directory
for p in /proc/[0-9]*; do
  pid=${p#/proc/}
  [ "$pid" = "$$" ] && continue
  exe=$(readlink "$p/exe" 2>/dev/null) || continue
  cmd=$(tr '\0' ' ' <"$p/cmdline" 2>/dev/null) || continue
  case $exe in "$root"/build*) left+=("process $pid: $cmd"); continue ;; esac
  case $cmd in *" /tmp/kpc-"*) ((private_tmp)) && left+=("process $pid: $cmd") ;; esac
done
rmdir "$logs" 2>/dev/null || true
if ((${#left[@]})); then
  echo "== left behind by the tests:"
  printf '  %s\n' "${left[@]}"
  total_failed=$((total_failed + 1))
  summary+=("leftovers: ${#left[@]}")
fi

echo
echo "time: $(IFS=,; echo "${timing[*]}" | sed 's/,/, /g'); all $((SECONDS - run_start)) s in ${#lanes[@]} lane(s)"
((${#skips[@]})) && printf '%s\n' "${skips[@]}"
verdict=$(IFS=,; echo "${summary[*]}" | sed 's/,/, /g')
echo "kpc tests: $total_passed passed, $total_skipped skipped, $total_failed failed ($verdict)"
((total_failed == 0))
