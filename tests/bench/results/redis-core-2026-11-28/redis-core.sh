#!/usr/bin/env bash
# redis-core.sh - what one Redis core costs per kpc-like call: GETEX of a 16 KB and a
# 590 KB value (kpc's remote hit), a SET NX PX (a lease claim) and PING, each on a held
# connection (redis-benchmark -k 1) and on a new connection per call (-k 0, as every kpc
# call makes), 32 clients; the server's own CPU seconds (INFO cpu, user + sys) per call
# beside the client's rate, since on a small machine redis-benchmark shares the cores.
# usage: redis-core.sh [PORT]   (starts and stops its own redis-server on 127.0.0.1)
# On the device machine (device-2026-11-28.log), with Debian 12's redis-server, redis-tools,
# libjemalloc2 and liblzf1 .deb files (apt-get download) carried in D:
#   for f in D/*.deb; do dpkg -x $f /tmp/rd; done; PATH=/tmp/rd/usr/bin:$PATH \
#   LD_LIBRARY_PATH=/tmp/rd/usr/lib/x86_64-linux-gnu bash redis-core.sh 6398   (twice)
set -euo pipefail
P=${1:-6399}
d=$(mktemp -d)
redis-server --port "$P" --bind 127.0.0.1 --save '' --appendonly no --daemonize yes \
  --pidfile "$d/r.pid" --logfile "$d/r.log" --dir "$d"
trap 'redis-cli -p "$P" SHUTDOWN NOSAVE >/dev/null 2>&1; rm -rf "$d"' EXIT
for _ in $(seq 50); do [ "$(redis-cli -p "$P" PING 2>/dev/null)" = PONG ] && break; sleep 0.1; done
head -c 16384 /dev/urandom | redis-cli -p "$P" -x SET k16 >/dev/null
head -c 604160 /dev/urandom | redis-cli -p "$P" -x SET k590 >/dev/null
cpu() { redis-cli -p "$P" INFO cpu | tr -d '\r' |
        awk -F: '$1=="used_cpu_sys"||$1=="used_cpu_user"{s+=$2} END{printf "%.4f\n", s}'; }
one() { # calls keepalive command...
  local n=$1 k=$2 c0 c1 r; shift 2
  c0=$(cpu)
  r=$(redis-benchmark -p "$P" -n "$n" -c 32 -k "$k" -q "$@" 2>&1 | tr '\r' '\n' | grep -v '^$' | tail -1)
  c1=$(cpu)
  awk -v r="$r" -v k="$k" -v c0="$c0" -v c1="$c1" -v n="$n" \
    'BEGIN{printf "%-60s keepalive=%s  server cpu %6.1f us/call\n", r, k, (c1-c0)*1e6/n}'
}
redis-server --version; nproc; uptime
for k in 1 0; do
  one 20000 "$k" GETEX k16 EX 86400
  one 4000 "$k" GETEX k590 EX 86400
  one 20000 "$k" SET lease v NX PX 3000
  one 20000 "$k" PING
done
