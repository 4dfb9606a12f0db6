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
kpc_check_test(test_tool_numbers LABELS store TIMEOUT 300 SOURCES tool_support.c)
find_program(KPC_REDIS_SERVER redis-server)
if(KPC_REMOTE_DEFINE AND KPC_REDIS_SERVER)
  target_sources(test_tool_numbers PRIVATE cluster_support.c)
  target_link_libraries(test_tool_numbers PRIVATE PkgConfig::HIREDIS)
  target_compile_definitions(test_tool_numbers PRIVATE KPC_TEST_REDIS)
endif()
