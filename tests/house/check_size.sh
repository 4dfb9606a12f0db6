#!/usr/bin/env bash
# check_size.sh - the house's size rule: no source file of the library, the tools, the
# drop-ins, the host index or the tests and benchmarks (src/, shm/, include/, tests/) is
# over 600 lines. A file over it has
# two jobs: split it by job (docs/design.md, "Where things live"). A file may be allowed
# more only by a line below, with its reason; an entry for a file that no longer needs it
# fails too, so the list cannot go stale.
# usage: check_size.sh PROJECT_ROOT
set -euo pipefail
cd "$1"
limit=600
# path  reason (none today)
allowed=$(cat <<'LIST'
LIST
)
fail=0
while IFS= read -r -d '' f; do
  n=$(wc -l <"$f")
  if [ "$n" -gt "$limit" ] && ! grep -q "^$f " <<<"$allowed"; then
    echo "check_size: $f has $n lines, over $limit: split it by job" >&2
    fail=1
  fi
done < <(find src shm include tests -name '*.[ch]' -print0 | sort -z)
while read -r f reason; do
  [ -z "$f" ] && continue
  if [ ! -f "$f" ] || [ "$(wc -l <"$f")" -le "$limit" ]; then
    echo "check_size: $f is allowed over $limit lines ($reason) but no longer needs it: remove the entry" >&2
    fail=1
  fi
done <<<"$allowed"
[ $fail -eq 0 ] && echo "check_size: no source file over $limit lines"
exit $fail
