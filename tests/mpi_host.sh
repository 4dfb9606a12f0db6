#!/bin/sh
# mpi_host.sh DIR P PROGRAM ARGS... - run one MPI rank inside its simulated host: rank R
# belongs to host R / P, whose /dev/shm is the directory DIR/shmH (made by mpi_cluster.sh).
# The rank gets a mount namespace of its own with that directory bound on /dev/shm, so the
# ranks of a host share one host index and the hosts do not; and the host's cache dir and
# id. Nothing enters another process's namespace and nothing changes the root directory,
# so it works in a container and in a chroot (where setns(2), as nsenter does it, would
# put the rank outside the chroot).
# mpi_host.sh --probe DIR: exit 0 where that can be done here, else say why and exit 1.
set -eu
if [ "${KPC_MPI_HOST_INSIDE:-}" != 1 ]; then
  # --propagation unchanged: unshare's default (make / private) fails where / is not a
  # mount point (a chroot); the mount holding /dev/shm is made private below instead
  exec env KPC_MPI_HOST_INSIDE=1 unshare -m --propagation unchanged sh "$0" "$@"
fi
# the nearest mount point at or above /dev/shm: made private, so that the bind below
# stays in this namespace
p=/dev/shm
until mount --make-rprivate "$p" 2>/dev/null; do
  if [ "$p" = / ]; then
    echo "no mount point at or above /dev/shm in this root (a chroot into a plain directory): a mount there could reach the namespace outside; bind-mount the root onto itself before the chroot"
    exit 1
  fi
  p=$(dirname "$p")
done
if [ "$1" = --probe ]; then
  mount --bind "$2" /dev/shm
  exit 0
fi
dir=$1 procs=$2
shift 2
rank=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-${PMIX_RANK:-0}}}
host=$((rank / procs))
mount --bind "$dir/shm$host" /dev/shm
exec env -u KPC_MPI_HOST_INSIDE KPC_HOST_ID="simhost$host" KPC_CACHE_DIR="$dir/host$host" "$@"
