#!/bin/sh
# mpi_cluster.sh H P K MODE MPIEXEC [ARGS...] -- the cluster storm through mpirun (the
# command MPIEXEC ARGS, to which it adds -n and the program: tests/mpi_run.sh tcp mpirun):
# a redis-server on a Unix socket (no port to pick, no persistence), H simulated hosts
# (each a directory that its ranks see as /dev/shm), then H x P ranks of mpi_cluster,
# each in a mount namespace of its own made by mpi_host.sh. Everything it started is
# stopped and removed on exit, also on failure. Needs root and mount namespaces: skipped
# (exit 77, saying why) where there are none.
set -eu
hosts=$1 procs=$2 k=$3 mode=$4
shift 4
here=$(cd "$(dirname "$0")" && pwd)
prog=${KPC_MPI_CLUSTER:?KPC_MPI_CLUSTER names the mpi_cluster binary}
if [ "$(id -u)" -ne 0 ]; then
  echo "mpi_cluster: skipped: simulated hosts need root (uid $(id -u))"; exit 77
fi
dir=$(mktemp -d /tmp/kpc-mpi-cluster-XXXXXX)
pids=""
cleanup() {
  for p in $pids; do kill -9 "$p" 2>/dev/null || true; done
  for p in $pids; do wait "$p" 2>/dev/null || true; done
  rm -rf "$dir"
}
trap cleanup EXIT INT TERM
mkdir "$dir/probe"
if ! why=$(sh "$here/mpi_host.sh" --probe "$dir/probe" 2>&1); then
  echo "mpi_cluster: skipped: no simulated hosts here: $why"; exit 77
fi
redis-server --port 0 --unixsocket "$dir/redis.sock" --unixsocketperm 700 --save '' \
  --appendonly no --dir "$dir" --daemonize no >"$dir/redis.log" 2>&1 &
pids="$pids $!"
h=0
while [ "$h" -lt "$hosts" ]; do
  mkdir -m 1777 "$dir/shm$h"
  h=$((h + 1))
done
i=0
until redis-cli -s "$dir/redis.sock" ping >/dev/null 2>&1; do
  i=$((i + 1)); [ "$i" -lt 200 ] || { echo "redis-server did not start"; cat "$dir/redis.log"; exit 1; }
  sleep 0.05
done
mpiexec=$1
shift
# a generous command timeout: the job counts builds exactly, and a loaded machine (ASan,
# 2 cores) can keep a healthy Redis past the default 300 ms, which the tier treats as sick
# every host shares one secret: without it the tier would serve nothing
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$dir/secret"
chmod 600 "$dir/secret"
KPC_REMOTE="redis+unix://$dir/redis.sock" KPC_REMOTE_SECRET_FILE="$dir/secret" KPC_DISABLE=0 KPC_REMOTE_TIMEOUT_MS=5000 \
  "$mpiexec" "$@" -n $((hosts * procs)) sh "$here/mpi_host.sh" "$dir" "$procs" "$prog" "$k" "$mode"
