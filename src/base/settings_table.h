/*
 * settings_table.h - every KPC_* environment variable kpc reads: one row each, and
 * nothing else. base/settings.h turns the rows into the kpc_setting_id enum and
 * base/settings.c into the table that reads, checks and documents them; the ENVIRONMENT
 * section of kpc(1) and the environment table of docs/manual.md are generated from here
 * (`tests/test_settings --write-docs`; the test fails when they differ). Adding a setting
 * is one row here; its reader asks kpc__setting_number or kpc__setting_text for it.
 *
 * KPC_SETTING(ID, TYPE, DEFAULT, MIN, MAX, SHOWN_DEFAULT, DOC):
 *   ID        the variable without its KPC_ prefix; the enum constant is KPC_SET_<ID>
 *   TYPE      FLAG (1 or 0), COUNT (a whole number), MS (milliseconds), SECONDS, SIZE
 *             (bytes with a K/M/G/T suffix), LEVEL (a log level), PATH, PATHS
 *             (colon-separated), URL (checked by the cluster tier's URL parser), NAME (1 to
 *             63 letters, digits, '_', '-' or '.': it goes into Redis key names), TEXT
 *   DEFAULT   the value when unset, for FLAG, COUNT, MS, SECONDS, SIZE and LEVEL (else 0)
 *   MIN, MAX  the accepted range of COUNT, MS, SECONDS and SIZE (else 0)
 *   SHOWN_DEFAULT  the default as the docs say it ("" for none)
 *   DOC       one line: what it does
 *
 * KPC_SETTING_WORDS(ID, DEFAULT, SHOWN_DEFAULT, DOC, WORDS): a setting that is one of a
 * few words (WORDS, separated by spaces); its number is the word's place in WORDS
 * (DEFAULT when unset or empty). An includer that needs no words gets a plain row.
 */
#ifndef KPC_SETTING_WORDS
#define KPC_SETTING_WORDS(id, def, shown, doc, words) KPC_SETTING(id, WORDS, def, 0, 0, shown, doc)
#define KPC_SETTING_WORDS_PLAIN
#endif
/* clang-format off */
KPC_SETTING(CACHE_DIR, PATH, 0, 0, 0, "$XDG_CACHE_HOME/kpc, else $HOME/.cache/kpc",
    "the cache directory (a field of kpc_config or --cache-dir wins)")
KPC_SETTING(CACHE_MAX_SIZE, SIZE, 2ull << 30, 1, UINT64_MAX, "2G",
    "the disk limit the library keeps and `kpc prune` prunes to")
KPC_SETTING(MEM_MAX_PROGRAMS, COUNT, 256, 1, SIZE_MAX / 2, "256",
    "programs a context keeps in memory")
KPC_SETTING(SHM_ENTRIES, COUNT, 65536, 1, 1u << 24, "65536",
    "capacity of the host index, when this process creates it")
KPC_SETTING(SHM_LOCK_TIMEOUT_MS, MS, 5000, 1, UINT32_MAX, "5000",
    "how long a lock of the host index is waited for; past it the index is off for the process (disk only, logged)")
KPC_SETTING(BUILD_WAIT_MAX_MS, MS, 600000, 1, UINT32_MAX, "600000 (10 minutes)",
    "how long a live builder is waited for from its claim; then the waiters compile for themselves (counted in wait_timeouts)")
KPC_SETTING(BUILD_THREADS, COUNT, 1, 1, 256, "1",
    "threads kpc_program_get_many compiles with where the compiler builds in parallel inside a process (NVRTC; hipRTC 5.2: 1)")
KPC_SETTING(DISABLE, FLAG, 0, 0, 0, "0",
    "1: no disk cache and no host index (the drop-ins forward every call to the real library)")
KPC_SETTING(KEEP_SOURCES, FLAG, 1, 0, 0, "1",
    "0: records keep no request (source, options, headers), so `kpc replay` cannot rebuild them")
KPC_SETTING(STALE_TMP_MS, MS, 3600000, 60000, 604800000, "3600000 (an hour)",
    "how old a file in v1/tmp whose writer is not known here (not named as kpc names its temp files, named by another node or pid namespace, or in KPC_SHARED_DIR, where it may be another host's) must be before it is removed (by a prune; also when a cache opens, in KPC_SHARED_DIR or for a file another node or pid namespace named)")
KPC_SETTING(PACK_PATH, PATHS, 0, 0, 0, "",
    "pack files and directories (their *.kpack files) read after the disk tree and before a compile; a hit is copied into the disk tree")
KPC_SETTING(SHARED_DIR, PATH, 0, 0, 0, "",
    "a cache directory several hosts mount (NFS, Lustre): read after the packs and before the cluster tier, written with every build; a hit is copied into the disk tree (docs/cluster.md)")
KPC_SETTING(TRUST_GROUP, NAME, 0, 0, 0, "",
    "a group whose members may own and write the cache directory and KPC_SHARED_DIR and every directory and record in them, as you may (docs/trust.md); unset: only you and root")
KPC_SETTING(LOG, LEVEL, 1, 0, 0, "error",
    "what the library logs on standard error, one line each (any case)")
KPC_SETTING(REMOTE, URL, 0, 0, 0, "",
    "the cluster tier's Redis (docs/cluster.md); unset or empty: no cluster tier")
KPC_SETTING(REMOTE_TIMEOUT_MS, MS, 300, 1, 86400000, "300",
    "the cluster tier's connect and per-command timeout")
KPC_SETTING(REMOTE_LEASE_MS, MS, 3000, 10, 86400000, "3000",
    "the cluster tier's build lease, renewed every third of it by the live builder: how long a dead builder blocks a key")
KPC_SETTING(REMOTE_BACKOFF_MS, MS, 10000, 1, 86400000, "10000",
    "after a Redis error, how long this process stays host-local")
KPC_SETTING(REMOTE_FAILOVER_MS, MS, 20000, 0, 86400000, "20000",
    "on a Redis Cluster, how long a call whose node does not answer waits for a replica to take its slots over (cluster-node-timeout and a few seconds); then this process stays host-local")
KPC_SETTING(REMOTE_SECRET_FILE, PATH, 0, 0, 0, "",
    "the files of the cluster group's secret, `NEW[:OLD]` (mode 0600; `kpc remote keygen` makes one): records and leases in Redis carry its MAC; OLD's records are read too while the secret rotates; unset: Redis serves and stores no record")
KPC_SETTING_WORDS(REMOTE_TRUST, 0, "authenticated",
    "whether the cluster tier needs a secret: `unauthenticated` serves and stores records without one (a closed network only)",
    "authenticated unauthenticated")
KPC_SETTING(REMOTE_NAMESPACE, NAME, 0, 0, 0, "kpc",
    "the first part of every key of the cluster tier: several caches on one Redis")
KPC_SETTING(REMOTE_TTL_S, SECONDS, 2592000, 0, 315360000, "2592000 (30 days)",
    "a record in Redis expires unless read for this long (each hit renews it); 0: never")
KPC_SETTING(HOST_ID, TEXT, 0, 0, 0, "hostname:boot id",
    "this host's name in the cluster tier's leases")
KPC_SETTING(REAL_HIPRTC, PATH, 0, 0, 0, "",
    "the real hipRTC library the drop-in libkpc-hiprtc forwards to (else found by soname)")
KPC_SETTING(REAL_NVRTC, PATH, 0, 0, 0, "",
    "the real NVRTC library the drop-in libkpc-nvrtc forwards to (else found under CUDA_HOME, then by soname)")
KPC_SETTING(DROPIN_STATS, PATH, 0, 0, 0, "",
    "a file each process using a drop-in appends one line of its figures to, at exit")
/* clang-format on */
#ifdef KPC_SETTING_WORDS_PLAIN
#undef KPC_SETTING_WORDS
#undef KPC_SETTING_WORDS_PLAIN
#endif
