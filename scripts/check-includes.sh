#!/usr/bin/env bash
# check-includes.sh - the include rules between the folders of src/ (docs/design.md,
# "Where things live"). Fails, naming the file and the line, on a forbidden edge:
#
#   base/      includes nothing of ours outside base/
#   platform/  base/
#   storage/   base/, platform/
#   core/      base/, platform/, storage/
#   tools/     anything
#   dropin/    anything but tools/ (the drop-in libraries: kpc.h, and the platform seam)
#
# so the folders form a line (base < platform < storage < core < tools) and no cycle
# between folders is possible; a cycle found anyway (a rule loosened by mistake) fails
# too. Also fails on an include by relative path ("../x.h", or a bare name that is not a
# file of the same folder): includes name their folder ("storage/index.h").
# kpc/kpc.h, the public header, may be included anywhere.
# usage: scripts/check-includes.sh [SRC_DIR]
set -euo pipefail
src=${1:-$(dirname "$0")/../src}
cd "$src"

declare -A allowed=(
  [base]="base"
  [platform]="base platform"
  [storage]="base platform storage"
  [core]="base platform storage core"
  [tools]="base platform storage core tools"
  [dropin]="base platform storage core dropin"
)
fail=0
declare -A edges=()
while IFS= read -r -d '' f; do
  folder=${f%%/*}
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
      if [ -f "$(dirname "$f")/$inc" ]; then
        echo "check-includes: $f:$line: \"$inc\": name the folder (\"$folder/$inc\")" >&2
      else
        echo "check-includes: $f:$line: \"$inc\": not a file of ours by that path" >&2
      fi
      fail=1
      continue
    fi
    to=${inc%%/*}
    if [ "$to" = ".." ] || [ ! -f "$inc" ]; then
      echo "check-includes: $f:$line: \"$inc\": not a file under src/ (relative includes are not allowed)" >&2
      fail=1
      continue
    fi
    if [[ " ${allowed[$folder]} " != *" $to "* ]]; then
      echo "check-includes: $f:$line: $folder/ may not include $to/ (\"$inc\"): $folder/ may include ${allowed[$folder]}" >&2
      fail=1
    fi
    [ "$to" != "$folder" ] && edges["$folder $to"]=1
  done < <(grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f" || true)
done < <(find . -name '*.[ch]' -printf '%P\0' | sort -z)

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
