# Trust at the edges (test_trust.c): an unsafe cache directory refused and never chmod'ed,
# packs another user could write refused (their objects never reach the disk), and
# `kpc pack create` that replaces only a regular file. Real hipRTC.
kpc_check_test(test_trust LABELS "faults" TIMEOUT 300)
# Every directory and file on the way to a record (test_trust_tree.c): another user's,
# one others may write, a symbolic link, in the cache directory and KPC_SHARED_DIR, is
# refused and never written through; KPC_TRUST_GROUP. Fake compiler, one hipRTC case.
kpc_check_test(test_trust_tree LABELS "faults" TIMEOUT 300)
