# device-deps.sh - sourced, not run: the build dependencies a machine without network
# lacks (the lent device machine), taken from Debian .deb files carried beside the tree
# (.carry/debs, fetched here with `apt-get download`: docs/gpu-run.md lists them),
# unpacked with dpkg -x under /tmp/kpc-deps/<name>/ (never over /), and the compiler, the
# linker, pkg-config and the loader pointed at them. bench-device.sh, gpu-run.sh and
# gpu-dropin.sh take their dependencies here.
#   kpc_deps_unpack_missing [DEBS]  each module the machine lacks, from DEBS (default
#                             .carry/debs); KPC_DEPS_FORCE=1 takes every one from the
#                             .debs (to try the unpacking on a machine that has them all)
#   kpc_deps_unpack NAME PKG...  those packages into /tmp/kpc-deps/NAME, and used
#   kpc_deps_use DIR          one unpacked tree
#   kpc_deps_use_unpacked     every one the usual build needs that is there (after
#                             bench-device.sh: a device A/B script's builds reuse them)

kpc_deps_use() {
  local dir=$1
  # PKG_CONFIG_LIBDIR, not PKG_CONFIG_PATH: the install test sets PKG_CONFIG_PATH to the
  # installed kpc.pc alone, and kpc.pc's requirements must still be found
  local sys
  sys=$(pkg-config --variable pc_path pkg-config 2>/dev/null) ||
    sys=/usr/local/lib/x86_64-linux-gnu/pkgconfig:/usr/local/lib/pkgconfig:/usr/local/share/pkgconfig:/usr/lib/x86_64-linux-gnu/pkgconfig:/usr/lib/pkgconfig:/usr/share/pkgconfig
  export PKG_CONFIG_LIBDIR=$dir/usr/lib/x86_64-linux-gnu/pkgconfig:$dir/usr/share/pkgconfig:${PKG_CONFIG_LIBDIR:-$sys}
  export LD_LIBRARY_PATH=$dir/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  # the compiler's and the linker's too: Debian 12's hiredis.pc names /usr/lib (not the
  # multiarch directory) and its include directory one level down from what kpc includes
  export LIBRARY_PATH=$dir/usr/lib/x86_64-linux-gnu${LIBRARY_PATH:+:$LIBRARY_PATH}
  export CPATH=$dir/usr/include${CPATH:+:$CPATH}
  export PATH=$dir/usr/bin:$PATH
}

kpc_deps_unpack() {
  local dir=/tmp/kpc-deps/$1 debs=${KPC_DEPS_DEBS:-.carry/debs} p f; shift
  mkdir -p "$dir"
  echo "device-deps: unpacking $* from $debs into $dir"
  for p; do
    f=$(ls "$debs/${p}"_*.deb 2>/dev/null | head -1)
    if [ -z "$f" ]; then echo "device-deps: no $p in $debs"; return 1; fi
    dpkg -x "$f" "$dir" || return 1
  done
  # the packages name /usr: point their pkg-config files and linker scripts here
  find "$dir" \( -name '*.pc' -o -name '*.so' -type f \) -exec grep -Il '/usr' {} + 2>/dev/null |
    xargs -r sed -i "s|=/usr|=$dir/usr|g; s|(/usr/|($dir/usr/|g"
  kpc_deps_use "$dir"
}

# Whether pkg-config module $1 is there to build with, and command $1 there to run (not
# when KPC_DEPS_FORCE=1).
kpc_deps_have() { [ "${KPC_DEPS_FORCE:-0}" != 1 ] && pkg-config --exists "$1"; }
kpc_deps_have_command() { [ "${KPC_DEPS_FORCE:-0}" != 1 ] && command -v "$1" >/dev/null; }

kpc_deps_unpack_missing() {
  export KPC_DEPS_DEBS=${1:-${KPC_DEPS_DEBS:-.carry/debs}}
  kpc_deps_have_command pkg-config || kpc_deps_unpack pkgconf pkgconf-bin libpkgconf3 pkgconf || return 1
  kpc_deps_have libbsd || kpc_deps_unpack bsd libbsd-dev libbsd0 libmd-dev libmd0 || return 1
  kpc_deps_have libxxhash || kpc_deps_unpack xxhash libxxhash-dev libxxhash0 || return 1
  kpc_deps_have libcjson || kpc_deps_unpack cjson libcjson-dev libcjson1 || return 1
  kpc_deps_have libzstd || kpc_deps_unpack zstd libzstd-dev libzstd1 || return 1
  kpc_deps_have check || kpc_deps_unpack check check libsubunit0 libsubunit-dev || return 1
  # the cluster tier: a build configured with it needs them whatever runs after
  kpc_deps_have hiredis || kpc_deps_unpack hiredis libhiredis-dev libhiredis0.14 || return 1
  kpc_deps_have libsodium || kpc_deps_unpack sodium libsodium-dev libsodium23 || return 1
  kpc_deps_have_command redis-server || kpc_deps_unpack redis redis-server redis-tools libjemalloc2 liblzf1 ||
    return 1
  local m
  for m in libbsd libxxhash libcjson libzstd check hiredis libsodium; do
    echo "device-deps: $m $(pkg-config --modversion "$m" 2>&1)"
  done
}

kpc_deps_use_unpacked() {
  local dir
  for dir in /tmp/kpc-deps/*/; do
    [ -d "$dir" ] && kpc_deps_use "${dir%/}"
  done
  return 0
}

# kpc_ab_build TARGET...: each tree of an A/B comparison, .carry/ab/<name> (a copy of the
# repository at one commit), built Release for the NVIDIA platform in /tmp/ab-<name> with
# just the named targets; its names in KPC_AB_NAMES. Returns 1 (said) if one fails.
kpc_ab_build() {
  local n
  KPC_AB_NAMES=$(ls .carry/ab)
  for n in $KPC_AB_NAMES; do
    cmake -S .carry/ab/$n -B /tmp/ab-$n -DCMAKE_BUILD_TYPE=Release -DKPC_BUILD_TESTS=OFF -DKPC_BUILD_BENCH=ON \
      -DKPC_BUILD_MAN=OFF -DKPC_WERROR=OFF -DKPC_PLATFORM=nvidia >/dev/null &&
      cmake --build /tmp/ab-$n -j"$(nproc)" --target "$@" >/dev/null || { echo "$n build failed"; return 1; }
  done
}

# kpc_ab_alternate TIMES LABEL AWK BENCH [ARG...]: BENCH ARG... of each tree built by
# kpc_ab_build (or of /tmp/ab-<name> for each name in KPC_AB_NAMES), the trees taking
# turns TIMES times; a line each run: LABEL (if any), the tree's name, and what AWK
# (fields split at tabs) prints of the run's output.
kpc_ab_alternate() {
  local times=$1 label=$2 prog=$3 bench=$4 i n
  shift 4
  for ((i = 0; i < times; i++)); do
    for n in $KPC_AB_NAMES; do
      printf '%s%s ' "${label:+$label }" "$n"
      /tmp/ab-$n/bench/$bench "$@" 2>&1 | awk -F'\t' "$prog"
      echo
    done
  done
}
