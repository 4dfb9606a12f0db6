#!/usr/bin/env bash
# device call: build the NVIDIA tree's two in-flight-compile tests, then run them 8 lanes x 2 rounds
set -uo pipefail
out=${OUT:-/tmp/o}; mkdir -p $out
exec > >(tee "$out/loops-log.txt") 2>&1
build=build-gpu; debs=.carry/gpu-debs; deps=/tmp/kpc-deps; failed=()
check() { "${@:2}"; local rc=$?; [ $rc -ne 0 ] && { failed+=("$1 ($rc)"); echo "!! $1 failed $rc"; }; return 0; }
. scripts/gpu-deps.sh >/dev/null
s=$(date +%s)
cmake -S . -B $build -DKPC_PLATFORM=nvidia -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKPC_BUILD_MAN=OFF -DKPC_BUILD_BENCH=OFF -DKPC_WERROR=OFF >/dev/null
cmake --build $build -j16 --target test_index_crash test_tool_json kpc_tool kpc-shm-reset 2>&1 | grep -E 'error|warning:' | head
echo "build $(( $(date +%s) - s )) s"
cd $build; export KPC_LOG=error
for lane in 1 2 3 4 5 6 7 8; do
  ( for i in 1 2; do
      for t in test_index_crash test_tool_json; do
        timeout 170 ctest -R "^$t\$" --timeout 150 --output-on-failure > $out/$t-$lane-$i.txt 2>&1
        r=$(grep -E 'Test +#' $out/$t-$lane-$i.txt | sed -E 's/^ *[0-9]+\/[0-9]+ //')
        echo "lane $lane: ${r:-$t no result}"; echo "${r:-$t no result}" >> $out/loops.txt
        grep -q 'Passed' $out/$t-$lane-$i.txt && rm -f $out/$t-$lane-$i.txt
      done
    done ) &
done
wait
echo "== summary (wall $(( $(date +%s) - s )) s)"; sed -E 's/ +[0-9.]+ sec//' $out/loops.txt | sort | uniq -c
