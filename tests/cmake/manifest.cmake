# Manifests: dependency lists, the manifest file (test_manifest); threads on a program whose
# header changes (test_manifest_threads);
# how the platforms learn the files (test_manifest_scan); the whole path through real
# hipRTC (test_manifest_rtc).
kpc_check_test(test_manifest LABELS "manifest")
target_include_directories(test_manifest PRIVATE ${PROJECT_SOURCE_DIR}/src)
kpc_check_test(test_manifest_threads LABELS "manifest;threads")
target_include_directories(test_manifest_threads PRIVATE ${PROJECT_SOURCE_DIR}/src)
kpc_check_test(test_manifest_scan LABELS "manifest" SOURCES manifest_support.c)
target_include_directories(test_manifest_scan PRIVATE ${PROJECT_SOURCE_DIR}/src)
kpc_check_test(test_manifest_rtc LABELS "manifest" TIMEOUT 600 SOURCES manifest_support.c)
# Its edges through real hipRTC: a batch checks what a single request checks, a switched
# symlink, a shadowing header, FIFOs where headers, records and manifests should be.
kpc_check_test(test_manifest_edges LABELS "manifest" TIMEOUT 600 SOURCES manifest_support.c)
