# The drop-ins (src/dropin): a fake NVRTC stands in for CUDA (absent in CI);
# libkpc-hiprtc is tested against the real hipRTC. Both scripts run programs that know
# nothing of kpc, several times, in new processes, and compare every byte.
set(_d ${CMAKE_CURRENT_SOURCE_DIR}/dropin)

# fake NVRTC: fake-cuda/lib64/libnvrtc.so.13 (CUDA_HOME=fake-cuda finds it by path)
add_library(fake_nvrtc SHARED ${_d}/fake_rtc.c)
target_compile_definitions(fake_nvrtc PRIVATE FAKE_NVRTC=1)
set_target_properties(fake_nvrtc PROPERTIES PREFIX "" SUFFIX "" OUTPUT_NAME libnvrtc.so.13 NO_SONAME ON
  C_VISIBILITY_PRESET hidden LIBRARY_OUTPUT_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/fake-cuda/lib64)
target_link_options(fake_nvrtc PRIVATE -Wl,-soname,libnvrtc.so.13)

add_executable(nvrtc_app ${_d}/nvrtc_app.c)
target_link_libraries(nvrtc_app PRIVATE fake_nvrtc Threads::Threads ${CMAKE_DL_LIBS})
add_executable(nvrtc_app_dl ${_d}/nvrtc_app.c)
target_compile_definitions(nvrtc_app_dl PRIVATE NVRTC_DLOPEN_ONLY=1)
target_link_libraries(nvrtc_app_dl PRIVATE Threads::Threads ${CMAKE_DL_LIBS})
add_executable(nvrtc_app_kpc ${_d}/nvrtc_app.c) # -lkpc-nvrtc ahead of NVRTC
target_link_libraries(nvrtc_app_kpc PRIVATE kpc::nvrtc fake_nvrtc Threads::Threads ${CMAKE_DL_LIBS})
add_test(NAME dropin_nvrtc COMMAND ${_d}/nvrtc.sh ${PROJECT_BINARY_DIR}
  $<TARGET_FILE:nvrtc_app> $<TARGET_FILE:nvrtc_app_dl> $<TARGET_FILE:nvrtc_app_kpc>
  ${CMAKE_CURRENT_BINARY_DIR}/fake-cuda)
set_tests_properties(dropin_nvrtc PROPERTIES LABELS "dropin;threads" TIMEOUT 300)

if(KPC_PLATFORM STREQUAL "amd")
  # the app links hipRTC as its users do: libhiprtc (ROCm 6 and 7: libhiprtc.so.6/.7)
  # where there is one, else the HIP runtime that holds it (ROCm 5: libamdhip64.so.5)
  find_library(KPC_HIPRTC_LIBRARY NAMES hiprtc amdhip64 PATHS /opt/rocm/lib REQUIRED)
  message(STATUS "kpc: the drop-in tests link hipRTC from ${KPC_HIPRTC_LIBRARY}")
  add_library(fake_hiprtc SHARED ${_d}/fake_rtc.c) # a hipRTC with the link API (5.3+)
  set_target_properties(fake_hiprtc PROPERTIES C_VISIBILITY_PRESET hidden)
  add_executable(hiprtc_app ${_d}/hiprtc_app.c)
  target_include_directories(hiprtc_app PRIVATE ${HIP_INCLUDE_DIR})
  target_link_libraries(hiprtc_app PRIVATE ${KPC_HIPRTC_LIBRARY} ${CMAKE_DL_LIBS})
  add_executable(hiprtc_app_kpc ${_d}/hiprtc_app.c) # -lkpc-hiprtc ahead of hipRTC
  target_include_directories(hiprtc_app_kpc PRIVATE ${HIP_INCLUDE_DIR})
  target_link_libraries(hiprtc_app_kpc PRIVATE kpc::hiprtc ${KPC_HIPRTC_LIBRARY} ${CMAKE_DL_LIBS})
  add_test(NAME dropin_hiprtc COMMAND ${_d}/hiprtc.sh ${PROJECT_BINARY_DIR}
    $<TARGET_FILE:hiprtc_app> $<TARGET_FILE:hiprtc_app_kpc> $<TARGET_FILE:fake_hiprtc>)
  set_tests_properties(dropin_hiprtc PROPERTIES LABELS "dropin" TIMEOUT 600)
endif()
