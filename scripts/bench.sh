#!/usr/bin/env bash
# bench.sh - kpc's benchmarks, end to end, in one run.
#
# Installs what they need (scripts/setup.sh for the build, plus hipcc, ccache and
# redis-server where their benches run), builds a Release
# tree in build-bench/, runs every program of tests/bench/ and prints one table: figure,
# value, the reference it is held against, the reference's value, the ratio, the goal
# and whether it was met. It writes the rows as JSON to tests/bench/results/bench.json and puts
# the table, the machine and the exact command into docs/benchmarks.md (the section of
# this machine, between its markers). Nothing here asserts a timing; a missed goal is a
# row marked "no".
#
#   scripts/bench.sh                    the full run (7 to 15 min on 2 cores)
#   scripts/bench.sh --quick            fewer repeats and smaller sizes: a smoke test; it
#                                       prints the table but leaves docs/ and
#                                       tests/bench/results/ alone (its JSON goes to
#                                       build-bench/bench-quick.json)
#   scripts/bench.sh --only storm,disk  some of: hit xproc storm index disk ccache cluster scale
#                                       manifest comgr (--only comgr alone writes its own section
#                                       of docs/benchmarks.md, "comgr")
#   scripts/bench.sh --no-docs          do not touch docs/benchmarks.md
#   scripts/bench.sh --plot             no run: draw docs/plots/*.svg from the recorded runs in
#                                       tests/bench/results/ (scripts/bench-plot.sh, gnuplot)
#   scripts/bench.sh --render DIR       no run: render DIR/rows.tsv (with DIR/machine.txt,
#                                       DIR/command.txt, DIR/section.txt, and DIR/date.txt
#                                       and DIR/commit.txt where present), e.g. what
#                                       scripts/bench-device.sh left on the 16-core machine
#
# What the full run runs (medians over repeated runs, warm-up excluded; see each
# program's header comment for its method):
#   bench_hit                      1  in-memory hit, 1 KB .. 256 KB; 1 .. nproc threads; the
#                                     4 KB hit beside its own floor (XXH3-128 of the request
#                                     + the map's lookup, same process: goal 1.1x) and T
#                                     threads on one program beside one thread (goal 1.2x)
#   bench_xproc                    2  cross-process warm hit vs the real compile; the same
#                                     hit from the shared tier (KPC_SHARED_DIR)
#   bench_storm --procs 2,8,32,64  3  cold storm, K = 16: kpc (3 runs each), no-shm and
#                                     KPC_DISABLE (1 run each)
#     --batch-procs 2,8,32         9  the same-order storm, one kpc_program_get at a time
#                                     against kpc_program_get_many (3 runs each)
#   bench_index                    4  index lookup / claim / eviction at 1k, 64k, 1M
#   bench_disk --files 100000      5  kpc ls / verify / prune over 100k files, on /tmp
#                                     (the disk) and on /dev/shm (tmpfs: no device cost)
#   bench_ccache                   6  ccache + hipcc against kpc compile, cold and warm
#   bench_cluster                  8  the cluster tier: 4 hosts x 8 processes x 8 sources
#                                     with and without Redis; the same-order storm with
#                                     kpc_program_get_many (compiles sleeping 200 ms) against
#                                     ceil(K / (hosts x ranks)) x 200 ms + its warm wall;
#                                     the remote warm hit beside the disk hit and the compile
#                                     (root: simulated hosts)
#   bench_scale --hosts 16         12 16 simulated hosts x 4 ranks x 32 keys cold and warm
#                                     against one Redis server and a 3-primary Redis
#                                     Cluster: builds, wall against its bound, per node
#                                     commands, bytes, peak clients (root)
#   bench_manifest                 7  the hit of a source with 50 included files (in-memory
#                                     and new process) beside the same headers in memory;
#                                     the new-process hit beside the no-include hit + the
#                                     floor (50 fstatat in a fresh process; goal + 15 us)
#   bench_comgr --procs 8          10 kpc beside comgr's own cache (plain hipRTC with it on):
#                                     warm requests in a new process and in-process, 8
#                                     processes x 4 kernels cold, the disk each keeps
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

quick=0 docs=1 only="" render=""
while (($#)); do
  case $1 in
    --quick) quick=1 docs=0 ;;
    --no-docs) docs=0 ;;
    --docs) docs=1 ;;
    --only) only=$2; shift ;;
    --render) render=$2; shift ;;
    --plot) exec scripts/bench-plot.sh ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
command_line="scripts/bench.sh"
((quick)) && command_line+=" --quick"
[ -n "$only" ] && command_line+=" --only $only"

want() { [ -z "$only" ] || [[ ",$only," == *",$1,"* ]]; }

machine_text() {
  local cpu cores mem kernel os virt=""
  cpu=$(grep -m1 '^model name' /proc/cpuinfo | sed 's/^[^:]*: *//')
  cores=$(nproc)
  mem=$(awk '/^MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)
  kernel=$(uname -r)
  os=$(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME")
  if grep -qw pvm /proc/cmdline 2>/dev/null || grep -q 'pvm_' /proc/cmdline 2>/dev/null; then
    virt=", a paravirtualized (PVM) guest"
  elif command -v systemd-detect-virt >/dev/null && [ "$(systemd-detect-virt 2>/dev/null)" != none ]; then
    virt=", a $(systemd-detect-virt) guest"
  fi
  echo "$cores cores ($cpu), $mem, $os, Linux $kernel$virt"
}

# ---- rendering: table on stdout, JSON, the docs section ------------------------------
# rows.tsv: id figure value reference reference_value ratio goal met raw unit
print_table() { # rows
  awk -F'\t' '
    { n++; for (i = 2; i <= 8; i++) { c[n, i] = $i; if (length($i) > w[i]) w[i] = length($i) } }
    END {
      split("figure value reference reference_value ratio goal met?", h, " ")
      for (i = 2; i <= 8; i++) if (length(h[i - 1]) > w[i]) w[i] = length(h[i - 1])
      line = ""; sep = ""
      for (i = 2; i <= 8; i++) { line = line sprintf("%-*s  ", w[i], h[i - 1]); sep = sep sprintf("%s  ", dashes(w[i])) }
      print line; print sep
      for (r = 1; r <= n; r++) {
        line = ""
        for (i = 2; i <= 8; i++) line = line sprintf("%-*s  ", w[i], c[r, i])
        print line
      }
    }
    function dashes(k,   s) { s = ""; while (k-- > 0) s = s "-"; return s }' "$1"
}

json_escape() { sed 's/\\/\\\\/g; s/"/\\"/g'; }

write_json() { # rows machine command section date commit out
  local rows=$1 out=$7
  {
    printf '{\n  "section": "%s",\n' "$4"
    printf '  "machine": "%s",\n' "$(printf '%s' "$2" | json_escape)"
    printf '  "command": "%s",\n' "$(printf '%s' "$3" | json_escape)"
    printf '  "date": "%s",\n  "commit": "%s",\n  "rows": [\n' "$5" "$6"
    awk -F'\t' '
      function q(s) { gsub(/\\/, "\\\\", s); gsub(/"/, "\\\"", s); return "\"" s "\"" }
      {
        met = $8 == "yes" ? "true" : $8 == "no" ? "false" : "null"
        raw = $9 == "" ? "null" : $9
        printf "%s    {\"id\": %s, \"figure\": %s, \"value\": %s, \"reference\": %s, \"reference_value\": %s, \"ratio\": %s, \"goal\": %s, \"met\": %s, \"raw\": %s, \"unit\": %s}", \
          (NR > 1 ? ",\n" : ""), q($1), q($2), q($3), q($4), q($5), q($6), q($7), met, raw, q($10)
      }
      END { print "" }' "$rows"
    printf '  ]\n}\n'
  } >"$out"
}

markdown_section() { # rows machine command section date commit
  local rows=$1
  echo "<!-- bench:$4:begin (written by scripts/bench.sh; do not edit by hand) -->"
  echo
  echo "Machine: $2."
  echo
  echo "Command: \`$3\` (commit $6, $5)."
  echo
  echo "| figure | value | reference | reference value | ratio | goal | met? |"
  echo "| --- | --- | --- | --- | --- | --- | --- |"
  awk -F'\t' '{ for (i = 2; i <= 8; i++) gsub(/\|/, "\\|", $i)
                printf "| %s | %s | %s | %s | %s | %s | %s |\n", $2, $3, $4, $5, $6, $7, $8 }' "$rows"
  echo
  echo "<!-- bench:$4:end -->"
}

update_docs() { # section file-with-new-section
  local doc=docs/benchmarks.md section=$1 new=$2
  [ -f "$doc" ] || printf '# kpc benchmarks\n\n' >"$doc"
  if grep -q "<!-- bench:$section:begin" "$doc"; then
    awk -v s="$section" -v f="$new" '
      index($0, "<!-- bench:" s ":begin") == 1 { while ((getline l < f) > 0) print l; skip = 1; next }
      index($0, "<!-- bench:" s ":end") == 1 { skip = 0; next }
      !skip' "$doc" >"$doc.tmp" && mv "$doc.tmp" "$doc"
  else
    { echo; cat "$new"; } >>"$doc"
  fi
}

render() { # rows machine command section json [run's folder]
  local rows=$1 machine=$2 cmd=$3 section=$4 json=$5 from=${6:-} date commit
  date=$(date -u +%Y-%m-%dT%H:%MZ)
  commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
  [ -n "$(git status --porcelain -- src shm include 2>/dev/null)" ] && commit+="+changes"
  # a run made elsewhere says when it ran (date.txt) and, written beside its rows by
  # hand, at which commit (commit.txt)
  [ -n "$from" ] && [ -s "$from/date.txt" ] && date=$(cat "$from/date.txt")
  [ -n "$from" ] && [ -s "$from/commit.txt" ] && commit=$(cat "$from/commit.txt")
  echo
  echo "kpc benchmarks on $machine"
  echo
  print_table "$rows"
  mkdir -p "$(dirname "$json")"
  write_json "$rows" "$machine" "$cmd" "$section" "$date" "$commit" "$json"
  echo
  echo "bench: rows written to $json"
  if ((docs)); then
    local md
    md=$(mktemp)
    markdown_section "$rows" "$machine" "$cmd" "$section" "$date" "$commit" >"$md"
    update_docs "$section" "$md"
    rm -f "$md"
    echo "bench: docs/benchmarks.md section \"$section\" updated"
  fi
}

if [ -n "$render" ]; then
  [ -f "$render/rows.tsv" ] || { echo "bench.sh: no $render/rows.tsv" >&2; exit 1; }
  section=$(cat "$render/section.txt" 2>/dev/null || echo device)
  render "$render/rows.tsv" "$(cat "$render/machine.txt")" "$(cat "$render/command.txt")" "$section" \
    "tests/bench/results/bench-$section.json" "$render"
  exit 0
fi

# ---- set-up: build dependencies, ccache, the Release tree -----------------------------
# hipcc and ccache are for the ccache comparison only: the main set-up does not install them
# (gnuplot-nox for --plot: the figures drawn from the runs this one records)
# redis-server for the cluster tier's benches (each starts its own servers)
also=(gnuplot-nox)
if want ccache; then also+=(hipcc ccache); fi
if want cluster || want scale; then also+=(redis-server); fi
scripts/setup.sh --also "${also[@]}"
build=${KPC_BENCH_BUILD_DIR:-build-bench}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DKPC_BUILD_TESTS=OFF -DKPC_BUILD_BENCH=ON -DKPC_BUILD_MAN=OFF \
  ${KPC_CMAKE_ARGS:-} >/dev/null
cmake --build "$build" -j"$(nproc)" >/dev/null
bin=$root/$build/bench

# the benchmarks make their own cache dirs; keep the user's settings out of them
unset KPC_CACHE_DIR KPC_DISABLE KPC_CACHE_MAX_SIZE KPC_MEM_MAX_PROGRAMS KPC_SHM_ENTRIES
export KPC_LOG=error
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export KPC_BENCH_ROWS=$work/rows.tsv
: >"$KPC_BENCH_ROWS"
mkdir -p tests/bench/results
log=$root/$build/bench.log # the programs' progress and their own lines; build-*/ is not tracked
: >"$log"
start=$(date +%s)

step() { # name command...
  local name=$1 t0; shift
  t0=$(date +%s)
  echo "bench: == $name: $*" | tee -a "$log" >&2
  "$@" 2>>"$log" || { echo "bench: $name failed (see $log)" >&2; tail -5 "$log" >&2; exit 1; }
  echo "bench: == $name done in $(($(date +%s) - t0)) s" | tee -a "$log" >&2
}

if ((quick)); then
  want hit && step hit "$bin/bench_hit" --rounds 5 --seconds 0.1
  want xproc && step xproc "$bin/bench_xproc" --runs 5
  want storm && step storm "$bin/bench_storm" --procs 2,8 --repeats 1 --noindex-max 8 --batch-procs 2,8
  want index && step index "$bin/bench_index" --sizes 1000,64000 --rounds 5
  want disk && step disk "$bin/bench_disk" --files 10000 --runs 1
  want ccache && step ccache "$bin/bench_ccache" --files 1 --runs 2
  want cluster && [ -x "$bin/bench_cluster" ] && step cluster "$bin/bench_cluster" --hosts 2 --procs 4 --k 4 --runs 5
  want scale && [ -x "$bin/bench_scale" ] && step scale "$bin/bench_scale" --hosts 4 --procs 2 --k 8
  want manifest && step manifest "$bin/bench_manifest" --rounds 5 --runs 3
  want comgr && step comgr "$bin/bench_comgr" --kernels 2 --procs 2 --runs 2
else
  want hit && step hit "$bin/bench_hit"
  want xproc && step xproc "$bin/bench_xproc"
  want storm && step storm "$bin/bench_storm" --procs 2,8,32,64 --k 16 --repeats 3 --noindex-max 64 \
    --batch-procs 2,8,32
  want index && step index "$bin/bench_index"
  if want disk; then
    step disk "$bin/bench_disk" --files 100000
    [ -d /dev/shm ] && KPC_BENCH_TMP=/dev/shm step disk-tmpfs "$bin/bench_disk" --files 100000 --tag tmpfs
  fi
  want ccache && step ccache "$bin/bench_ccache"
  want cluster && [ -x "$bin/bench_cluster" ] && step cluster "$bin/bench_cluster" --hosts 4 --procs 8 --k 8 --runs 15
  want scale && [ -x "$bin/bench_scale" ] && step scale "$bin/bench_scale" --hosts 16 --procs 4 --k 32
  want manifest && step manifest "$bin/bench_manifest"
  want comgr && step comgr "$bin/bench_comgr" --kernels 4 --procs 8 --runs 5
fi
echo "bench: all done in $(($(date +%s) - start)) s; load average now $(cut -d' ' -f1-3 /proc/loadavg)" \
  | tee -a "$log" >&2

section=local json=tests/bench/results/bench.json
# comgr alone: a section of its own, run where comgr has a cache (sid's ROCm, scripts/matrix.sh)
[ "$only" = comgr ] && section=comgr json=tests/bench/results/bench-comgr.json
# a smoke test's figures are not results: they stay beside its log, out of the tracked tree
((quick)) && json=$root/$build/bench-quick.json
render "$KPC_BENCH_ROWS" "$(machine_text)" "$command_line" "$section" "$json"
