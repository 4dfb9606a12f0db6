#!/usr/bin/env bash
# matrix.sh - the README's two commands on every Debian release whose ROCm kpc supports,
# each in a clean root, and one table of what came out. Run it before a release: it takes
# tens of minutes a release (the packages, the build, the suite), too slow for CI.
#
#   bookworm (Debian 12)  ROCm 5.2: hipRTC inside libamdhip64.so.5, comgr 2.4
#   trixie   (Debian 13)  ROCm 5.7: hipRTC inside libamdhip64.so.5, comgr 2.6
#   sid      (unstable)   ROCm 6.4: libhiprtc.so.6 beside libamdhip64.so.6, comgr 3 (7.x)
#
# For each release: a minimal root is bootstrapped once (debootstrap --variant=minbase,
# from the mirror this machine's apt uses) and kept in DIR/RELEASE; every run copies
# it afresh to DIR/run/RELEASE, clones the current commit (HEAD, not uncommitted changes)
# into /root/kpc there and runs, as root, `scripts/demo.sh` then `scripts/test.sh` once
# per pass (KPC_TEST_PASSES=PASS: the first installs the test packages; each ends with
# its own verdict, so the table gives each pass's counts) inside it as a container
# would: its own mount, PID and IPC namespaces, the root bound on itself and
# pivot_root'ed into (so `/` is a mount point and nsenter cannot leave it), with a fresh
# /proc, /dev, and tmpfs /dev/shm, /tmp and /run. The downloaded packages are kept
# in DIR/apt/RELEASE between runs. Logs: DIR/logs/RELEASE-demo.log and
# DIR/logs/RELEASE-test-PASS.log; the last run's root stays until the next run of that
# release (--shell enters it).
#
# Two tables: the packages' versions, the test verdict (passed / skipped / failed summed
# over the passes), and the demo's figures: the cold first pass (4 kernels built, new
# processes, the sum of their compile times), the warm second pass (the same 4 from the
# cache in new processes, the sum), and a hit from a process's own map; then each pass's
# counts per release (passed / skipped / failed, or the reason a whole pass skipped), with
# Open MPI's and the fuzzers' clang's versions. Then every skip, named, per release.
#
# --packages instead: the Debian packages (scripts/package-root.sh) on each release,
# built in one clean root and installed, used by a HIP example as a user, and purged in
# another, where nothing else was installed; one line a release. Log:
# DIR/logs/RELEASE-packages.log.
#
# usage: scripts/matrix.sh [--passes "plain asan ..."] [--dir DIR] [--packages] [RELEASE...]
#        scripts/matrix.sh --shell RELEASE [COMMAND...]   a shell (or COMMAND) in the
#                                             last run's root, in /root/kpc
#        scripts/matrix.sh --table [--passes P] [RELEASE...]   the tables again, from the
#                                             logs of each release's last run (a pass
#                                             that run left out: "not run")
#   RELEASE      bookworm, trixie, sid (default: all three, in that order)
#   --passes P   the passes of scripts/test.sh to run, each on its own (default: every
#                pass, as its `passes=(...)` line lists them)
#   --dir DIR    where roots, packages and logs live (default /var/cache/kpc-matrix,
#                or KPC_MATRIX_DIR); needs a few GB a release
#   KPC_MATRIX_MIRROR  the Debian mirror (default: the first of this machine's apt sources)
# Needs root (debootstrap, namespaces), git, and debootstrap (installed when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

dir=${KPC_MATRIX_DIR:-/var/cache/kpc-matrix}
passes=${KPC_TEST_PASSES:-}
shell="" shell_cmd="" packages=0 table_only=0
releases=()
while (($#)); do
  case $1 in
    --passes) passes=$2; shift ;;
    --dir) dir=$2; shift ;;
    --packages) packages=1 ;;
    --shell) shell=$2; shift 2; shell_cmd=$*; break ;;
    --table) table_only=1 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    bookworm|trixie|sid) releases+=("$1") ;;
    *) echo "matrix: unknown argument '$1' (see scripts/matrix.sh --help)" >&2; exit 2 ;;
  esac
  shift
done
((${#releases[@]})) || releases=(bookworm trixie sid)

if [ "$(id -u)" -ne 0 ]; then
  echo "matrix: needs root (debootstrap and mount namespaces); run it as root or with sudo" >&2
  exit 1
fi

# container ROOT COMMAND: run COMMAND (a bash script) as root inside ROOT, isolated as
# the header says; its status is the command's
container() {
  local root=$1 cmd=$2
  cp /etc/resolv.conf "$root/etc/resolv.conf" # apt-get inside needs the host's resolver
  unshare --mount --pid --ipc --fork --propagation private /bin/bash -euc '
    root=$1 apt=$2 cmd=$3
    mount --bind "$root" "$root"
    mount -t proc proc "$root/proc"
    mount --rbind /sys "$root/sys"
    mount --rbind /dev "$root/dev"
    mount -t tmpfs -o mode=1777,size=4g kpc-matrix-shm "$root/dev/shm"
    mount -t tmpfs -o mode=1777 kpc-matrix-tmp "$root/tmp"
    mount -t tmpfs -o mode=755 kpc-matrix-run "$root/run"
    mkdir -p "$apt" "$root/var/cache/apt/archives"
    mount --bind "$apt" "$root/var/cache/apt/archives"
    cd "$root"
    mkdir -p .old-root
    pivot_root . .old-root
    cd /
    umount -l /.old-root
    rmdir /.old-root
    exec env -i HOME=/root TERM="${TERM:-dumb}" LANG=C.UTF-8 \
      PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin /bin/bash -c "$cmd"
  ' container "$root" "$dir/apt/$(basename "$root")" "$cmd"
}

if [ -n "$shell" ]; then
  [ -d "$dir/run/$shell/root/kpc" ] || { echo "matrix: no run of $shell in $dir/run" >&2; exit 1; }
  container "$dir/run/$shell" "cd /root/kpc && ${shell_cmd:-exec bash -i}"
  exit
fi

command -v debootstrap >/dev/null || {
  echo "matrix: installing debootstrap"
  apt-get install -y --no-install-recommends debootstrap >/dev/null
}
mirror=${KPC_MATRIX_MIRROR:-$( (grep -rhoE '^(URIs:|deb) +https?://[^ ]+/debian/?( |$)' \
  /etc/apt/sources.list /etc/apt/sources.list.d 2>/dev/null || true) | head -n 1 | awk '{print $2}')}
mirror=${mirror:-http://deb.debian.org/debian}
commit=$(git rev-parse HEAD)
# the passes: those asked for, or every pass of the commit's test.sh
[ -n "$passes" ] || passes=$(git show "$commit:scripts/test.sh" | sed -nE 's/^passes=\((.*)\)$/\1/p' | head -n 1)
[ -n "$passes" ] || { echo "matrix: no passes=(...) line in scripts/test.sh; name them with --passes" >&2; exit 2; }
read -r -a pass_list <<<"$passes"
((table_only)) || [ -z "$(git status --porcelain --untracked-files=no)" ] ||
  echo "matrix: uncommitted changes are not tested: the roots get commit ${commit:0:12}" >&2
mkdir -p "$dir/run" "$dir/apt" "$dir/logs"

# figures RELEASE: one table row from the logs of its run
row() {
  local rel=$1 demo=$dir/logs/$1-demo.log versions=$dir/logs/$1-versions.txt
  local hip rtc comgr gcc passed=0 skipped=0 failed=0 p counts a b c cold warm inproc
  pkg() { awk -v re="$1" '$1 ~ re && $2 != "" { print $2; exit }' "$versions" 2>/dev/null; }
  hip=$(pkg '^libamdhip64-[0-9]+$'); rtc=$(pkg '^libhiprtc[0-9]+$'); comgr=$(pkg '^libamd-comgr[0-9]+$')
  [ -n "$rtc" ] && rtc="libhiprtc.so.${rtc%%.*} $rtc" || rtc="in libamdhip64.so.${hip%%.*}"
  gcc=$(awk '$1 == "gcc" { print $2; exit }' "$versions" 2>/dev/null)
  for p in "${pass_list[@]}"; do
    if counts=$(verdict "$rel" "$p"); then
      read -r a b c <<<"$counts"
      passed=$((passed + a)) skipped=$((skipped + b)) failed=$((failed + c))
    elif (($? == 1)); then
      failed=$((failed + 1)) # no verdict: the pass did not finish
    fi
  done
  # the demo's passes: "built  3862.315 ms ..." then "hit  0.532 ms ..."
  cold=$(awk '$1 == "built" && $3 == "ms" { s += $2; n++ } END { if (n) printf "%.0f ms (%d)", s, n }' "$demo" 2>/dev/null)
  warm=$(awk '$1 == "hit" && $3 == "ms" { s += $2; n++ } END { if (n) printf "%.1f ms (%d)", s, n }' "$demo" 2>/dev/null)
  inproc=$(awk '/^get 3: / { print $(NF-3), $(NF-2); exit }' "$demo" 2>/dev/null)
  printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$rel" "${hip:-?}" "$rtc" \
    "${comgr:-?}" "${gcc:-?}" "$passed" "$skipped" "$failed" "${cold:-demo failed}" \
    "${warm:-demo failed}" "${inproc:-?}"
}

# packages RELEASE: scripts/package-root.sh's build in one clean root, its install of
# what that built in another; one line of what came out
packages_on() {
  local rel=$1 log=$dir/logs/$1-packages.log b=$dir/run/$1-build i=$dir/run/$1-install r
  echo "== $rel: the packages, built in $b, installed in $i (log: $log)"
  rm -rf "$b" "$i"
  for r in "$b" "$i"; do
    cp -a "$dir/$rel" "$r"
    git clone --quiet --no-checkout "$repo" "$r/root/kpc"
    git -C "$r/root/kpc" checkout --quiet --detach "$commit"
  done
  if container "$b" "cd /root/kpc && scripts/package-root.sh build" >"$log" 2>&1 &&
     mkdir -p "$i/root/debs" && cp "$b"/root/kpc/build-deb/deb/*.deb "$i/root/debs/" &&
     container "$i" "cd /root/kpc && scripts/package-root.sh install /root/debs" >>"$log" 2>&1; then
    packages_rows+=("| $rel | passed | $(sed -nE 's/^packages: +Need to get ([^ ]+ [kMG]?B\/)?([^ ]+ [kMG]?B) of archives.*/\2/p' "$log" | head -n 1) |")
  else
    packages_rows+=("| $rel | failed: $(grep -E '^packages: FAILED' "$log" | tail -n 1 | cut -d' ' -f3-) | |")
  fi
  grep -E '^packages: ' "$log" | sed 's/^/   /' || true
}
packages_rows=()

# verdict RELEASE PASS: "passed skipped failed" from that pass's verdict line; status 1
# where the pass left none, 2 where the run did not run it
verdict() {
  local line
  [ -f "$dir/logs/$1-test-$2.log" ] || return 2
  line=$(grep -E '^kpc tests: ' "$dir/logs/$1-test-$2.log" | tail -n 1)
  [ -n "$line" ] || return 1
  sed -nE 's/^kpc tests: ([0-9]+) passed, ([0-9]+) skipped, ([0-9]+) failed.*/\1 \2 \3/p' <<<"$line"
}

# pass_row RELEASE: one row of the second table: each pass's counts, or why it skipped
pass_row() {
  local rel=$1 versions=$dir/logs/$1-versions.txt p counts a b c why cells=""
  local mpi clang
  mpi=$(awk '$1 == "openmpi-bin" { print $2; exit }' "$versions" 2>/dev/null)
  clang=$(awk '$1 == "clang" { print $2; exit }' "$versions" 2>/dev/null)
  for p in "${pass_list[@]}"; do
    if ! counts=$(verdict "$rel" "$p"); then
      if (($? == 1)); then cells+=" no verdict (log: $rel-test-$p.log) |"; else cells+=" not run |"; fi
      continue
    fi
    read -r a b c <<<"$counts"
    # a pass that could not run at all: test.sh counts it one skip and says why
    why=$(sed -nE 's/^skipped: the .* pass: (.*)/\1/p' "$dir/logs/$rel-test-$p.log" | head -n 1)
    if [ -n "$why" ] && [ "$a$b$c" = 010 ]; then cells+=" skipped: $why |"; else cells+=" $a / $b / $c |"; fi
  done
  printf '| %s | %s | %s |%s\n' "$rel" "${mpi:-?}" "${clang:-?}" "$cells"
}

for rel in "${releases[@]}"; do
  ((table_only == 0)) || break
  base=$dir/$rel run=$dir/run/$rel
  if [ ! -d "$base" ]; then
    echo "== $rel: debootstrap --variant=minbase $rel from $mirror (once; kept in $base)"
    rm -rf "$base.tmp"
    debootstrap --variant=minbase "$rel" "$base.tmp" "$mirror" >"$dir/logs/$rel-debootstrap.log" 2>&1 || {
      echo "matrix: debootstrap of $rel failed: $dir/logs/$rel-debootstrap.log" >&2; exit 1; }
    # a mirror that is a snapshot of a past day serves Release files past their
    # Valid-Until; the root trusts them as debootstrap did
    echo 'Acquire::Check-Valid-Until "false";' >"$base.tmp/etc/apt/apt.conf.d/99kpc-matrix"
    mv "$base.tmp" "$base"
  fi
  if ((packages)); then packages_on "$rel"; continue; fi
  echo "== $rel: a clean root in $run, commit ${commit:0:12} in /root/kpc"
  rm -rf "$run"
  cp -a "$base" "$run"
  git clone --quiet --no-checkout "$repo" "$run/root/kpc"
  git -C "$run/root/kpc" checkout --quiet --detach "$commit"
  rm -f "$dir/logs/$rel-"{demo,test,versions,commit}.* "$dir/logs/$rel-test-"*.log
  echo "$commit" >"$dir/logs/$rel-commit.txt"
  echo "== $rel: scripts/demo.sh (log: $dir/logs/$rel-demo.log)"
  container "$run" "cd /root/kpc && scripts/demo.sh" >"$dir/logs/$rel-demo.log" 2>&1 ||
    echo "matrix: $rel: the demo failed (its log above)" >&2
  for p in "${pass_list[@]}"; do
    echo "== $rel: KPC_TEST_PASSES=$p scripts/test.sh (log: $dir/logs/$rel-test-$p.log)"
    container "$run" "cd /root/kpc && KPC_TEST_PASSES='$p' scripts/test.sh" \
      >"$dir/logs/$rel-test-$p.log" 2>&1 || true
    grep -E '^(kpc tests: |skipped: )' "$dir/logs/$rel-test-$p.log" | sed 's/^/   /' || true
  done
  container "$run" "dpkg-query -W -f='\${Package} \${Version}\n' 'libamdhip64-*' 'libhiprtc*' \
    'libamd-comgr*' openmpi-bin clang 2>/dev/null; echo gcc \$(gcc -dumpfullversion 2>/dev/null)" \
    >"$dir/logs/$rel-versions.txt" || true
done

if ((packages)); then
  printf '\nkpc packages, commit %s, %s\n\n| release | build, lintian, install, example, purge | download of the install |\n| --- | --- | ---: |\n' \
    "${commit:0:12}" "$(date -u +%Y-%m-%d)"
  printf '%s\n' "${packages_rows[@]}"
  [[ "${packages_rows[*]}" != *failed* ]]
  exit
fi
echo
runs=""
for rel in "${releases[@]}"; do
  runs+=" $rel $(cut -c1-12 "$dir/logs/$rel-commit.txt" 2>/dev/null || echo '?')"
done
echo "kpc release matrix, $(date -u +%Y-%m-%d), test passes: ${pass_list[*]}; commits:$runs"
echo
echo "| release | HIP runtime | hipRTC | comgr | GCC | passed | skipped | failed | cold: demo's builds | warm: its hits, new processes | hit in process |"
echo "| --- | --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"
for rel in "${releases[@]}"; do row "$rel"; done
echo
echo "Each pass (scripts/test.sh with KPC_TEST_PASSES=PASS): passed / skipped / failed"
echo
printf '| release | Open MPI | clang (fuzz) |'; printf ' %s |' "${pass_list[@]}"; echo
printf '| --- | --- | --- |'; printf ' ---: |%.0s' "${pass_list[@]}"; echo
for rel in "${releases[@]}"; do pass_row "$rel"; done
echo
for rel in "${releases[@]}"; do
  for p in "${pass_list[@]}"; do
    grep -hE '^skipped: ' "$dir/logs/$rel-test-$p.log" 2>/dev/null | sed "s/^skipped: /$rel: skipped: /" || true
  done
done
