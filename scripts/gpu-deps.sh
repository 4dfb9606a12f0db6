# gpu-deps.sh - sourced by the GPU-machine scripts (gpu-run.sh, gpu-dropin.sh): the build
# dependencies the lent GPU machine lacks (it has no network), unpacked with dpkg -x from
# the Debian .deb files carried in $debs (see docs/gpu-run.md) into the private prefix
# $deps; nothing is installed into the system. Needs $debs, $deps and the caller's
# check() (which records a failed step).
export LD_LIBRARY_PATH=$deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# PKG_CONFIG_LIBDIR, not PKG_CONFIG_PATH: the install test sets PKG_CONFIG_PATH to the
# installed kpc.pc alone, and kpc.pc's requirements must still be found
export PKG_CONFIG_LIBDIR=$deps/usr/lib/x86_64-linux-gnu/pkgconfig:$deps/usr/share/pkgconfig:/usr/local/lib/x86_64-linux-gnu/pkgconfig:/usr/local/lib/pkgconfig:/usr/local/share/pkgconfig:/usr/lib/x86_64-linux-gnu/pkgconfig:/usr/lib/pkgconfig:/usr/share/pkgconfig
# KPC_GPU_FORCE_DEBS=1 takes every module from the .debs (to try this step elsewhere)
have_pc() { [ "${KPC_GPU_FORCE_DEBS:-0}" != 1 ] && { [ -f "/usr/lib/x86_64-linux-gnu/pkgconfig/$1.pc" ] || [ -f "/usr/share/pkgconfig/$1.pc" ] ||
            [ -f "/usr/lib/pkgconfig/$1.pc" ]; }; }
unpack() { # debs of one module, by package name
  for p in "$@"; do
    local f
    f=$(ls "$debs/${p}"_*.deb 2>/dev/null | head -1)
    if [ -z "$f" ]; then echo "missing $p in $debs"; return 1; fi
    dpkg -x "$f" "$deps" || return 1
    echo "unpacked $(basename "$f")"
  done
}
mkdir -p "$deps"
have_pc libbsd || check "unpack libbsd" unpack libbsd0 libbsd-dev libmd0 libmd-dev
have_pc libxxhash || check "unpack libxxhash" unpack libxxhash0 libxxhash-dev
have_pc check || check "unpack check" unpack check libsubunit0 libsubunit-dev
have_pc libcjson || check "unpack cJSON" unpack libcjson1 libcjson-dev
if ! command -v pkg-config >/dev/null; then
  check "unpack pkg-config" unpack pkgconf pkgconf-bin libpkgconf3 pkg-config
  export PATH=$deps/usr/bin:$PATH
fi
# the packages name /usr in their .pc files and in libbsd's linker script: point them here
for f in "$deps"/usr/lib/x86_64-linux-gnu/pkgconfig/*.pc "$deps"/usr/share/pkgconfig/*.pc; do
  [ -f "$f" ] && sed -i -E "s#^(prefix|exec_prefix|libdir|includedir)=/usr#\1=$deps/usr#" "$f"
done
for f in "$deps"/usr/lib/x86_64-linux-gnu/*.so; do
  [ -f "$f" ] && [ ! -L "$f" ] && grep -q "GNU ld script" "$f" 2>/dev/null &&
    sed -i "s#/usr/lib/#$deps/usr/lib/#g" "$f"
done
for m in libbsd libxxhash check libcjson; do
  echo "$m: $(pkg-config --modversion "$m" 2>&1) $(pkg-config --variable=prefix "$m" 2>/dev/null)"
done
