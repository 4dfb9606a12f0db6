# Manifests: dependency lists, the manifest file, the key's working directory (test_manifest);
# how the platforms learn the files (test_manifest_scan); the whole path through real
# hipRTC (test_manifest_rtc).
kpc_check_test(test_manifest LABELS "manifest;threads")
target_include_directories(test_manifest PRIVATE ${PROJECT_SOURCE_DIR}/src)
kpc_check_test(test_manifest_scan LABELS "manifest" SOURCES manifest_support.c)
target_include_directories(test_manifest_scan PRIVATE ${PROJECT_SOURCE_DIR}/src)
kpc_check_test(test_manifest_rtc LABELS "manifest" TIMEOUT 600 SOURCES manifest_support.c)
# Its edges through real hipRTC: a batch checks what a single request checks, a switched
# symlink, a shadowing header, FIFOs where headers, records and manifests should be.
kpc_check_test(test_manifest_edges LABELS "manifest" TIMEOUT 600 SOURCES manifest_support.c)
