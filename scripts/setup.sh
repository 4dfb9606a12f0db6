#!/usr/bin/env bash
# setup.sh - install the Debian packages kpc's main job needs (only those missing), then
# configure and build into build/. Safe to run again. demo.sh, test.sh and bench.sh call
# it; each names the packages only its own job needs with --also (test.sh: Open MPI for the
# MPI test, man-db for the install test; bench.sh: hipcc and ccache).
#
# Installing needs root: run as root, or as a user with sudo. A user who already has every
# package needs neither; one who lacks some and has no sudo is told the exact apt-get line
# for an administrator, before anything is changed.
#
# usage: scripts/setup.sh [-v] [--also PACKAGE...]
#   -v   show everything (apt-get and the build); by default one line per step, apt's
#        download progress, and the full output of a step only when it fails
set -euo pipefail
cd "$(dirname "$0")/.."

# What the main job (build the library, the tools, the tests and the man pages) needs.
# libamdhip64-dev pulls in hipRTC, comgr and its headers (libamd-comgr-dev); hiredis and
# libsodium are the cluster tier's (without them it builds as a stub).
packages=(
  build-essential cmake pkg-config
  libbsd-dev libxxhash-dev libcjson-dev libzstd-dev check
  libamdhip64-dev
  libhiredis-dev libsodium-dev
  scdoc
)
# The clang resource headers (limits.h, stdint.h, ...) that hipRTC's compiles reach when
# a kernel includes a standard header (glibc's limits.h include_next's clang's): they come
# with the LLVM that comgr is built on, and no runtime package depends on them. By release
# where the name is known; elsewhere read from the installed comgr, after the install.
codename=$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")
resource_headers() {
  case $codename in
    bookworm) echo libclang-common-15-dev ;; # ROCm 5.2, LLVM 15
    trixie) echo libclang-common-17-dev ;;   # ROCm 5.7, LLVM 17 (sid's comgr depends on its own)
    *) dpkg-query -W -f='${Depends}\n' 'libamd-comgr[0-9]*' 2>/dev/null |
         grep -oE 'libllvm[0-9]+' | head -n 1 | sed -E 's/libllvm([0-9]+)/libclang-common-\1-dev/' ;;
  esac
}
headers=$(resource_headers) || headers=""
[ -z "$headers" ] || packages+=("$headers")

verbose=0
while (($#)); do
  case $1 in
    -v) verbose=1 ;;
    --also) shift; packages+=("$@"); break ;;
    -h|--help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "setup: unknown argument '$1' (usage: scripts/setup.sh [-v] [--also PACKAGE...])" >&2; exit 2 ;;
  esac
  shift
done

missing_of() { # PACKAGE...: those not installed, on stdout
  local p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"
  done
}
mapfile -t missing < <(missing_of "${packages[@]}")

# Run a step quietly: its output goes to a log that is shown only if it fails.
quietly() { # what command...
  local what=$1; shift
  if ((verbose)); then "$@"; return; fi
  local log; log=$(mktemp "${TMPDIR:-/tmp}/kpc-setup-XXXXXX")
  if "$@" >"$log" 2>&1; then rm -f "$log"; return 0; fi
  echo "setup: $what failed; its output:" >&2
  tail -n 60 "$log" >&2
  rm -f "$log"
  return 1
}

# apt-get install, quiet but for the sizes and one progress line while it downloads.
apt_install() {
  if ((verbose)); then "${as_root[@]}" apt-get install -y --no-install-recommends "$@"; return; fi
  local log; log=$(mktemp "${TMPDIR:-/tmp}/kpc-setup-XXXXXX")
  local tty=0; [ -t 1 ] && tty=1
  if "${as_root[@]}" apt-get install -y --no-install-recommends "$@" 2>&1 | tee "$log" |
      while IFS= read -r line; do
        case $line in
          "Need to get "*|"After this operation"*) echo "setup: apt: $line" ;;
          Get:*) if ((tty)); then printf '\rsetup: apt: %.70s\033[K' "$line"; fi ;;
          "Setting up "*) if ((tty)); then printf '\rsetup: apt: %.70s\033[K' "$line"; fi ;;
        esac
      done; then
    ((tty)) && printf '\r\033[K'
    rm -f "$log"; return 0
  fi
  ((tty)) && printf '\r\033[K'
  echo "setup: apt-get install failed; its output:" >&2
  tail -n 40 "$log" >&2
  rm -f "$log"
  return 1
}

as_root=()
if ((${#missing[@]})); then
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
      as_root=(sudo)
    else
      cat >&2 <<EOF
setup: these Debian packages are missing: ${missing[*]}
setup: installing them needs root, and this user ($(id -un)) is not root and has no sudo.
Ask an administrator to run, as root:
    apt-get update && apt-get install -y --no-install-recommends ${missing[*]}
then run this command again as yourself.
EOF
      exit 1
    fi
  fi
  echo "setup: installing ${missing[*]}${as_root[*]:+ (with sudo)}"
  export DEBIAN_FRONTEND=noninteractive
  quietly "apt-get update" "${as_root[@]}" apt-get update
  apt_install "${missing[@]}"
fi
# a release whose header package is known only from the comgr just installed
if [ -z "$headers" ] && headers=$(resource_headers) && [ -n "$headers" ] &&
   [ -n "$(missing_of "$headers")" ]; then
  echo "setup: installing $headers${as_root[*]:+ (with sudo)}"
  apt_install "$headers"
fi

build=${KPC_BUILD_DIR:-build}
echo "setup: building in $build/"
quietly "cmake configure" cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo ${KPC_CMAKE_ARGS:-}
quietly "the build" cmake --build "$build" -j"$(nproc)"
