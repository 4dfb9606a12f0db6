# Trust at the edges (test_trust.c): an unsafe cache directory refused and never chmod'ed,
# packs another user could write refused (their objects never reach the disk), and
# `kpc pack create` that replaces only a regular file. Real hipRTC.
kpc_check_test(test_trust LABELS "faults" TIMEOUT 300)
