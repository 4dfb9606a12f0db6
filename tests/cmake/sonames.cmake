# The AMD platform's library lookup (tests/test_sonames.c): the sonames of ROCm 7 and 6
# are preferred to ROCm 5's. Real hipRTC through symbolic links under the newer names.
if(KPC_PLATFORM STREQUAL "amd")
  kpc_check_test(test_sonames LABELS "core" TIMEOUT 120)
endif()
