# A collision of the key (test_collision.c): a record from another process built from
# another request under the same key is a miss, counted and logged, never served; the
# disk tree, the shared directory, a pack (fake compiler), and the disk through hipRTC.
kpc_check_test(test_collision LABELS "faults" TIMEOUT 300 REDIS)
