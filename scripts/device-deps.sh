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
