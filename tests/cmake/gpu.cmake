# The device path on a real GPU (tests/test_gpu.c, issue #6): kernels got through kpc,
# launched and checked element by element; 16 processes on one cold cache; a cached
# object the driver refuses, removed and rebuilt; module-load figures. Exits 77 where
# there is no GPU, which CTest reports as skipped. Label "gpu".
#
# On the NVIDIA platform test_gpu_platform (tests/test_gpu_platform.c) checks
# what needs NVRTC but no GPU: targets, cubin and PTX, identity, options, no driver.
kpc_check_test(test_gpu LABELS "gpu" TIMEOUT 600 SOURCES gpu_support.c)
# many processes each initializing the driver: alone on the machine
set_tests_properties(test_gpu PROPERTIES SKIP_RETURN_CODE 77 RUN_SERIAL TRUE)
if(KPC_PLATFORM STREQUAL "nvidia")
  # cuda.h for the driver API's types; libcuda itself is dlopen'ed (the stub suffices to build)
  target_include_directories(test_gpu PRIVATE ${CUDA_INCLUDE_DIR})
  kpc_check_test(test_gpu_platform LABELS "core;nvidia" TIMEOUT 300 SOURCES gpu_support.c)
  target_include_directories(test_gpu_platform PRIVATE ${CUDA_INCLUDE_DIR})
endif()
