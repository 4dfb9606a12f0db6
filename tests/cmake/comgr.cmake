# The comgr platform (tests/test_comgr.c): HIP source through comgr alone, in a build
# configured with -DKPC_PLATFORM=comgr (scripts/test.sh's comgr pass). Label "comgr".
if(KPC_PLATFORM STREQUAL "comgr")
  kpc_check_test(test_comgr LABELS "core;comgr" TIMEOUT 300 SOURCES manifest_support.c)
endif()
