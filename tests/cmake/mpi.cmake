# The MPI start-up storm (tests/mpi_storm.c, issue #5): 8 ranks on this host ask for the
# same 4 kernels at once through one fresh cache directory; the host must compile each
# once. Built and registered only where an MPI with a C binding is installed (Debian:
# openmpi-bin + libopenmpi-dev, which scripts/setup.sh installs); skipped quietly otherwise.
#
# Labels: "index" (it tests the host index) and "mpi" (so a run can leave it out).
find_package(MPI COMPONENTS C QUIET)
if(NOT MPI_C_FOUND OR NOT MPIEXEC_EXECUTABLE)
  message(STATUS "kpc: no MPI with a C binding: the mpi_storm test is not built")
  return()
endif()

add_executable(mpi_storm mpi_storm.c)
target_link_libraries(mpi_storm PRIVATE kpc_test_support MPI::MPI_C)

# mpirun's flags and environment (Open MPI 4 and 5 want different ones) come from
# tests/mpi_run.sh when the test runs: here the ranks share one host's shared memory.
set(_kpc_mpi_env "")
# HWLOC_COMPONENTS=-pci: Open MPI's hwloc reads the PCI tree at MPI_Init, making thousands
# of 160 KB allocations that AddressSanitizer's allocator maps and unmaps one by one: with
# more ranks than cores that took 25-45 s of a 2 s storm (seen with Open MPI 4.1.4, hwloc
# 2.9); no test here needs the PCI devices.
list(APPEND _kpc_mpi_env "HWLOC_COMPONENTS=-pci")
# Under AddressSanitizer, LeakSanitizer's exit-time scan hangs the ranks after
# MPI_Finalize (Open MPI's threads; seen with Open MPI 4.1.4) and Open MPI's own leaks
# would fail it anyway: this test never checks leaks. kpc's leaks are the other tests' job.
if(KPC_SANITIZE MATCHES "address")
  list(APPEND _kpc_mpi_env "ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:use_sigaltstack=0")
endif()

add_test(NAME mpi_storm
  COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/mpi_run.sh shm ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 8 ${MPIEXEC_PREFLAGS}
          $<TARGET_FILE:mpi_storm> ${MPIEXEC_POSTFLAGS} 4)
# KPC_DISABLE=0: an exported KPC_DISABLE=1 would turn off the very index under test
set_tests_properties(mpi_storm PROPERTIES LABELS "index;mpi" TIMEOUT 300 RUN_SERIAL TRUE
  ENVIRONMENT "KPC_DISABLE=0;${_kpc_mpi_env}")
