# The cluster tier (src/storage/remote*.c): test_remote.c (the module), test_remote_cluster.c
# and test_remote_stalls.c against a redis-server it starts
# itself, with simulated hosts (mount namespaces; root). Built only where the tier is
# built (hiredis and libsodium) and redis-server is installed (scripts/setup.sh installs
# both). Label "remote"; serial, since it starts many processes that compile.
if(NOT KPC_REMOTE_DEFINE OR NOT KPC_REDIS_SERVER)
  message(STATUS "kpc: no cluster tier or no redis-server: test_remote is not built")
  return()
endif()
kpc_check_test(test_remote LABELS remote TIMEOUT 600 SOURCES cluster_support.c remote_storm.c)
target_link_libraries(test_remote PRIVATE PkgConfig::HIREDIS)
set_tests_properties(test_remote PROPERTIES RUN_SERIAL TRUE)
# simulated hosts on one Redis (test_remote_cluster.c): the storms, shared failures,
# refused records, a shared cache dir
kpc_check_test(test_remote_cluster LABELS remote TIMEOUT 600 SOURCES cluster_support.c remote_storm.c)
target_link_libraries(test_remote_cluster PRIVATE PkgConfig::HIREDIS)
set_tests_properties(test_remote_cluster PROPERTIES RUN_SERIAL TRUE)
# stalls and distrust across hosts (test_remote_stalls.c): several cases wait out stops.
# Not serial: its storms are of one or two ranks, and it mostly sleeps (under 4 s of CPU
# in 50 s), so the other tests run beside it
kpc_check_test(test_remote_stalls LABELS remote TIMEOUT 600 SOURCES cluster_support.c remote_storm.c)
target_link_libraries(test_remote_stalls PRIVATE PkgConfig::HIREDIS)
# what the tier trusts beyond a record's tag: a lease's freshness (a replayed lease),
# `kpc remote`'s messages about its secret, its server and its counters
kpc_check_test(test_remote_trust LABELS remote TIMEOUT 600 SOURCES cluster_support.c remote_storm.c)
target_link_libraries(test_remote_trust PRIVATE PkgConfig::HIREDIS)
set_tests_properties(test_remote_trust PROPERTIES RUN_SERIAL TRUE)
# a same-order storm with kpc_program_get_many spreads its builds over the hosts
# (test_remote_spread.c), through the fake compiler and through real hipRTC
kpc_check_test(test_remote_spread LABELS remote TIMEOUT 600 SOURCES cluster_support.c remote_storm.c)
target_link_libraries(test_remote_spread PRIVATE PkgConfig::HIREDIS)
set_tests_properties(test_remote_spread PROPERTIES RUN_SERIAL TRUE)
# a real Redis Cluster of 6 nodes on loopback ports (test_redis_cluster.c): the storm, a
# reshard and a primary killed mid-storm, `kpc remote` across the primaries
kpc_check_test(test_redis_cluster LABELS remote TIMEOUT 600 SOURCES cluster_support.c cluster_redis.c remote_storm.c)
target_link_libraries(test_redis_cluster PRIVATE PkgConfig::HIREDIS)
set_tests_properties(test_redis_cluster PROPERTIES RUN_SERIAL TRUE)
# the unit case (all of test_remote) again, labelled "threads" (a lease's renewal thread, the waiters) so that
# CI runs it under TSan too
get_test_property(test_remote ENVIRONMENT KPC_REMOTE_TEST_ENV)
add_test(NAME test_remote_unit COMMAND test_remote)
set_tests_properties(test_remote_unit PROPERTIES TIMEOUT 120 LABELS "remote;threads"
  ENVIRONMENT "${KPC_REMOTE_TEST_ENV};CK_RUN_CASE=unit")

# The same storm launched by mpirun (tests/mpi_cluster.sh): H=4 hosts x P=8 ranks x K=8
# real hipRTC sources. The ranks of different hosts are in
# different mount namespaces, so Open MPI talks over TCP, not /dev/shm (tests/mpi_run.sh
# tcp: the flags and environment each Open MPI wants).
find_package(MPI COMPONENTS C QUIET)
if(MPI_C_FOUND AND MPIEXEC_EXECUTABLE)
  add_executable(mpi_cluster mpi_cluster.c)
  target_link_libraries(mpi_cluster PRIVATE kpc_test_support MPI::MPI_C)
  set(_kpc_cl_env "")
  list(APPEND _kpc_cl_env "HWLOC_COMPONENTS=-pci") # why: tests/cmake/mpi.cmake
  if(KPC_SANITIZE MATCHES "address")
    list(APPEND _kpc_cl_env "ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:use_sigaltstack=0")
  endif()
  add_test(NAME mpi_cluster
    COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/mpi_cluster.sh 4 8 8 real
            sh ${CMAKE_CURRENT_SOURCE_DIR}/mpi_run.sh tcp ${MPIEXEC_EXECUTABLE} ${MPIEXEC_PREFLAGS})
  # 77: skipped (no root or no mount namespaces here; the script says why)
  set_tests_properties(mpi_cluster PROPERTIES LABELS "remote;mpi" TIMEOUT 300 RUN_SERIAL TRUE SKIP_RETURN_CODE 77
    ENVIRONMENT "KPC_MPI_CLUSTER=$<TARGET_FILE:mpi_cluster>;${_kpc_cl_env}")
endif()
