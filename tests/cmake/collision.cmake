# A collision of the key (test_collision.c): a record from another process built from
# another request under the same key is a miss, counted and logged, never served; the
# disk tree, the shared directory, a pack (fake compiler), and the disk through hipRTC.
kpc_check_test(test_collision LABELS "faults" TIMEOUT 300)
find_program(KPC_REDIS_SERVER redis-server)
if(KPC_REMOTE_DEFINE AND KPC_REDIS_SERVER)
  target_sources(test_collision PRIVATE cluster_support.c)
  target_link_libraries(test_collision PRIVATE PkgConfig::HIREDIS)
  target_compile_definitions(test_collision PRIVATE KPC_TEST_REDIS)
endif()
