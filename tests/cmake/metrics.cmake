# How sites watch kpc: `kpc stats --prometheus` and `kpc remote stats --prometheus`
# (test_tool_metrics.c: the text format, the numbers of --json, promtool where installed,
# the remote case against a redis-server it starts where the tier is built).
kpc_check_test(test_tool_metrics LABELS store TIMEOUT 300 SOURCES tool_support.c REDIS)
