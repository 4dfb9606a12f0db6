#!/bin/bash
# steps.sh BENCH_DIR [N] - probe: 41 fresh helpers of the files and the no-include request
# with KPC_T set; each mark's median gap (a mark seen twice in one get gets a 2).
B=$1/bench_manifest; N=${2:-41}
line=$(KEEP=1 $B --runs 3 --rounds 3 2>/dev/null | grep KEPT)
D=$(echo $line | awk '{print $2}'); H=$(echo $line | awk '{print $3}')
for w in files none; do echo "== $w"; for i in $(seq $N); do KPC_T=1 $B --helper $w $D $H 2>&1 >/dev/null | grep MK | awk '{c[$2]++; print $1, $2 (c[$2]>1? c[$2]:""), $3}'; done | python3 -c "
import sys,statistics
o={}
for l in sys.stdin:
    _,k,v=l.split(); o.setdefault(k,[]).append(int(v))
t=0
for k,v in o.items():
    m=statistics.median(v)/1000; t+=m; print(f'{k:12s} {m:8.2f} us  n={len(v)}')
print(f'{\"sum\":12s} {t:8.2f} us')
"; done
${KPC_SHM_RESET:-$1/../kpc-shm-reset} -d "$D" >/dev/null 2>&1
rm -rf "$(dirname "$D")"
