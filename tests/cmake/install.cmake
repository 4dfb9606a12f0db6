# The installed tree works for consumers, by CMake package and by pkg-config.
if(KPC_PLATFORM STREQUAL "nvidia")
  set(_kpc_install_target sm_90)
else()
  set(_kpc_install_target gfx90a)
endif()
add_test(NAME install_consumer
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/install/run.sh ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR} ${_kpc_install_target} ${KPC_BUILD_MAN})
set_tests_properties(install_consumer PROPERTIES LABELS "install" TIMEOUT 300)
