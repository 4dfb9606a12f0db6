#!/usr/bin/env bash
# check-includes.sh - the include rules between the folders of src/ and the host index's
# own component shm/ (docs/design.md, "Where things live"). Fails, naming the file and
# the line, on a forbidden edge:
#
#   base/      includes nothing of ours outside base/
#   shm/       base/ (the host index knows nothing of tiers, records or compilers)
#   platform/  base/
#   storage/   base/, shm/, platform/
#   core/      base/, shm/, platform/, storage/
#   tools/     anything
#   dropin/    anything but tools/ (the drop-in libraries: kpc.h, and the platform seam)
#
# One file has rules of its own: shm/kpc_shm_reset.c, the kpc-shm-reset program, may also
# include core/config.h, the one home of the settings every tool reads (the cache
# directory); it is a program that nothing includes, so it is a folder of its own in the
# graph below and adds no edge from shm/.
#
# so the folders form a line (base < shm, platform < storage < core < tools) and no
# cycle between folders is possible; a cycle found anyway (a rule loosened by mistake)
# fails too. Also fails on an include by relative path ("../x.h", or a bare name that is
# not a file of the same folder): includes name their folder ("storage/store.h",
# "shm/index.h"). kpc/kpc.h, the public header, may be included anywhere.
# usage: scripts/check-includes.sh [PROJECT_ROOT]   (the folder holding src/ and shm/)
set -euo pipefail
root=${1:-$(dirname "$0")/..}
cd "$root"

declare -A allowed=(
  [base]="base"
  [shm]="base shm"
  [platform]="base platform"
  [storage]="base shm platform storage"
  [core]="base shm platform storage core"
  [tools]="base shm platform storage core tools"
  [dropin]="base shm platform storage core dropin"
  [shm-reset]="base shm core"
)

fail=0
declare -A edges=()
while IFS= read -r -d '' f; do
  case $f in
    shm/kpc_shm_reset.c) folder=shm-reset ;;
    shm/*) folder=shm ;;
    src/*) folder=${f#src/}; folder=${folder%%/*} ;;
  esac
  if [ -z "${allowed[$folder]+x}" ]; then
    echo "check-includes: $f: a folder the rules do not name ($folder/): add it to scripts/check-includes.sh" >&2
    fail=1
    continue
  fi
  while IFS=: read -r line inc; do
    inc=${inc#*\"}
    inc=${inc%%\"*}
    [ "$inc" = "kpc/kpc.h" ] && continue
    if [[ "$inc" != */* ]]; then
      if [ -f "${f%/*}/$inc" ]; then
        echo "check-includes: $f:$line: \"$inc\": name the folder (\"${folder%-reset}/$inc\")" >&2
      else
        echo "check-includes: $f:$line: \"$inc\": not a file of ours by that path" >&2
      fi
      fail=1
      continue
    fi
    to=${inc%%/*}
    # an include of ours: "shm/index.h" under the root, the others under src/
    if [ "$to" = "shm" ]; then path=$inc; else path=src/$inc; fi
    if [ "$to" = ".." ] || [ ! -f "$path" ]; then
      echo "check-includes: $f:$line: \"$inc\": not a file under src/ or shm/ (relative includes are not allowed)" >&2
      fail=1
      continue
    fi
    if [[ " ${allowed[$folder]} " != *" $to "* ]]; then
      echo "check-includes: $f:$line: $folder/ may not include $to/ (\"$inc\"): $folder/ may include ${allowed[$folder]}" >&2
      fail=1
    fi
    [ "$to" != "$folder" ] && edges["$folder $to"]=1
  done < <(grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f" || true)
done < <(find src shm -name '*.[ch]' -printf '%p\0' | sort -z)

# no cycle between folders: repeatedly drop the folders with no edge to one still left
declare -A left=()
for a in "${!allowed[@]}"; do left[$a]=1; done
while :; do
  dropped=0
  for a in "${!left[@]}"; do
    out=0
    for e in "${!edges[@]}"; do
      [ "${e% *}" = "$a" ] && [ -n "${left[${e#* }]+x}" ] && out=1
    done
    if [ $out -eq 0 ]; then
      unset "left[$a]"
      dropped=1
    fi
  done
  [ $dropped -eq 0 ] && break
done
if [ ${#left[@]} -gt 0 ]; then
  echo "check-includes: a cycle between folders, among: ${!left[*]}" >&2
  fail=1
fi
[ $fail -eq 0 ] && echo "check-includes: every include follows the rules"
exit $fail
