# The comgr platform (tests/test_comgr.c): HIP source through comgr alone, in a build
# configured with -DKPC_PLATFORM=comgr (scripts/test.sh's comgr pass). Label "comgr".
if(KPC_PLATFORM STREQUAL "comgr")
  kpc_check_test(test_comgr LABELS "core;comgr" TIMEOUT 300 SOURCES manifest_support.c)
  # a comgr that says it is the next major, which the platform must refuse
  add_library(fake_comgr_major MODULE fake_comgr_major.c)
  target_include_directories(fake_comgr_major PRIVATE ${COMGR_INCLUDE_DIR})
  target_include_directories(test_comgr PRIVATE ${COMGR_INCLUDE_DIR})
  target_compile_definitions(test_comgr PRIVATE KPC_FAKE_COMGR="$<TARGET_FILE:fake_comgr_major>")
  add_dependencies(test_comgr fake_comgr_major)
endif()
