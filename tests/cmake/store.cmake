# The disk tree (test_store.c) and the kpc tool (test_tool.c), through real hipRTC
# compiles. Both carry the "store" label: `ctest -L store` runs the two.
kpc_check_test(test_store LABELS store TIMEOUT 300)
kpc_check_test(test_tool LABELS store TIMEOUT 300)
