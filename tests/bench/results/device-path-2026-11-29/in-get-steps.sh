#!/bin/bash
# usage: mk.sh BENCH_DIR  -> runs KEEP bench, then 41 helpers of files/none with KPC_T, medians
B=$1/bench_manifest
line=$(KEEP=1 $B --runs 3 --rounds 3 2>/dev/null | grep KEPT)
D=$(echo $line | awk '{print $2}'); H=$(echo $line | awk '{print $3}')
for w in files none; do echo "== $w"; for i in $(seq 41); do KPC_T=1 $B --helper $w $D $H 2>&1 >/dev/null | grep MK; done | python3 -c "
import sys,statistics
o={}
for l in sys.stdin:
    _,k,v=l.split(); o.setdefault(k,[]).append(int(v))
t=0
for k,v in o.items():
    m=statistics.median(v)/1000; t+=m; print(f'{k:10s} {m:8.2f} us  n={len(v)}')
print(f'{\"sum\":10s} {t:8.2f} us')
"; done
rm -rf $(dirname $D)
