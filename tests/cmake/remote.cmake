# The cluster tier (src/storage/remote.c): test_remote.c against a redis-server it starts
# itself, with simulated hosts (mount namespaces; root). Built only where the tier is
# built (hiredis and libsodium) and redis-server is installed (scripts/setup.sh installs
# both). Label "remote"; serial, since it starts many processes that compile.
find_program(KPC_REDIS_SERVER redis-server)
if(NOT KPC_REMOTE_DEFINE OR NOT KPC_REDIS_SERVER)
  message(STATUS "kpc: no cluster tier or no redis-server: test_remote is not built")
  return()
endif()
kpc_check_test(test_remote LABELS remote TIMEOUT 600 SOURCES cluster_support.c)
target_link_libraries(test_remote PRIVATE PkgConfig::HIREDIS)
set_tests_properties(test_remote PROPERTIES RUN_SERIAL TRUE)
