kpc_check_test(test_core LABELS "core;threads")
