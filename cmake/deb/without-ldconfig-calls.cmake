# Run by CPack after it built the packages (CPACK_POST_BUILD_SCRIPTS): CPack gives every
# package with a library under /usr/lib a postinst and a postrm that call ldconfig by
# hand; the packages carry the ldconfig trigger instead (cmake/packaging.cmake), so the
# scripts go (lintian: maintscript-calls-ldconfig). Each such package is unpacked and
# built again by dpkg-deb, owned by root, without them.
foreach(deb IN LISTS CPACK_PACKAGE_FILES)
  set(tree ${deb}.tree)
  file(REMOVE_RECURSE ${tree})
  execute_process(COMMAND dpkg-deb -R ${deb} ${tree} RESULT_VARIABLE rc)
  if(rc)
    message(FATAL_ERROR "dpkg-deb -R ${deb} failed")
  endif()
  if(EXISTS ${tree}/DEBIAN/triggers)
    file(REMOVE ${tree}/DEBIAN/postinst ${tree}/DEBIAN/postrm)
    execute_process(COMMAND dpkg-deb --root-owner-group -Zxz --build ${tree} ${deb}
      RESULT_VARIABLE rc OUTPUT_QUIET)
    if(rc)
      message(FATAL_ERROR "dpkg-deb --build ${deb} failed")
    endif()
  endif()
  file(REMOVE_RECURSE ${tree})
endforeach()
