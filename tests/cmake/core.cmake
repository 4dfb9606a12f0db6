# The core library through real compiles, one executable per job (test_core_*.c), and
# the per-context map under threads (test_map.c); all share core_support.c.
foreach(t compile threads api)
  kpc_check_test(test_core_${t} LABELS "core;threads" SOURCES core_support.c)
endforeach()
kpc_check_test(test_map LABELS "core;threads" SOURCES core_support.c)
# the in-memory map's key, alone (no compile)
kpc_check_test(test_map_key LABELS "core" TIMEOUT 60)
