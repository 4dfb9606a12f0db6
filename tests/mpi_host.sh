#!/bin/sh
# mpi_host.sh DIR P PROGRAM ARGS... - run one MPI rank inside its simulated host: rank R
# belongs to host R / P, whose mount namespace (private /dev/shm) a holder process made
# (pid in DIR/hostH.pid, see mpi_cluster.sh); the rank gets that host's cache dir and id.
set -eu
dir=$1 procs=$2
shift 2
rank=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-${PMIX_RANK:-0}}}
host=$((rank / procs))
exec nsenter -t "$(cat "$dir/host$host.pid")" -m -- \
  env KPC_HOST_ID="simhost$host" KPC_CACHE_DIR="$dir/host$host" "$@"
