# The file-system faults (test_faults_disk.c): a cache dir under a directory others
# may write, the rename-away attack, removals that fail, dead writers' temp files; and
# the system-call fault sweep (test_faults_sweep.c). Fake platform: fast.
kpc_check_test(test_faults_disk LABELS "faults" TIMEOUT 300 SOURCES faults_support.c)
kpc_check_test(test_faults_sweep LABELS "faults" TIMEOUT 300 SOURCES faults_support.c)
