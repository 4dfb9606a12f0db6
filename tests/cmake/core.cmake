kpc_check_test(test_core LABELS "core;threads")
kpc_check_test(test_map LABELS "core;threads")
