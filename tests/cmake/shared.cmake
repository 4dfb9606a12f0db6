# The shared directory tier (test_shared.c): two cache directories as two hosts and one
# shared directory, through real hipRTC: a build on one is a hit on the other, a damaged
# record is rebuilt, an unsafe or read-only directory fails soft.
kpc_check_test(test_shared LABELS "coldstart" TIMEOUT 300)
