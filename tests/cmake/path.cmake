# The path of one request through src/core, as it runs (test_request_path.c): a copy of
# the library built with -finstrument-functions at -O0 without inlining, so every call
# between its functions is seen, and addr2line (binutils, which the compiler brings)
# names the file of each.
kpc_objects(kpc_trace_objs TEST_HOOKS)
target_compile_options(kpc_trace_objs PRIVATE -finstrument-functions -O0 -g -fno-inline)
add_library(kpc_trace_static STATIC $<TARGET_OBJECTS:kpc_trace_objs>)
target_link_libraries(kpc_trace_static PUBLIC kpc_trace_objs)
target_include_directories(kpc_trace_static PUBLIC ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/include)
add_library(kpc_trace_support STATIC support.c support_exec.c hold_support.c fake_platform.c)
target_link_libraries(kpc_trace_support PUBLIC kpc_trace_static PkgConfig::CHECK PkgConfig::XXHASH)
target_include_directories(kpc_trace_support PUBLIC ${CMAKE_CURRENT_SOURCE_DIR})
kpc_check_test(test_request_path SUPPORT kpc_trace_support LABELS "core" TIMEOUT 120)
