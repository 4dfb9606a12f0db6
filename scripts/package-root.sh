#!/usr/bin/env bash
# package-root.sh - the Debian packages in a fresh root, the two halves scripts/matrix.sh
# --packages runs, as root, each in a clean root of its own (not for a machine in use:
# `install` installs and purges packages).
#
#   scripts/package-root.sh build
#       in the checkout: install what the build needs (scripts/setup.sh, with dpkg-dev and
#       lintian), then scripts/package.sh (lintian: no error); the packages in build-deb/deb
#   scripts/package-root.sh install DIR
#       in a minimal root: `apt-get install DIR/*.deb` (apt pulls what they need from
#       Debian), then as a user, in a HIP example (examples/kpc_example.c): build it
#       with `pkg-config --cflags --libs kpc` and with CMake's find_package(kpc), run the
#       first (the kernel is built) and the second (a hit in the host cache), `kpc stats`
#       (one build, one hit); then `apt-get purge` of the packages, after which no file
#       of theirs is left and the user's cache is still there.
# Each step prints one line; the last one is "packages: ... passed" (exit 0) or says what
# failed (exit 1).
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive
fail() { echo "packages: FAILED: $*" >&2; exit 1; }
step() { echo "packages: $*"; }

case ${1:-} in
  build)
    step "the build's packages (scripts/setup.sh), dpkg-dev and lintian"
    KPC_CMAKE_ARGS="-DKPC_BUILD_TESTS=OFF -DKPC_BUILD_BENCH=OFF" scripts/setup.sh --also dpkg-dev lintian ||
      fail "scripts/setup.sh"
    step "scripts/package.sh"
    scripts/package.sh || fail "scripts/package.sh"
    step "build passed: $(ls build-deb/deb/*.deb | wc -l) packages in build-deb/deb"
    ;;
  install)
    debs=${2:?usage: scripts/package-root.sh install DIR}
    mapfile -t files < <(ls "$debs"/*.deb)
    mapfile -t names < <(for f in "${files[@]}"; do dpkg-deb -f "$f" Package; done)
    step "apt-get install ${names[*]} (from the .deb files; Debian's packages from the mirror)"
    apt-get update >/dev/null
    apt-get install -y "${files[@]}" >/tmp/apt-install.log 2>&1 || { tail -n 30 /tmp/apt-install.log; fail "apt-get install"; }
    grep -E '^(Need to get|After this operation)' /tmp/apt-install.log | sed 's/^/packages:   /'
    # what the example's build needs besides kpc: a compiler, pkg-config, cmake
    step "apt-get install the example's tools (gcc, make, pkg-config, cmake)"
    apt-get install -y --no-install-recommends gcc libc6-dev make pkg-config cmake >/dev/null 2>&1 ||
      fail "apt-get install of the example's tools"
    mapfile -t owned < <(dpkg -L "${names[@]}" | sort -u)

    id -u kpcuser >/dev/null 2>&1 || useradd -m kpcuser
    ex=/home/kpcuser/example
    rm -rf "$ex" && mkdir -p "$ex"
    cp examples/kpc_example.c examples/saxpy.hip "$ex/"
    cat >"$ex/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.18)
project(kpc_example C)
find_package(kpc 1 REQUIRED)
add_executable(example_cmake kpc_example.c)
target_link_libraries(example_cmake PRIVATE kpc::kpc)
EOF
    chown -R kpcuser: "$ex"
    step "as a user: the example through pkg-config and through find_package(kpc), run twice, kpc stats"
    runuser -u kpcuser -- bash -euc '
      cd ~/example
      cc -Wall -Werror kpc_example.c $(pkg-config --cflags --libs kpc) -o example_pc
      cmake -S . -B build >/dev/null && cmake --build build >/dev/null
      ./example_pc gfx90a saxpy.hip | tee first.txt
      ./build/example_cmake gfx90a saxpy.hip | tee second.txt
      grep -q "^get 1: built" first.txt || { echo "the first run built nothing"; exit 1; }
      grep -q "^get 1: host cache" second.txt || { echo "the second run missed the host cache"; exit 1; }
      kpc --version
      kpc stats | tee stats.txt
      grep -qE "^builds +1$" stats.txt && grep -qE "^hits +[1-9]" stats.txt
      kpc-shm-reset >/dev/null # the example is done: its shared-memory index goes
    ' || fail "the example as a user"
    cache=/home/kpcuser/.cache/kpc
    [ -d "$cache" ] || fail "no cache in $cache"

    step "apt-get purge ${names[*]}"
    apt-get purge -y "${names[@]}" >/tmp/apt-purge.log 2>&1 || { tail -n 20 /tmp/apt-purge.log; fail "apt-get purge"; }
    left=()
    for f in "${owned[@]}"; do
      case $f in
        */kpc|*/kpc/*|*/libkpc*) ;; # ours: a directory of kpc's goes too
        *) [ -d "$f" ] && continue ;; # a directory others share (/usr/lib, ...)
      esac
      if [ -e "$f" ] || [ -L "$f" ]; then left+=("$f"); fi
    done
    for p in "${names[@]}"; do
      [ ! -e "/usr/share/doc/$p" ] || left+=("/usr/share/doc/$p")
      ! dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -qv "not-installed" || left+=("dpkg: $p")
    done
    ((${#left[@]} == 0)) || { printf 'packages:   left: %s\n' "${left[@]}"; fail "the purge left files of the packages"; }
    find "$cache" -type f | grep -q . || fail "the purge took the user's cache"
    step "install passed: ${#names[@]} packages installed, the example built by pkg-config and CMake, built then hit, kpc stats as a user, purged without a trace, the user's cache kept"
    ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2 ;;
esac
