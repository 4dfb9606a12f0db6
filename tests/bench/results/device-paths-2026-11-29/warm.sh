#!/bin/bash
# warm.sh BENCH_DIR N - N turns of fresh helpers: files, none, floor, and files/none each
# after a get of another source of its kind in the same process (its code run once, its
# program kept); prints the medians and the medians of the turns' differences.
B=$1/bench_manifest; N=${2:-41}
line=$(KEEP=1 $B --runs 3 --rounds 3 2>/dev/null | grep KEPT)
D=$(echo $line | awk '{print $2}'); H=$(echo $line | awk '{print $3}')
T=$(mktemp)
for i in $(seq $N); do for w in files none floor files-warm none-warm; do
  echo "$w $($B --helper $w $D $H | awk '{print $1, $4}')" >> $T; done; done
python3 - $T <<'PY'
import sys,statistics as st
v={}
for l in open(sys.argv[1]):
    p=l.split(); v.setdefault(p[0],[]).append((int(p[1]), int(p[2]) if len(p)>2 and p[2].lstrip('-').isdigit() else 0))
m=lambda w: st.median(x[0] for x in v[w])/1000
print(" ".join(f"{w} {m(w):.1f}" for w in v))
n=len(v["files"])
cold=[v["files"][i][0]-v["none"][i][0]-v["floor"][i][0] for i in range(n)]
warm=[v["files-warm"][i][0]-v["none-warm"][i][0]-v["floor"][i][0] for i in range(n)]
print(f"over the floor: cold {st.median(cold)/1000:+.1f} us, code warmed {st.median(warm)/1000:+.1f} us")
print("faults: files %s none %s files-warm %s none-warm %s" % tuple(st.median(x[1] for x in v[w]) for w in ("files","none","files-warm","none-warm")))
PY
rm -f $T
${KPC_SHM_RESET:-$1/../kpc-shm-reset} -d "$D" >/dev/null 2>&1
rm -rf "$(dirname "$D")"
