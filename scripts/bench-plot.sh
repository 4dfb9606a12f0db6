#!/usr/bin/env bash
# bench-plot.sh - the figures of docs/benchmarks.md people compare at a glance, drawn as
# SVG by gnuplot (Debian's gnuplot-nox) from the recorded runs in tests/bench/results/:
# no benchmark runs here. `scripts/bench.sh --plot` runs it.
#
#   docs/plots/storm.svg    the cold storm's wall against processes, beside its bound
#                           (compiles + the builders' compiler start-ups), no-shm and
#                           KPC_DISABLE: bench.json (2 cores, hipRTC) and
#                           bench-device-storm-2026-11-23.json (16 cores, NVRTC: the last
#                           device run of the storm; bench-device.json holds the latest
#                           device run, which may be of other benchmarks only)
#   docs/plots/levels.svg   a hit's time by level, log scale: the in-memory map, the host
#                           index + disk in a new process, the shared tier, the Redis of the
#                           cluster tier, beside the compile it saves:
#                           bench-device-latency-2026-11-26.json and
#                           bench-device-storm-2026-11-23.json (16 cores), bench-xproc-shared-2026-11-28.json and bench.json
#                           (2 cores)
#   docs/plots/threads.svg  T threads against one: the per-hit time on one program and
#                           the hits per second: bench-device-latency-2026-11-26.json
#   docs/plots/caches.svg   kpc beside NVRTC's own cache (bench-device-2026-11-26.json)
#                           and comgr's (comgr-sid-2026-11-26/figures.tsv)
#
# usage: scripts/bench-plot.sh [--out DIR]   (default docs/plots)
set -euo pipefail
cd "$(dirname "$0")/.."
out=docs/plots
while (($#)); do
  case $1 in
    --out) out=$2; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench-plot: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
command -v gnuplot >/dev/null ||
  { echo "bench-plot: no gnuplot: apt-get install --no-install-recommends gnuplot-nox" >&2; exit 1; }
results=tests/bench/results
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# field FILE ID NAME: a row's field as bench.sh's JSON writes it (one row a line); the
# quotes of a string go
field() {
  local line
  line=$(grep -F "{\"id\": \"$2\"," "$1") || { echo "bench-plot: no row $2 in $1" >&2; return 1; }
  sed -E "s/.*\"$3\": (\"[^\"]*\"|[^,}]*).*/\1/; s/^\"//; s/\"$//" <<<"$line"
}
# seconds VALUE: "11.9 ms", "2.83 s", "12.1 us", "255 ns" in seconds
seconds() {
  awk '{ v = $1; u = $2
         f = u == "s" ? 1 : u == "ms" ? 1e-3 : u == "us" ? 1e-6 : u == "ns" ? 1e-9 : -1
         if (f < 0) { print "bench-plot: no unit in \"" $0 "\"" > "/dev/stderr"; exit 1 }
         printf "%.9g\n", v * f }' <<<"$1"
}
# raw_s FILE ID: a row's measured value in seconds (its raw number and unit)
raw_s() { seconds "$(field "$1" "$2" raw) $(field "$1" "$2" unit)"; }
# a machine's and a run's name for a title
run_of() { field_top "$1" section; }
field_top() { sed -nE "s/^  \"$2\": \"([^\"]*)\",?$/\1/p" "$1" | head -n 1; }

style='set terminal svg size 860,460 dynamic enhanced font "Helvetica,13" background rgb "white"
set border 3; set tics nomirror; set grid ytics lc rgb "#dddddd"; set key top left Left reverse noautotitle
set linetype 1 lc rgb "#1f77b4" lw 2 pt 7 ps 0.8
set linetype 2 lc rgb "#555555" lw 2 dt 2 pt 6 ps 0.8
set linetype 3 lc rgb "#ff7f0e" lw 2 pt 5 ps 0.8
set linetype 4 lc rgb "#d62728" lw 2 pt 9 ps 0.8'
time_tics='set ytics ("1 ns" 1e-9, "10 ns" 1e-8, "100 ns" 1e-7, "1 µs" 1e-6, "10 µs" 1e-5, "100 µs" 1e-4, "1 ms" 1e-3, "10 ms" 1e-2, "100 ms" 0.1, "1 s" 1, "10 s" 10, "100 s" 100)'

# ---- the cold storm ------------------------------------------------------------------
local_json=$results/bench.json device_json=$results/bench-device-storm-2026-11-23.json
# storm_rows FILE INFIX P...: per P, kpc's wall, the bound, no-shm's, KPC_DISABLE's
storm_rows() {
  local f=$1 infix=$2 p k; shift 2
  for p in "$@"; do
    echo "$p $(for k in kpc bound noshm disabled; do raw_s "$f" "storm_${k}${infix}_p$p"; done | tr '\n' ' ')"
  done
}
# storm_panel TITLE YRANGE DATA: one half of the figure (gnuplot's enhanced text wants
# the underscore escaped twice)
storm_panel() {
  printf 'set title "%s"\nset yrange %s\n' "$1" "$2"
  printf 'plot "%s" u 1:5 w lp lt 4 t "KPC\\\\_DISABLE (P x K compiles)", ' "$3"
  printf '"" u 1:4 w lp lt 3 t "no shm: disk only", "" u 1:2 w lp lt 1 t "kpc (K compiles)", '
  printf '"" u 1:3 w lp lt 2 t "bound: K compiles + start-ups"\n'
}
storm_rows "$local_json" "" 2 8 32 64 >"$tmp/storm-local"
storm_rows "$device_json" _16core 2 8 16 32 64 128 >"$tmp/storm-device"
gnuplot <<EOF
$style
set output "$out/storm.svg"
set multiplot layout 1,2 title "Cold storm: P processes ask for the same K = 16 sources at once (wall time, log scales)"
set logscale xy; set xlabel "processes P"; set ylabel "wall"
set xtics (2, 8, 16, 32, 64, 128)
set ytics ("0.1 s" 0.1, "0.2 s" 0.2, "0.5 s" 0.5, "1 s" 1, "2 s" 2, "5 s" 5, "10 s" 10, "20 s" 20, "50 s" 50, "100 s" 100)
$(storm_panel "2 cores, hipRTC 5.2 (bench.json)" "[0.3:200]" "$tmp/storm-local")
$(storm_panel "16 cores, NVRTC 13 (device-2026-11-23)" "[0.15:40]" "$tmp/storm-device")
unset multiplot
EOF

# ---- a hit by level ------------------------------------------------------------------
lat_json=$results/bench-device-latency-2026-11-26.json shared_json=$results/bench-xproc-shared-2026-11-28.json
compile_device=$(seconds "$(field "$device_json" xproc_get reference_value)")
compile_local=$(seconds "$(field "$shared_json" xproc_get reference_value)")
{
  echo "\"in-memory map\\n(4 KB source)\" $(raw_s "$lat_json" hit_4096) $(raw_s "$local_json" hit_4096)"
  echo "\"host index + disk\\n(a new process)\" $(raw_s "$lat_json" manifest_xproc_0) $(raw_s "$shared_json" xproc_get)"
  echo "\"shared tier\\n(KPC\\\\_SHARED\\\\_DIR)\" NaN $(raw_s "$shared_json" xproc_shared_get)"
  echo "\"cluster tier, Redis\\n(16 KB, loopback)\" $(raw_s "$lat_json" cluster_remote_hit_16k_ext4) NaN"
  echo "\"the compile\\nit saves\" $compile_device $compile_local"
} >"$tmp/levels"
gnuplot <<EOF
$style
set terminal svg size 960,460 dynamic enhanced font "Helvetica,13" background rgb "white"
set output "$out/levels.svg"
set title "A hit, level by level, against the compile it saves (log scale)"
set style data histograms; set style histogram clustered gap 1; set style fill solid 0.85 noborder
set logscale y; set yrange [1e-8:3]; $time_tics
set ylabel "time"; set key top left; set bmargin 4
plot "$tmp/levels" u 2:xtic(1) lc rgb "#1f77b4" t "16 cores, NVRTC (device-latency-2026-11-26; compile: device-2026-11-23)", \
     "" u 3 lc rgb "#ff7f0e" t "2 cores, hipRTC (xproc-shared-2026-11-28; map: bench.json)"
EOF

# ---- T threads against one -------------------------------------------------------------
{
  echo "1 1 $(field "$lat_json" hit_threads_1 raw) $(seconds "$(field "$lat_json" hit_threads_1 reference_value | sed 's| M/s| s|')")"
  for t in 2 4 8 16; do
    ratio=$(field "$lat_json" hit_threads_scale_$t ratio)
    floor=$(field "$lat_json" hit_threads_$t reference_value)
    echo "$t ${ratio%x} $(field "$lat_json" hit_threads_$t raw) ${floor% M/s} $(field "$lat_json" hit_threads_own_$t raw)"
  done
} | awk 'NR == 1 { print $1, $2, $3, $4, $3; next } { print }' >"$tmp/threads"
gnuplot <<EOF
$style
set output "$out/threads.svg"
set multiplot layout 1,2 title "In-memory hits from T threads, 16 cores (device-latency-2026-11-26, threads pinned)"
set logscale x 2; set xrange [0.85:19]; set xtics (1, 2, 4, 8, 16); set xlabel "threads T"
set title "per-hit time on one program, T threads / one thread"
set yrange [0:1.6]; set ylabel "ratio"; set key top left
plot 1.2 w l lt 2 t "goal: 1.2x", "$tmp/threads" u 1:2 w lp lt 1 t "kpc, one 4 KB program"
set title "hits per second"
set logscale y; set yrange [2:200]; set ylabel "million hits/s"
set ytics (2, 5, 10, 20, 50, 100, 200)
plot "$tmp/threads" u 1:4 w lp lt 2 t "floor: XXH3-128 + mutex, same threads", \
     "" u 1:3 w lp lt 1 t "kpc, one source", "" u 1:5 w lp lt 3 t "kpc, a source each"
unset multiplot
EOF

# ---- beside the compilers' own caches --------------------------------------------------
nv_json=$results/bench-device-2026-11-26.json
{
  for c in "cold:one cold\\nprocess" "newproc_warm:new-process\\nwarm" "inproc_warm:in-process\\nwarm" \
           "storm:16 cold\\nprocesses"; do
    id=${c%%:*} name=${c#*:}
    echo "\"$name\" $(raw_s "$nv_json" nvrtc_cache_${id}_none) $(raw_s "$nv_json" nvrtc_cache_${id}_nvrtc)" \
         "$(raw_s "$nv_json" nvrtc_cache_${id}_kpc)"
  done
} >"$tmp/nvrtc"
awk -F'\t' '!/^#/ { printf "\"%s\" %s %s\n", $1, $3, $2 }' "$results/comgr-sid-2026-11-26/figures.tsv" \
  | sed 's/ (wall)//; s/4 processes x 3 kernels, cold/4 x 3 cold\\nprocesses/; s/ warm request/\\nwarm request/' \
  >"$tmp/comgr"
gnuplot <<EOF
$style
set terminal svg size 1060,480 dynamic enhanced font "Helvetica,13" background rgb "white"
set output "$out/caches.svg"
set multiplot layout 1,2 title "kpc beside the compilers' own caches (log scale)"
set style data histograms; set style histogram clustered gap 1; set style fill solid 0.85 noborder
set logscale y; $time_tics; set key outside top center horizontal; set bmargin 4
set title "NVRTC 13, 8 kernels, 16 cores (device-2026-11-26)"
set yrange [3e-6:30]
plot "$tmp/nvrtc" u 2:xtic(1) lc rgb "#aaaaaa" t "no cache", "" u 3 lc rgb "#2ca02c" t "NVRTC's cache", \
     "" u 4 lc rgb "#1f77b4" t "kpc"
set title "hipRTC + comgr 3, sid, 2 cores (section 11)"
set yrange [5e-8:100]
plot "$tmp/comgr" u 2:xtic(1) lc rgb "#9467bd" t "plain hipRTC + comgr's cache", "" u 3 lc rgb "#1f77b4" t "kpc"
unset multiplot
EOF
ls "$out"/{storm,levels,threads,caches}.svg
