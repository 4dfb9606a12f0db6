# packaging.cmake - the Debian packages. scripts/package.sh configures a tree with
# -DKPC_DEB=ON -DCMAKE_INSTALL_PREFIX=/usr and runs CPack's DEB generator on it; each
# install component (CMakeLists.txt, src/dropin/CMakeLists.txt) is one package:
#   libkpc1          lib     libkpc.so.1 (the soname's number: the project version's major)
#   libkpc-dev       dev     the headers, libkpc.so, libkpc.a, kpc.pc, the CMake package,
#                            kpc(3); and the packaged drop-ins' link, .pc and CMake targets
#   kpc              tools   kpc, kpc-shm-reset, their section-1 pages
#   libkpc-hiprtc1   hiprtc  the hipRTC drop-in (an AMD build)
#   libkpc-nvrtc1    nvrtc   the NVRTC drop-in and its libnvrtc shims (an NVIDIA build)
# The version is project()'s, the one place every other copy comes from (the soname,
# kpc.pc, kpcConfigVersion.cmake, `kpc --version`, the packages). The packages' depen-
# dencies on Debian's come from the binaries (dpkg-shlibdeps); those between kpc's own
# packages from the components' graph; libkpc-dev names the -dev packages its static
# library and kpc.pc's Requires.private need. Which lintian warnings stay, and why:
# docs/packaging.md.

# the drop-ins a package takes: the one of the build's platform (the NVRTC drop-in of an
# AMD build forwards to an NVRTC no Debian package of the AMD tool chain has)
if(KPC_PLATFORM STREQUAL "amd")
  set(KPC_DEB_DROPINS hiprtc)
elseif(KPC_PLATFORM STREQUAL "nvidia")
  set(KPC_DEB_DROPINS nvrtc)
else()
  set(KPC_DEB_DROPINS "")
endif()

if(NOT KPC_DEB)
  return()
endif()
if(NOT CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  message(FATAL_ERROR "KPC_DEB: the packages install into /usr; configure with -DCMAKE_INSTALL_PREFIX=/usr")
endif()

set(KPC_DEB_MAINTAINER "kpc maintainers <maintainers@users.noreply.a-seed-6e636d4e.example>"
  CACHE STRING "the packages' Maintainer field")
# the changelog's date: scripts/package.sh gives the commit's (the same packages from the
# same commit)
set(KPC_DEB_DATE "" CACHE STRING "the changelog entry's date (RFC 2822)")
set(KPC_DEB_COMMIT "" CACHE STRING "the commit the packages are built from")
set(KPC_DEB_FROM "")
if(KPC_DEB_COMMIT)
  set(KPC_DEB_FROM " at commit ${KPC_DEB_COMMIT}")
endif()
if(NOT KPC_DEB_DATE)
  string(TIMESTAMP KPC_DEB_DATE "%a, %d %b %Y %H:%M:%S +0000" UTC)
endif()

set(_deb_names lib libkpc1 dev libkpc-dev tools kpc hiprtc libkpc-hiprtc1 nvrtc libkpc-nvrtc1)
set(_deb_sections lib libs dev libdevel tools utils hiprtc libs nvrtc libs)
set(KPC_DEB_COMPONENTS lib dev tools ${KPC_DEB_DROPINS})

# /usr/share/doc/PACKAGE/{copyright,changelog.gz} of every package
configure_file(${CMAKE_CURRENT_LIST_DIR}/deb/changelog.in ${CMAKE_BINARY_DIR}/deb/changelog @ONLY)
execute_process(COMMAND gzip -9nf ${CMAKE_BINARY_DIR}/deb/changelog RESULT_VARIABLE _gz)
if(_gz)
  message(FATAL_ERROR "KPC_DEB: gzip of the changelog failed")
endif()
foreach(component ${KPC_DEB_COMPONENTS})
  list(FIND _deb_names ${component} i)
  math(EXPR i "${i} + 1")
  list(GET _deb_names ${i} package)
  list(GET _deb_sections ${i} section)
  string(TOUPPER ${component} C)
  set(CPACK_DEBIAN_${C}_PACKAGE_NAME ${package})
  set(CPACK_DEBIAN_${C}_PACKAGE_SECTION ${section})
  install(FILES ${CMAKE_CURRENT_LIST_DIR}/deb/copyright ${CMAKE_BINARY_DIR}/deb/changelog.gz
    DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/doc/${package} COMPONENT ${component})
endforeach()

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME kpc)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "${KPC_DEB_MAINTAINER}")
set(CPACK_PACKAGE_DIRECTORY ${CMAKE_BINARY_DIR}/deb)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_COMPONENTS_ALL ${KPC_DEB_COMPONENTS})
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_ENABLE_COMPONENT_DEPENDS ON)
# The shared-library packages' control files: shlibs (what dpkg-shlibdeps writes into a
# package that links the library) and the ldconfig trigger. Written here rather than by
# CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS, which has no trigger (lintian: lacks-ldconfig-
# trigger, an error); the postinst and postrm CPack adds that call ldconfig by hand go
# after the build (deb/without-ldconfig-calls.cmake).
foreach(lib lib:kpc:libkpc1 hiprtc:kpc-hiprtc:libkpc-hiprtc1 nvrtc:kpc-nvrtc:libkpc-nvrtc1)
  string(REPLACE ":" ";" lib ${lib})
  list(GET lib 0 component)
  list(GET lib 1 name)
  list(GET lib 2 package)
  string(TOUPPER ${component} C)
  set(dir ${CMAKE_BINARY_DIR}/deb/control-${component})
  file(WRITE ${dir}/shlibs "lib${name} ${PROJECT_VERSION_MAJOR} ${package} (>= ${PROJECT_VERSION})\n")
  file(WRITE ${dir}/triggers "activate-noawait ldconfig\n")
  set(CPACK_DEBIAN_${C}_PACKAGE_CONTROL_EXTRA ${dir}/shlibs ${dir}/triggers)
endforeach()
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_POST_BUILD_SCRIPTS ${CMAKE_CURRENT_LIST_DIR}/deb/without-ldconfig-calls.cmake)

# The compiler is loaded at run time (dlopen), so dpkg-shlibdeps cannot see it: the
# packages that compile recommend the Debian package that holds this build's HIP
# runtime (hipRTC inside it, or beside it in libhiprtc), read off the build machine.
if(KPC_PLATFORM STREQUAL "amd")
  file(GLOB _hip_libs /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/libhiprtc.so.[0-9]
    /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/libamdhip64.so.[0-9])
  set(_hip_packages "")
  foreach(_lib ${_hip_libs})
    execute_process(COMMAND dpkg-query -S ${_lib} OUTPUT_VARIABLE _owner RESULT_VARIABLE rc ERROR_QUIET)
    if(rc EQUAL 0)
      string(REGEX REPLACE ":.*" "" _owner "${_owner}")
      list(APPEND _hip_packages ${_owner})
    endif()
  endforeach()
  list(REMOVE_DUPLICATES _hip_packages)
  string(REPLACE ";" ", " _hip_recommends "${_hip_packages}")
  foreach(C LIB TOOLS HIPRTC)
    set(CPACK_DEBIAN_${C}_PACKAGE_RECOMMENDS "${_hip_recommends}")
  endforeach()
endif()

set(_dev_depends libbsd-dev libxxhash-dev libzstd-dev)
if(KPC_REMOTE_DEFINE)
  list(APPEND _dev_depends libhiredis-dev libsodium-dev)
endif()
string(REPLACE ";" ", " CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "${_dev_depends}")

set(CPACK_COMPONENT_LIB_DESCRIPTION "code-object cache for HIP runtime compilation (library)
kpc answers an application's runtime compiles (hipRTC) from a cache: its
in-memory map, a host-wide index in shared memory with the disk tree, or one
compile that every thread and process asking at the same time waits for.
This package holds the shared library.")
set(CPACK_COMPONENT_DEV_DESCRIPTION "code-object cache for HIP runtime compilation (development files)
kpc answers an application's runtime compiles (hipRTC) from a cache. This
package holds what a build against it needs: the header, the static
library, the pkg-config file (kpc), the CMake package (find_package(kpc))
and the kpc(3) manual page.")
set(CPACK_COMPONENT_TOOLS_DESCRIPTION "code-object cache for HIP runtime compilation (tools)
kpc answers an application's runtime compiles (hipRTC) from a cache. This
package holds the kpc tool (compile through the cache, stats with a
Prometheus format, ls, verify, prune, replay, pack, the cluster tier's
Redis) and kpc-shm-reset, which frees a cache's shared-memory index.")
set(CPACK_COMPONENT_HIPRTC_DESCRIPTION "hipRTC answered from the kpc code-object cache (drop-in)
An application that calls hipRTC gets kpc's cache without a line changed:
this library exports hipRTC's API, answers each compile it can key from
the cache and hands everything else to the real hipRTC. Preload it, or
link it ahead of the HIP runtime.")
set(CPACK_COMPONENT_NVRTC_DESCRIPTION "NVRTC answered from the kpc code-object cache (drop-in)
An application that calls NVRTC gets kpc's cache without a line changed:
this library (and the libnvrtc shims in /usr/lib/<arch>/kpc/nvrtc) exports
NVRTC's API and hands what it cannot key to the real NVRTC.")

include(CPack)
cpack_add_component(lib)
cpack_add_component(tools)
# a drop-in carries its own copy of kpc: it needs no libkpc1
cpack_add_component(hiprtc)
cpack_add_component(nvrtc)
cpack_add_component(dev DEPENDS lib ${KPC_DEB_DROPINS})
