# scripts/demo.sh leaves the user's own KPC_CACHE_DIR and its host index untouched
# (tests/demo/run.sh). Label "demo": it runs the tools of this build, so the sanitizer
# passes leave it out.
if(KPC_PLATFORM STREQUAL "amd")
  add_test(NAME demo_leaves_user_cache
    COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/demo/run.sh ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR} gfx90a)
  set_tests_properties(demo_leaves_user_cache PROPERTIES LABELS "demo" TIMEOUT 300)
endif()
