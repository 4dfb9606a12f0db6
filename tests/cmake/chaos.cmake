# The chaos test (test_chaos.c conducts, chaos_worker.c works): worker processes under kill -9 (random and at chosen
# phases) with `kpc clear`/`prune` churning, on the fake platform and on hipRTC; every
# object checked against a clean compile. KPC_CHAOS_SECONDS lengthens it for a release.
kpc_check_test(test_chaos LABELS "chaos" TIMEOUT 600 SOURCES chaos_worker.c)
