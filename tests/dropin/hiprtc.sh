#!/usr/bin/env bash
# hiprtc.sh - libkpc-hiprtc against the real hipRTC (ROCm 5.2, gfx90a, real compiles, no
# GPU), through tests/dropin/hiprtc_app.c, a program that knows nothing of kpc:
#   1. the real hipRTC alone (the reference), then LD_PRELOAD twice, each in a new
#      process: the first builds each source once, the second compiles nothing; lowered
#      names and statuses equal the reference's, the code objects too (byte for byte, or
#      equivalent where the compiler varies between runs: common.sh), and the warm run's
#      are the cold run's bytes;
#   2. the same program linked with -lkpc-hiprtc: a cold and a warm run;
#   3. a compile error: the real status and log (comgr's temp dir aside), cold and warm;
#   4. -I ./headers (two-token and attached, relative to the working directory): built
#      once, then a hit in a new process; the header edited: rebuilt, equal to the real
#      hipRTC's on the edited header; an option kpc does not know and -imacros are still
#      forwarded: identical results, no kpc build;
#   5. no target option and no GPU: the real hipRTC's answer; odd calls: the same statuses;
#      an empty source, header or header name: INVALID_INPUT at create, as hipRTC says,
#      with no kpc line on the application's stderr (a NULL one too, where hipRTC aborts);
#   6. 16 processes at once on an empty cache: one build per source in all;
#   7. KPC_DISABLE=1: pure pass-through, nothing built;
#   8. the link API goes to the real library untouched (a fake hipRTC with a link API,
#      named by KPC_REAL_HIPRTC: 5.2 has none);
#   9. the corpus of cases a warm run answers without a compile (a -Wall warning log,
#      -Rpass remarks, a name hipRTC cannot lower, names never added or NULL,
#      --gpu-max-threads-per-block, an empty option, a compile error, a NULL name,
#      -fgpu-rdc, -mtune=): cold one build each, warm none and nothing forwarded; reports, code and
#      logs equal the real hipRTC's.
# usage: hiprtc.sh BUILD_DIR APP APP_LINKED FAKE_HIPRTC
set -euo pipefail
build=$1 app=$2 app_linked=$3 fake=$4
lib=$build/libkpc-hiprtc.so
. "$(dirname "$0")/common.sh"
# run NAME MODE [env...]: the app in MODE, output in $tmp/NAME, its stats line in $tmp/NAME.stats
run() {
  local name=$1 mode=$2; shift 2
  mkdir -p "$tmp/$name"
  env KPC_DROPIN_STATS="$tmp/$name.stats" "$@" "$mode" "$tmp/$name" 2>"$tmp/$name.err" ||
    { local rc=$?; cat "$tmp/$name.err" >&2; fail "$name exited $rc"; }
}
norm_log() { sed -E 's#/tmp/comgr-[0-9a-zA-Z]+#/tmp/comgr-X#g' "$1"; }

echo "== 1. LD_PRELOAD: cold, then warm, against the real hipRTC"
newcache preload
run real good "$app"
grep -q "lowered ns::fill<7> 0 _ZN2ns4fillILi7EEEvPi" "$tmp/real/report" || fail "reference has no lowered name"
ls "$tmp/real"/*.co >/dev/null
run p1 good env LD_PRELOAD="$preload" "$app"
run p2 good env LD_PRELOAD="$preload" "$app"
same real p1
same real p2
identical p1 p2
expect p1 compiles 3; expect p1 kpc 3; expect p1 builds 3; expect p1 forwarded 0
expect p2 compiles 3; expect p2 kpc 3; expect p2 builds 0; expect p2 disk_hits 3
expect p2 forwarded 0; expect p2 materialized 0
echo "preload: cold $(cat "$tmp/p1.stats")"
echo "preload: warm $(cat "$tmp/p2.stats")"

echo "== 2. linked with -lkpc-hiprtc"
readelf -d "$app_linked" | grep -q 'libkpc-hiprtc' || fail "the linked app does not need libkpc-hiprtc"
newcache linked
run l1 good "$app_linked"
run l2 good "$app_linked"
same real l1
same real l2
identical l1 l2
expect l1 builds 3; expect l2 builds 0; expect l2 forwarded 0

echo "== 3. a compile error: the real status and log"
newcache error
run real_err error "$app"
run e1 error env LD_PRELOAD="$preload" "$app"
run e2 error env LD_PRELOAD="$preload" "$app"
grep -q "0 compile 6 " "$tmp/real_err/report" || fail "the broken source compiled"
grep -q undeclared_thing "$tmp/real_err/0.log" || fail "the real log lacks the error"
same real_err e1
same real_err e2
for e in e1 e2; do
  cmp <(norm_log "$tmp/real_err/0.log") <(norm_log "$tmp/$e/0.log") || fail "$e: log differs"
done
expect e1 build_failures 1; expect e2 builds 0; expect e2 build_failures 0; expect e2 forwarded 0

echo "== 4. -I ./headers: keyed, checked on every hit; -imacros is forwarded"
newcache include
mkdir -p "$tmp/w/headers"
echo '#define K 9' >"$tmp/w/headers/params.h"
# kpc caches no outcome whose header changed within a second of the compile (the race
# rule, src/core/manifest.h): let the edits age past it
sleep 1.1
inc() { (cd "$tmp/w" && run "$1" include "${@:2}"); } # the app in $tmp/w, where ./headers is
inc real_inc "$app"
grep -q "1 compile 0 " "$tmp/real_inc/report" || fail "the -I compile failed: $(cat "$tmp/real_inc/report")"
inc i1 env LD_PRELOAD="$preload" "$app"
inc i2 env LD_PRELOAD="$preload" "$app"
same real_inc i1
same real_inc i2
identical i1 i2
expect i1 kpc 2; expect i1 builds 2; expect i1 forwarded 0
expect i2 kpc 2; expect i2 builds 0; expect i2 disk_hits 2; expect i2 forwarded 0
# the header edited (same size, so only its contents tell): rebuilt, never the stale object
echo '#define K 7' >"$tmp/w/headers/params.h"
sleep 1.1
inc real_inc2 "$app"
! cmp -s "$tmp/real_inc/0.co" "$tmp/real_inc2/0.co" || fail "the edited header made the same code"
inc i3 env LD_PRELOAD="$preload" "$app"
same real_inc2 i3
expect i3 builds 2; expect i3 forwarded 0
inc i4 env LD_PRELOAD="$preload" "$app"
same real_inc2 i4
expect i4 builds 0; expect i4 disk_hits 2
"$build/kpc" stats --cache-dir "$KPC_CACHE_DIR" | grep -E '^builds +4$' >/dev/null || fail "include: $("$build/kpc" stats --cache-dir "$KPC_CACHE_DIR")"
echo "include: cold $(cat "$tmp/i1.stats")"
echo "include: warm $(cat "$tmp/i2.stats")"
echo "include: edited $(cat "$tmp/i3.stats")"
newcache forward
run real_fw forward "$app"
run f1 forward env LD_PRELOAD="$preload" "$app"
same real_fw f1
# -Rpass is keyed (its remarks are the log, kept with the object); -imacros is keyed
# too (its file is in -MD's list)
expect f1 forwarded 0; expect f1 builds 2
for f in "$tmp/real_fw"/*.log; do
  cmp <(norm_log "$f") <(norm_log "$tmp/f1/$(basename "$f")") || fail "f1: $(basename "$f") differs from the real log"
done
grep -q "0 compile 0 " "$tmp/real_fw/report" || fail "the -Rpass compile failed"
grep -q "1 compile 0 " "$tmp/real_fw/report" || fail "the -imacros compile failed: $(cat "$tmp/real_fw/report")"

echo "== 5. no target option without a GPU; odd calls"
newcache edge
run real_ng nogpu "$app"
run n1 nogpu env LD_PRELOAD="$preload" "$app"
same real_ng n1
expect n1 builds 0; expect n1 forwarded 1
run real_edge edge "$app"
run d1 edge env LD_PRELOAD="$preload" "$app"
run d2 edge env LD_PRELOAD="$preload" "$app"
same real_edge d1
same real_edge d2
expect d2 builds 0
# empty inputs: hipRTC refuses them at create, and so does the drop-in, with no kpc line
# on the application's stderr; NULL ones (hipRTC aborts) are INVALID_INPUT
run real_in inputs "$app"
for n in 0 1 2 3 4 5; do
  grep -q "^$n create 3$" "$tmp/real_in/report" || fail "hipRTC created program $n: $(cat "$tmp/real_in/report")"
done
grep -q "^6 compile 0 " "$tmp/real_in/report" || fail "hipRTC did not compile a program named \"\": $(cat "$tmp/real_in/report")"
run in1 inputs env LD_PRELOAD="$preload" "$app"
same real_in in1
expect in1 builds 1; expect in1 forwarded 0
run nul null_inputs env LD_PRELOAD="$preload" "$app"
[ "$(grep -c '^[0-2] create 3$' "$tmp/nul/report")" = 3 ] || fail "NULL inputs: $(cat "$tmp/nul/report")"
for e in in1 nul; do
  ! grep -q '^kpc\[' "$tmp/$e.err" || fail "$e: kpc logged on the application's stderr: $(cat "$tmp/$e.err")"
done

echo "== 6. 16 processes at once, one build per source"
newcache storm
run real_storm storm "$app"
for i in $(seq 1 16); do
  (run "s$i" storm env LD_PRELOAD="$preload" "$app") &
done
wait
builds=0
for i in $(seq 1 16); do
  same real_storm "s$i"
  builds=$((builds + $(stat_of "s$i" builds)))
done
[ "$builds" = 4 ] || fail "16 processes built $builds times, expected 4"
"$build/kpc" stats --cache-dir "$KPC_CACHE_DIR" | grep -E '^builds +4$' >/dev/null || fail "host index: $("$build/kpc" stats --cache-dir "$KPC_CACHE_DIR")"
echo "storm: 16 processes, 4 sources: $builds builds"

echo "== 7. KPC_DISABLE=1: pass-through"
newcache disabled
run x1 good env KPC_DISABLE=1 LD_PRELOAD="$preload" "$app"
same real x1
[ ! -s "$tmp/x1.stats" ] || expect x1 builds 0
[ ! -d "$KPC_CACHE_DIR/v1" ] || [ -z "$(find "$KPC_CACHE_DIR" -name '*.co' 2>/dev/null)" ] || fail "KPC_DISABLE=1 cached"

echo "== 8. the link API, forwarded untouched"
run real_link link env LD_PRELOAD="${san:+$san:}$fake" "$app"
grep -q "link complete 0" "$tmp/real_link/report" || fail "the fake link API failed: $(cat "$tmp/real_link/report")"
run k1 link env KPC_REAL_HIPRTC="$fake" LD_PRELOAD="$preload" "$app"
same real_link k1
echo "== 9. the corpus: a warm run compiles nothing, with the real hipRTC's answers"
newcache corpus
run real_c corpus "$app"
grep -q "^0 log 0 non-empty" "$tmp/real_c/report" || fail "no warning log under -Wall: $(cat "$tmp/real_c/report")"
# program 2 asks for a cast hipRTC cannot lower: 5.x compiles it and answers "not valid"
# for that name; 6.4 fails the whole compile (it cannot take the expression's address).
# Either way kpc must answer as the real one did, cold and warm.
failures=1
if grep -q "^2 compile 6 " "$tmp/real_c/report"; then
  failures=2
else
  grep -q "^2 lowered (void .* 10 -$" "$tmp/real_c/report" || fail "the cast was lowered: $(cat "$tmp/real_c/report")"
fi
run c1 corpus env LD_PRELOAD="$preload" "$app"
run c2 corpus env LD_PRELOAD="$preload" "$app"
for c in c1 c2; do
  same real_c "$c"
  for f in "$tmp/real_c"/*.log; do
    cmp <(norm_log "$f") <(norm_log "$tmp/$c/$(basename "$f")") || fail "$c: $(basename "$f") differs from the real log"
  done
done
# program 7 is -fgpu-rdc: hipRTC 5.2 links it into a code object like any other (compared
# above with the real one's); from 5.3 it gives bitcode (7.bc), kept as a record of
# bitcode: kpc's cold and warm bytes are one record's, and LLVM bitcode
grep -q "^7 compile 0 " "$tmp/real_c/report" || fail "the -fgpu-rdc program did not compile: $(cat "$tmp/real_c/report")"
identical c1 c2
if [ -e "$tmp/real_c/7.bc" ]; then
  for c in c1 c2; do
    [ "$(head -c 4 "$tmp/$c/7.bc" | od -An -tx1 | tr -d ' \n')" = 4243c0de ] || fail "$c: 7.bc is not LLVM bitcode"
  done
  cmp "$tmp/c1/7.bc" "$tmp/c2/7.bc" || fail "the warm run's bitcode is not the cold run's"
else
  [ -s "$tmp/real_c/7.co" ] || fail "the -fgpu-rdc program gave no code object: $(cat "$tmp/real_c/report")"
fi
# program 8 is -mtune=, which comgr's clang ignores with a warning (the log, compared above)
grep -q "^8 log 0 non-empty" "$tmp/real_c/report" || fail "no warning for -mtune=: $(cat "$tmp/real_c/report")"
expect c1 compiles 9; expect c1 kpc 9; expect c1 builds $((9 - failures)); expect c1 build_failures "$failures"
expect c1 forwarded 0; expect c1 materialized 0
expect c2 compiles 9; expect c2 kpc 9; expect c2 builds 0; expect c2 build_failures 0
expect c2 cached_failures "$failures"; expect c2 forwarded 0; expect c2 materialized 0
echo "corpus: cold $(cat "$tmp/c1.stats")"
echo "corpus: warm $(cat "$tmp/c2.stats")"
echo "dropin hiprtc: passed"
