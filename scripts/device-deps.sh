# device-deps.sh - sourced, not run: points the compiler, the linker, pkg-config and the
# loader at build dependencies unpacked (dpkg -x) under /tmp/kpc-deps/<name>/, as
# scripts/bench-device.sh unpacks them on the device machine from .carry/debs.
#   kpc_deps_use DIR          one unpacked tree
#   kpc_deps_use_unpacked     every one the usual build needs that is there (after
#                             bench-device.sh: a device A/B script's builds reuse them)

kpc_deps_use() {
  local dir=$1
  export PKG_CONFIG_PATH=$dir/usr/lib/x86_64-linux-gnu/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
  export LD_LIBRARY_PATH=$dir/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  # the compiler's and the linker's too: Debian 12's hiredis.pc names /usr/lib (not the
  # multiarch directory) and its include directory one level down from what kpc includes
  export LIBRARY_PATH=$dir/usr/lib/x86_64-linux-gnu${LIBRARY_PATH:+:$LIBRARY_PATH}
  export CPATH=$dir/usr/include${CPATH:+:$CPATH}
  export PATH=$dir/usr/bin:$PATH
}

kpc_deps_use_unpacked() {
  local m
  for m in pkgconf bsd xxhash cjson zstd hiredis sodium; do
    [ -d "/tmp/kpc-deps/$m" ] && kpc_deps_use "/tmp/kpc-deps/$m"
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
