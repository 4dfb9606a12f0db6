# The one table of KPC_* variables (src/base/settings_table.h): the docs generated from it
# and checked against it, no getenv of a KPC_ variable elsewhere in src/, and every
# malformed value refused by kpc_cache_open and the tools (test_settings.c). Label "house".
kpc_check_test(test_settings LABELS "house" TIMEOUT 120)
# kpc_config's fields and a cache directory path with a control character (test_config.c)
kpc_check_test(test_config LABELS "house" TIMEOUT 120)
# the cluster tier's secret files: missing, a FIFO, another user's, readable by all (test_secret_files.c)
kpc_check_test(test_secret_files LABELS "house" TIMEOUT 120)
