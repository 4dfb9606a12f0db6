# The house: the include rules between the folders of src/ and shm/ (scripts/check-includes.sh,
# and a test that it refuses what it must), and the release libraries' symbols (no test
# hook; only kpc.h's functions exported). Label "house".
add_test(NAME check_includes COMMAND ${PROJECT_SOURCE_DIR}/scripts/check-includes.sh ${PROJECT_SOURCE_DIR})
add_test(NAME check_includes_refuses
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/house/check_includes_refuses.sh ${PROJECT_SOURCE_DIR})
add_test(NAME release_exports
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/house/check_exports.sh $<TARGET_FILE:kpc> $<TARGET_FILE:kpc_static>
          $<TARGET_FILE:kpc_test_static> ${PROJECT_SOURCE_DIR}/include/kpc/kpc.h)
# (the timeouts only stop a hang: a loaded machine takes minutes over what a quiet one
# does in seconds)
set_tests_properties(check_includes check_includes_refuses release_exports PROPERTIES LABELS "house" TIMEOUT 300)
# the size rule: no source file over 600 lines (one file, one job)
add_test(NAME check_size COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/house/check_size.sh ${PROJECT_SOURCE_DIR})
set_tests_properties(check_size PROPERTIES LABELS "house" TIMEOUT 300)
# The seams (tiers with a fake pack and a fake cluster tier, the cache directory's
# owner) and the failures that must not be shared (a refused request, a local fault),
# one executable per job (test_house_*.c).
foreach(t tiers faults root)
  kpc_check_test(test_house_${t} LABELS "house;threads" TIMEOUT 300 SOURCES house_support.c)
endforeach()
# The NVIDIA platform compiles against the seams here too, where CUDA is absent (stub
# headers; the real build is scripts/test-nvidia.sh's).
if(NOT KPC_PLATFORM STREQUAL "nvidia")
  add_test(NAME check_nvidia_compiles
    COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/house/check_nvidia_compiles.sh ${PROJECT_SOURCE_DIR} ${CMAKE_C_COMPILER})
  set_tests_properties(check_nvidia_compiles PROPERTIES LABELS "house" TIMEOUT 300)
endif()
# The one byte codec every format is read and written through (base/bytes.c).
kpc_check_test(test_bytes LABELS "house" TIMEOUT 60)
kpc_check_test(test_record LABELS "house" TIMEOUT 60)
# libxxhash as kpc calls it (base/hash.c): the library's values, and the vector state
# cleared after each dispatched hash
kpc_check_test(test_hash LABELS "house" TIMEOUT 60)
