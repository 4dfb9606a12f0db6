# The disk tree (test_store_*.c) and the kpc tool (test_tool_*.c), through real hipRTC
# compiles, one executable per job. All carry the "store" label: `ctest -L store` runs them.
foreach(t share damage faults limit off)
  kpc_check_test(test_store_${t} LABELS store TIMEOUT 300 SOURCES store_support.c)
endforeach()
foreach(t exit json jobs messages)
  kpc_check_test(test_tool_${t} LABELS store TIMEOUT 300 SOURCES tool_support.c)
endforeach()
# every numeric argument of every tool through the one parser (test_tool_numbers.c); its
# `kpc remote prune` case needs the cluster tier and a redis-server, else it says skipped
kpc_check_test(test_tool_numbers LABELS store TIMEOUT 300 SOURCES tool_support.c REDIS)
