#!/usr/bin/env bash
# nvrtc.sh - libkpc-nvrtc and the libnvrtc.so.13 shim against a fake NVRTC (fake_rtc.c;
# CI has no CUDA), through tests/dropin/nvrtc_app.c, a program that knows nothing of kpc:
#   1. LD_PRELOAD twice, in new processes: the second compiles nothing (the fake counts
#      its compiles); cubin, PTX, lowered names, logs, statuses equal the fake's alone;
#   2. linked with -lkpc-nvrtc ahead of NVRTC;
#   3. an application that dlopens libnvrtc.so.13 and looks symbols up on that handle:
#      the shim directory first on LD_LIBRARY_PATH, the real library found through
#      KPC_REAL_NVRTC, or by absolute path under $CUDA_HOME (never the shim itself);
#   4. a compile error: NVRTC's status and log, cold and warm;
#   5. -I ./headers and --include-path=./headers (relative to the working directory):
#      built once, then a hit in a new process; the header edited: rebuilt, equal to
#      NVRTC's on the edited header; -isystem, an invalid option and no -arch are
#      forwarded: NVRTC's own answers;
#   6. 8 threads x 4 programs in one process: 4 compiles;
#   7. KPC_DISABLE=1: pure pass-through;
#   8. where CUDA is installed, the real NVRTC 13 through the shim, also loaded the way
#      PyTorch loads it (by path first, then by soname; NULL program names).
# usage: nvrtc.sh BUILD_DIR APP APP_DLOPEN APP_LINKED FAKE_CUDA_HOME
set -euo pipefail
build=$1 app=$2 app_dl=$3 app_linked=$4 fake_home=$5
lib=$build/libkpc-nvrtc.so
shim=$build/nvrtc-shim
fake=$fake_home/lib64/libnvrtc.so.13
. "$(dirname "$0")/common.sh"
san_only=${san:-}
unset KPC_REAL_NVRTC CUDA_HOME CUDA_PATH
run() { # run NAME MODE env... APP [dlopen]
  local name=$1 mode=$2; shift 2
  mkdir -p "$tmp/$name"
  local args=("$@") extra=()
  if [ "${args[-1]}" = dlopen ]; then extra=(dlopen); unset 'args[-1]'; fi
  env KPC_DROPIN_STATS="$tmp/$name.stats" FAKE_RTC_COUNT="$tmp/$name.count" "${args[@]}" \
    "$mode" "$tmp/$name" "${extra[@]}" 2>"$tmp/$name.err" || { local rc=$?; cat "$tmp/$name.err" >&2; fail "$name exited $rc"; }
}
compiles() { [ -f "$tmp/$1.count" ] && wc -l <"$tmp/$1.count" | tr -d ' ' || echo 0; }
expect_compiles() { [ "$(compiles "$1")" = "$2" ] || fail "$1: the fake compiled $(compiles "$1") times, expected $2"; }
same_logs() { # same, and the logs too (NVRTC's hold no temporary paths, unlike hipRTC's)
  same "$1" "$2"
  local f
  for f in "$tmp/$1"/*.log; do
    [ -e "$f" ] || continue
    cmp "$f" "$tmp/$2/$(basename "$f")" || fail "$1 and $2: $(basename "$f") differs"
  done
}
# the caller's library path, kept after every path set below: where kpc's own libraries
# were unpacked on a machine without them installed (scripts/device-deps.sh)
K=${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
L=$fake_home/lib64$K

echo "== 1. LD_PRELOAD, cold then warm"
newcache preload
run real good env LD_LIBRARY_PATH="$L" "$app"
grep -q "0 cubin 0" "$tmp/real/report" && grep -q "1 ptx 0" "$tmp/real/report" || fail "reference: $(cat "$tmp/real/report")"
expect_compiles real 3
run p1 good env LD_LIBRARY_PATH="$L" LD_PRELOAD="$preload" "$app"
run p2 good env LD_LIBRARY_PATH="$L" LD_PRELOAD="$preload" "$app"
same_logs real p1
same_logs real p2
# program 2 is an sm_90 build asked for its PTX: the real program answers (one compile)
expect p1 builds 3; expect p1 materialized 1; expect_compiles p1 4
expect p2 builds 0; expect p2 disk_hits 3; expect p2 materialized 1; expect_compiles p2 1
echo "preload: cold $(cat "$tmp/p1.stats")"
echo "preload: warm $(cat "$tmp/p2.stats")"

echo "== 2. linked with -lkpc-nvrtc"
readelf -d "$app_linked" | grep -q 'libkpc-nvrtc' || fail "the linked app does not need libkpc-nvrtc"
run l1 good env LD_LIBRARY_PATH="$L" ${san_only:+LD_PRELOAD=$san_only} "$app_linked"
same_logs real l1
expect l1 builds 0; expect_compiles l1 1

echo "== 3. dlopen by soname: the shim directory first on LD_LIBRARY_PATH"
[ "$(readelf -d "$shim/libnvrtc.so.13" | grep -o 'libnvrtc.so.13')" = libnvrtc.so.13 ] || fail "shim soname"
newcache shim
run real_dl good env LD_LIBRARY_PATH="$L" "$app_dl" dlopen
same_logs real real_dl
# the real one by KPC_REAL_NVRTC (the shim directory also holds the soname: never itself)
run d1 good env LD_LIBRARY_PATH="$shim:$L" KPC_REAL_NVRTC="$fake" ${san_only:+LD_PRELOAD=$san_only} "$app_dl" dlopen
same_logs real d1
expect d1 builds 3; expect_compiles d1 4
# found by absolute path under $CUDA_HOME: dlopen by soname would answer with the shim
run d2 good env LD_LIBRARY_PATH="$shim$K" CUDA_HOME="$fake_home" ${san_only:+LD_PRELOAD=$san_only} "$app_dl" dlopen
same_logs real d2
expect d2 builds 0; expect d2 disk_hits 3; expect_compiles d2 1

echo "== 4. a compile error"
newcache error
run real_err error env LD_LIBRARY_PATH="$L" "$app"
grep -q "0 compile 6" "$tmp/real_err/report" || fail "the broken source compiled"
run e1 error env LD_LIBRARY_PATH="$L" LD_PRELOAD="$preload" "$app"
run e2 error env LD_LIBRARY_PATH="$L" LD_PRELOAD="$preload" "$app"
same_logs real_err e1
same_logs real_err e2
# e2's log came from the cache; the app's cubin query after the failure is answered by
# the real program (one compile: what a failed program answers is NVRTC's to say)
expect e1 build_failures 1; expect e2 build_failures 0; expect e2 materialized 1; expect_compiles e2 1

echo "== 5. -I ./headers: keyed, checked on every hit"
newcache include
mkdir -p "$tmp/w/headers"
echo '#define D 9' >"$tmp/w/headers/dep.h"
# kpc caches no outcome whose header changed within a second of the compile (the race
# rule, src/core/manifest.h): let the edits age past it
sleep 1.1
inc() { (cd "$tmp/w" && run "$1" include "${@:2}"); } # the app in $tmp/w, where ./headers is
inc real_inc env LD_LIBRARY_PATH="$L" "$app"
grep -q "1 compile 0" "$tmp/real_inc/report" || fail "the -I compile failed: $(cat "$tmp/real_inc/report")"
inc i1 env LD_LIBRARY_PATH="$L" LD_PRELOAD="$preload" "$app"
inc i2 env LD_LIBRARY_PATH="$L" LD_PRELOAD="$preload" "$app"
same_logs real_inc i1
same_logs real_inc i2
expect i1 builds 2; expect i1 forwarded 0; expect_compiles i1 2
expect i2 builds 0; expect i2 disk_hits 2; expect i2 forwarded 0; expect_compiles i2 0
# the header edited (same size, so only its contents tell): rebuilt, never the stale cubin
echo '#define D 7' >"$tmp/w/headers/dep.h"
sleep 1.1
inc real_inc2 env LD_LIBRARY_PATH="$L" "$app"
! cmp -s "$tmp/real_inc/0.cubin" "$tmp/real_inc2/0.cubin" || fail "the edited header made the same cubin"
inc i3 env LD_LIBRARY_PATH="$L" LD_PRELOAD="$preload" "$app"
inc i4 env LD_LIBRARY_PATH="$L" LD_PRELOAD="$preload" "$app"
same_logs real_inc2 i3
same_logs real_inc2 i4
expect i3 builds 2; expect i3 forwarded 0; expect_compiles i3 2
expect i4 builds 0; expect i4 disk_hits 2; expect_compiles i4 0
echo "include: cold $(cat "$tmp/i1.stats")"
echo "include: warm $(cat "$tmp/i2.stats")"
echo "include: edited $(cat "$tmp/i3.stats")"

echo "== 5b. forwarded: -isystem, an invalid option, no -arch"
newcache forward
run real_fw forward env LD_LIBRARY_PATH="$L" "$app"
grep -q "1 compile 5" "$tmp/real_fw/report" || fail "the fake took --bogus"
run f1 forward env LD_LIBRARY_PATH="$L" LD_PRELOAD="$preload" "$app"
same_logs real_fw f1
expect f1 forwarded 3; expect f1 builds 0; expect_compiles f1 3

echo "== 6. 8 threads x 4 programs"
newcache threads
run t1 threads env LD_LIBRARY_PATH="$L" LD_PRELOAD="$preload" "$app"
run real_t threads env LD_LIBRARY_PATH="$L" "$app"
for i in 0 1 2 3 4 5 6 7; do
  cmp "$tmp/real_t/report.$i" "$tmp/t1/report.$i" || fail "thread $i differs"
done
expect t1 builds 4; expect_compiles t1 4
expect t1 compiles 32

echo "== 7. KPC_DISABLE=1"
newcache disabled
run x1 good env KPC_DISABLE=1 LD_LIBRARY_PATH="$L" LD_PRELOAD="$preload" "$app"
same_logs real x1
expect_compiles x1 3
[ -z "$(find "$KPC_CACHE_DIR" -type f -name '*.co' 2>/dev/null)" ] || fail "KPC_DISABLE=1 cached"
echo "== 8. the real NVRTC, where CUDA is installed: the shim, cold and warm"
real_nvrtc=$(ls /usr/local/cuda/lib64/libnvrtc.so.13 /usr/local/cuda/lib/libnvrtc.so.13 2>/dev/null | head -1 || true)
if [ -n "$real_nvrtc" ]; then
  R=$(dirname "$real_nvrtc")$K
  newcache real
  run nv good env LD_LIBRARY_PATH="$R" "$app_dl" dlopen
  grep -q "0 lowered scale<float> 0 _Z5scaleIfEvPT_S0_i" "$tmp/nv/report" || fail "real NVRTC: $(cat "$tmp/nv/report")"
  run n1 good env LD_LIBRARY_PATH="$shim:$R" ${san_only:+LD_PRELOAD=$san_only} "$app_dl" dlopen
  run n2 good env LD_LIBRARY_PATH="$shim:$R" ${san_only:+LD_PRELOAD=$san_only} "$app_dl" dlopen
  same_logs nv n1
  same_logs nv n2
  expect n1 builds 3; expect n2 builds 0; expect n2 disk_hits 3
  echo "real NVRTC ($real_nvrtc): cold $(cat "$tmp/n1.stats")"
  echo "real NVRTC: warm $(cat "$tmp/n2.stats")"
  # as PyTorch loads NVRTC: by path first (its __init__), then dlopen by soname (its C++),
  # with NULL program names: the shim directory is not reached (the soname is taken),
  # the shim preloaded is
  newcache torchlike
  run tl0 good env LD_LIBRARY_PATH="$shim$K" NVRTC_APP_PRELOAD="$real_nvrtc" KPC_REAL_NVRTC="$real_nvrtc" \
    ${san_only:+LD_PRELOAD=$san_only} "$app_dl" dlopen
  same_logs nv tl0
  [ ! -s "$tmp/tl0.stats" ] || expect tl0 kpc 0
  run tl1 good env LD_PRELOAD="${san_only:+$san_only:}$shim/libnvrtc.so.13" NVRTC_APP_PRELOAD="$real_nvrtc" \
    KPC_REAL_NVRTC="$real_nvrtc" "$app_dl" dlopen
  run tl2 good env LD_PRELOAD="${san_only:+$san_only:}$shim/libnvrtc.so.13" NVRTC_APP_PRELOAD="$real_nvrtc" \
    KPC_REAL_NVRTC="$real_nvrtc" "$app_dl" dlopen
  same_logs nv tl1
  same_logs nv tl2
  expect tl1 builds 3; expect tl2 builds 0; expect tl2 disk_hits 3; expect tl2 forwarded 0
  echo "as PyTorch loads NVRTC, the shim preloaded: warm $(cat "$tmp/tl2.stats")"
else
  echo "real NVRTC: skipped: no libnvrtc.so.13 in /usr/local/cuda/lib64 or /usr/local/cuda/lib"
fi
echo "dropin nvrtc: passed"
