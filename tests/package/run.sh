#!/usr/bin/env bash
# The Debian packages of scripts/package.sh: they build, lintian finds no error in them,
# each holds the files it should (and no other package holds them), their dependencies
# on Debian's packages were computed (dpkg-shlibdeps: the C library, libbsd), and the
# project's version is the same everywhere: the packages, the soname, kpc.pc, the CMake
# package and `kpc --version`. Installing them into a fresh Debian root is
# scripts/package-root.sh's (slow, it needs the mirror: scripts/matrix.sh --packages).
# Skipped, saying why, where dpkg-dev or lintian is missing (scripts/test.sh installs them).
# usage: run.sh SOURCE_DIR BINARY_DIR VERSION PLATFORM   (exit 77: skipped)
set -euo pipefail
src=$1 bin=$2 version=$3 platform=$4
for tool in dpkg-deb dpkg-shlibdeps lintian cpack; do
  command -v "$tool" >/dev/null ||
    { echo "package: skipped: no $tool here (Debian: apt-get install dpkg-dev lintian)"; exit 77; }
done
out=$bin/package-test
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "package: FAILED: $*"; exit 1; }

# the build and lintian (an error fails package.sh); lintian's Perl leaves its MLDBM files
# (mldbm-elf-*) in $TMPDIR: here, they go with the test's own directory
(cd "$src" && TMPDIR=$tmp scripts/package.sh --build-dir "$out" -DKPC_PLATFORM="$platform") >"$tmp/log" 2>&1 ||
  { cat "$tmp/log"; fail "scripts/package.sh (lintian's errors above, if it got that far)"; }
cat "$tmp/log"

ma=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
arch=$(dpkg --print-architecture)
lib=usr/lib/$ma
case $platform in
  nvidia) dropin=nvrtc ;;
  amd) dropin=hiprtc ;;
  *) dropin="" ;;
esac

# what each package holds: its files (directories left out), exactly
expect() { # PACKAGE FILE...: the package's files are FILE... and its docs
  local p=$1; shift
  local deb=$out/deb/${p}_${version}_$arch.deb
  [ -f "$deb" ] || fail "no $deb"
  printf '%s\n' "$@" usr/share/doc/"$p"/changelog.gz usr/share/doc/"$p"/copyright | sort >"$tmp/want"
  dpkg-deb --fsys-tarfile "$deb" | tar -t | grep -v '/$' | sed 's|^\./||' | sort >"$tmp/have"
  diff -u "$tmp/want" "$tmp/have" >"$tmp/diff" || { cat "$tmp/diff"; fail "$p holds other files than it should"; }
  [ "$(dpkg-deb -f "$deb" Version)" = "$version" ] || fail "$p's version is $(dpkg-deb -f "$deb" Version), not $version"
}
expect libkpc1 "$lib/libkpc.so.1" "$lib/libkpc.so.$version"
expect kpc usr/bin/kpc usr/bin/kpc-shm-reset usr/share/man/man1/kpc.1.gz usr/share/man/man1/kpc-shm-reset.1.gz
dev_dropin=()
if [ -n "$dropin" ]; then
  dev_dropin=("$lib/libkpc-$dropin.so" "$lib/pkgconfig/kpc-$dropin.pc"
              "$lib/cmake/kpc/kpc-${dropin}Targets.cmake" "$lib/cmake/kpc/kpc-${dropin}Targets-none.cmake")
  if [ "$dropin" = nvrtc ]; then
    expect libkpc-nvrtc1 "$lib/libkpc-nvrtc.so.1" "$lib/libkpc-nvrtc.so.$version" \
      "$lib/kpc/nvrtc/libnvrtc.so.13" "$lib/kpc/nvrtc/libnvrtc.so.12"
  else
    expect libkpc-hiprtc1 "$lib/libkpc-hiprtc.so.1" "$lib/libkpc-hiprtc.so.$version"
  fi
fi
expect libkpc-dev usr/include/kpc/kpc.h "$lib/libkpc.so" "$lib/libkpc.a" "$lib/pkgconfig/kpc.pc" \
  "$lib/cmake/kpc/kpcConfig.cmake" "$lib/cmake/kpc/kpcConfigVersion.cmake" "$lib/cmake/kpc/kpcTargets.cmake" \
  "$lib/cmake/kpc/kpcTargets-none.cmake" usr/share/man/man3/kpc.3.gz "${dev_dropin[@]}"
n=$(ls "$out"/deb/*.deb | wc -l)
want=3; [ -z "$dropin" ] || want=4
[ "$n" -eq "$want" ] || fail "$n packages, not $want"

# the dependencies came from the binaries, and between kpc's own packages from the graph
depends=$(dpkg-deb -f "$out/deb/libkpc1_${version}_$arch.deb" Depends)
grep -q 'libc6 (>= ' <<<"$depends" && grep -q 'libbsd0 (>= ' <<<"$depends" ||
  fail "libkpc1's Depends were not computed by dpkg-shlibdeps: $depends"
depends=$(dpkg-deb -f "$out/deb/libkpc-dev_${version}_$arch.deb" Depends)
grep -q "libkpc1 (= $version)" <<<"$depends" || fail "libkpc-dev does not depend on libkpc1 (= $version): $depends"
dpkg-deb -I "$out/deb/libkpc1_${version}_$arch.deb" shlibs | grep -qx "libkpc 1 libkpc1 (>= $version)" ||
  fail "libkpc1's shlibs file"
dpkg-deb -I "$out/deb/libkpc1_${version}_$arch.deb" triggers | grep -qx "activate-noawait ldconfig" ||
  fail "libkpc1 has no ldconfig trigger"

# the version everywhere: unpack them all into one tree
for deb in "$out"/deb/*.deb; do dpkg-deb -x "$deb" "$tmp/root"; done
major=${version%%.*}
soname=$(readelf -d "$tmp/root/$lib/libkpc.so.$version" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$soname" = "libkpc.so.$major" ] || fail "soname $soname, not libkpc.so.$major"
[ "$(PKG_CONFIG_PATH=$tmp/root/$lib/pkgconfig pkg-config --modversion kpc)" = "$version" ] || fail "kpc.pc's version"
grep -q "set(PACKAGE_VERSION \"$version\")" "$tmp/root/$lib/cmake/kpc/kpcConfigVersion.cmake" ||
  fail "kpcConfigVersion.cmake's version"
[ "$("$tmp/root/usr/bin/kpc" --version)" = "kpc $version" ] || fail "kpc --version: $("$tmp/root/usr/bin/kpc" --version)"
[ "$("$tmp/root/usr/bin/kpc-shm-reset" --version)" = "kpc-shm-reset $version" ] ||
  fail "kpc-shm-reset --version: $("$tmp/root/usr/bin/kpc-shm-reset" --version)"
zcat "$tmp/root/usr/share/doc/kpc/changelog.gz" | head -n 1 | grep -q "^kpc ($version) " || fail "the changelog's version"
echo "package: $n packages of kpc $version: lintian clean of errors, the files in place, the version everywhere"
