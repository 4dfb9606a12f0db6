#!/bin/bash
# steps2.sh BENCH_DIR N - the marked tree's bench_manifest keeps a directory (KEEP=1), then N
# turns of fresh helpers, each turn the 50-file get, the no-include get (KPC_T set: each
# step's gap) and the floor, side by side; prints each step's median per request and the
# medians of the plain totals. Removes the directory and its host index after.
B=$1/bench_manifest; N=${2:-41}
line=$(KEEP=1 $B --runs 3 --rounds 3 2>/dev/null | grep KEPT)
D=$(echo $line | awk '{print $2}'); H=$(echo $line | awk '{print $3}')
T=$(mktemp -d)
for i in $(seq $N); do
  for w in files none; do KPC_T=1 $B --helper $w $D $H 2>>$T/$w.mk | awk -v w=$w '{print w, $1}' >> $T/tot; done
  $B --helper floor $D $H | awk '{print "floor", $1}' >> $T/tot
done
python3 - $T <<'PY'
import sys,statistics,os
T=sys.argv[1]
for w in ("files","none"):
    o={}; c={}
    for l in open(f"{T}/{w}.mk"):
        p=l.split()
        if len(p)!=3 or p[0]!="MK": continue
        o.setdefault(p[1],[]).append(int(p[2]))
    print(f"== {w}")
    for k,v in o.items(): print(f"{k:16s} {statistics.median(v)/1000:8.2f} us  n={len(v)}")
tot={}
for l in open(f"{T}/tot"):
    w,v=l.split(); tot.setdefault(w,[]).append(int(v))
m={w:statistics.median(v)/1000 for w,v in tot.items()}
over=[f-n-l for f,n,l in zip(tot["files"],tot["none"],tot["floor"])]
print("totals (medians):", " ".join(f"{w} {v:.1f}" for w,v in m.items()), f" over (median of turns) {statistics.median(over)/1000:+.1f} us")
PY
rm -rf $T
${KPC_SHM_RESET:-$1/../kpc-shm-reset} -d "$D" >/dev/null 2>&1
rm -rf "$(dirname "$D")"
