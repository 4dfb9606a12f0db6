# Cold start: kpc_program_get_many (test_batch: processes through real hipRTC;
# test_batch_threads: the same executable's thread suite on a fake parallel compiler,
# under TSan too), pack files and the request codec (test_pack), `kpc replay` and
# `kpc pack` through the tool (test_replay). All carry the "coldstart" label.
kpc_check_test(test_batch LABELS "coldstart" TIMEOUT 240)
get_test_property(test_batch ENVIRONMENT KPC_BATCH_TEST_ENV)
add_test(NAME test_batch_threads COMMAND test_batch threads)
set_tests_properties(test_batch_threads PROPERTIES TIMEOUT 120 LABELS "coldstart;threads"
  ENVIRONMENT "${KPC_BATCH_TEST_ENV}")
kpc_check_test(test_pack LABELS "coldstart" TIMEOUT 240)
kpc_check_test(test_replay LABELS "coldstart" TIMEOUT 240)
