#!/bin/sh
# mpi_run.sh TRANSPORT MPIEXEC ARGS... - run MPIEXEC ARGS with the flags and environment
# that the installed MPI wants for these tests, read from its version when the test runs
# (one build tree may outlive an upgrade from Open MPI 4 to 5). TRANSPORT is how the ranks
# talk: "shm" (one host, shared memory) or "tcp" (simulated hosts in mount namespaces of
# their own, whose /dev/shm differ: loopback TCP only).
#
# Open MPI, every version: ranks beyond the cores (--oversubscribe), as root (CI runs as
# root in a container), the ob1 messaging layer (never looking for InfiniBand or UCX), and
# no memory patcher: Open MPI rewrites the first bytes of mprotect, munmap and the like
# for UCX's registration cache, and under AddressSanitizer those are ASan's interceptors;
# with GCC 16's and clang 21's runtimes the rewrite breaks them and the rank dies inside
# MPI_Init (SIGILL, SEGV; GCC 12 and clang 14 with Open MPI 4 were spared). No test here
# registers memory. The launcher is ORTE in Open MPI 4 (OMPI_MCA_ settings), PRRTE with
# PMIx from Open MPI 5 on (PRTE_MCA_ settings; shared memory is btl "sm", formerly
# "vader", and its single-copy mechanisms are the smsc framework). Other MPIs (MPICH's
# hydra) get nothing added and need nothing.
set -eu
transport=$1 mpiexec=$2
shift 2
version=$("$mpiexec" --version 2>&1 | head -n 1) || version=""
case $version in
  *"Open MPI"*|*OpenRTE*) ;;
  *) exec "$mpiexec" "$@" ;;
esac
major=$(printf '%s\n' "$version" | sed -nE 's/.*(Open MPI|OpenRTE)\) v?([0-9]+).*/\2/p')
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_pml=ob1 \
  OMPI_MCA_memory=^patcher
if [ "${major:-0}" -ge 5 ]; then
  shm=sm
  # no ssh for local ranks; cross-memory attach (process_vm_readv) is what ptrace
  # restrictions in containers forbid: copy through the segment instead
  export PRTE_MCA_plm_ssh_agent=false OMPI_MCA_smsc=^cma
else
  shm=vader
  export OMPI_MCA_plm_rsh_agent=false OMPI_MCA_rmaps_base_oversubscribe=1 \
    OMPI_MCA_btl_vader_single_copy_mechanism=none
fi
case $transport in
  shm) export OMPI_MCA_btl=self,$shm ;;
  tcp)
    export OMPI_MCA_btl=self,tcp OMPI_MCA_btl_tcp_if_include=lo
    # ORTE's daemon talks to the ranks over loopback too. PRRTE's ranks reach mpirun
    # through PMIx: ORTE's setting is taken there as PMIx's deprecated
    # ptl_tcp_if_include (a warning from every rank), and PRRTE's own, prte_if_include=lo,
    # PRRTE 3 refuses ("No network interfaces were found"): its defaults serve one host
    [ "${major:-0}" -ge 5 ] || export OMPI_MCA_oob_tcp_if_include=lo ;;
  *) echo "mpi_run: unknown transport '$transport' (shm or tcp)" >&2; exit 2 ;;
esac
exec "$mpiexec" --oversubscribe --allow-run-as-root "$@"
