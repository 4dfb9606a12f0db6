# The file-system faults (test_faults.c): a cache dir under a directory others
# may write, the rename-away attack, removals that fail, dead writers' temp files, and
# the system-call fault sweep. Fake platform: fast.
kpc_check_test(test_faults LABELS "faults" TIMEOUT 300)
