# The host index (shm/): processes and threads sharing one segment, crashes, damaged
# segments, eviction, kpc-shm-reset; and an Open MPI storm when MPI is installed.
# One executable per job (tests/test_index_*.c, sharing index_support.c);
# test_index_threads carries the "threads" label, so that CI runs it under TSan as well.
set(_kpc_index_tests test_index_storm test_index_crash test_index_segment test_index_reset
  test_index_protocol test_index_faults)
foreach(t ${_kpc_index_tests})
  kpc_check_test(${t} LABELS "index" TIMEOUT 240 SOURCES index_support.c)
endforeach()
kpc_check_test(test_index_threads LABELS "index;threads" TIMEOUT 240 SOURCES index_support.c)
# they start many processes (or threads) that each compile: on a small machine they are
# more telling, and no slower overall, one at a time
set_tests_properties(${_kpc_index_tests} test_index_threads PROPERTIES RUN_SERIAL TRUE)
