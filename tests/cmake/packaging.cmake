# The Debian packages of scripts/package.sh (tests/package/run.sh): they build, lintian
# finds no error, each holds its files, the version is the same everywhere; skipped with
# its reason where dpkg-dev or lintian is missing.
add_test(NAME package
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/package/run.sh ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR} ${PROJECT_VERSION} ${KPC_PLATFORM})
# "install": not again under the sanitizers; serial: it builds a tree of its own
set_tests_properties(package PROPERTIES LABELS "install;package" TIMEOUT 600 SKIP_RETURN_CODE 77 RUN_SERIAL TRUE)
