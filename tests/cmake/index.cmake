# The host index (shm/): processes and threads sharing one segment, crashes, damaged
# segments, eviction, kpc-shm-reset; and an Open MPI storm when MPI is installed.
#
# test_index runs its process suite; test_index_threads runs the same executable's thread
# suite and carries the "threads" label, so that CI runs it under TSan as well.
kpc_check_test(test_index LABELS "index" TIMEOUT 240)
get_test_property(test_index ENVIRONMENT KPC_INDEX_TEST_ENV)
add_test(NAME test_index_threads COMMAND test_index threads)
set_tests_properties(test_index_threads PROPERTIES TIMEOUT 240 LABELS "index;threads"
  ENVIRONMENT "${KPC_INDEX_TEST_ENV}")
# both start many processes (or threads) that each compile: on a small machine they are
# more telling, and no slower overall, one at a time
set_tests_properties(test_index test_index_threads PROPERTIES RUN_SERIAL TRUE)
