# How sites watch kpc: `kpc stats --prometheus` and `kpc remote stats --prometheus`
# (test_tool_metrics.c: the text format, the numbers of --json, promtool where installed,
# the remote case against a redis-server it starts where the tier is built).
kpc_check_test(test_tool_metrics LABELS store TIMEOUT 300 SOURCES tool_support.c)
find_program(KPC_METRICS_REDIS_SERVER redis-server)
if(KPC_REMOTE_DEFINE AND KPC_METRICS_REDIS_SERVER)
  target_sources(test_tool_metrics PRIVATE cluster_support.c)
  target_link_libraries(test_tool_metrics PRIVATE PkgConfig::HIREDIS)
  target_compile_definitions(test_tool_metrics PRIVATE KPC_METRICS_REDIS=1)
endif()
