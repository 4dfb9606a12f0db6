/*
 * settings.h - the KPC_* environment variables, read and checked from one table
 * (base/settings_table.h, base/settings.c). Every layer asks here instead of calling
 * getenv: the library (core/config.c resolves a kpc_config against these), the host
 * index, the tiers, the tools and the drop-ins.
 *
 * A value is read from the environment at each call (tests and tools set variables
 * between opens), never cached. kpc_cache_open and the tools check every row first
 * (core/config.c: kpc_config_check_environment) and refuse a malformed value; a reader
 * that meets one later (the environment changed under a running process) logs a warning
 * once per variable and uses the default.
 */
#ifndef KPC_BASE_SETTINGS_H
#define KPC_BASE_SETTINGS_H

#include "kpc/kpc.h"

#include <stddef.h>
#include <stdint.h>

enum kpc_setting_type {
    KPC_SETTING_FLAG,
    KPC_SETTING_COUNT,
    KPC_SETTING_MS,
    KPC_SETTING_SECONDS,
    KPC_SETTING_SIZE,
    KPC_SETTING_LEVEL,
    KPC_SETTING_PATH,
    KPC_SETTING_PATHS,
    KPC_SETTING_URL,
    KPC_SETTING_NAME,
    KPC_SETTING_TEXT,
    KPC_SETTING_WORDS,
};

typedef enum kpc_setting_id {
#define KPC_SETTING(id, ...) KPC_SET_##id,
#include "base/settings_table.h"
#undef KPC_SETTING
    KPC_SET_COUNT
} kpc_setting_id;

typedef struct kpc_setting {
    const char *name; /* "KPC_CACHE_DIR" */
    enum kpc_setting_type type;
    uint64_t def, min, max;
    const char *shown_default;
    const char *doc;
    const char *words; /* WORDS: the accepted words, separated by spaces; else NULL */
} kpc_setting;

/* The row of id; NULL past the table. */
const kpc_setting *kpc__setting(kpc_setting_id id);
/* The variable as set, NULL when unset (an empty value is returned as ""). */
const char *kpc__setting_raw(kpc_setting_id id);
/* The accepted form in words ("a whole number of milliseconds from 1 to 4294967295"). */
void kpc__setting_form(kpc_setting_id id, char *out, size_t cap);
/* KPC_OK when unset or well formed; else KPC_E_INVALID and why gets one line naming the
 * variable, its value (never for a URL: it may hold a password) and the accepted form.
 * A URL's grammar is the cluster tier's (core/config.c checks it); here only its length. */
kpc_status kpc__setting_check(kpc_setting_id id, char *why, size_t cap);
/* The value of a FLAG, COUNT, MS, SECONDS, SIZE, LEVEL or WORDS setting (a word's place
 * in the row's words), else its default; a malformed one is logged (warning, once) and
 * the default used. */
uint64_t kpc__setting_number(kpc_setting_id id);
/* The value of a PATH, PATHS, URL, NAME or TEXT setting; NULL when unset, empty or
 * malformed (logged as above). */
const char *kpc__setting_text(kpc_setting_id id);

/* A secret file (path, named by the variable var in messages: KPC_REMOTE_SECRET_FILE):
 * opened without blocking (a FIFO must not hang an open), a regular file of 1 byte to
 * 1 MiB, read whole into *buf (malloc'ed; the caller wipes and frees it), owned by this
 * user or root, writable by no one else and readable by no other user outside its group.
 * A file its group may read is used, with a warning (chmod 600). KPC_E_INVALID, with an
 * error naming the variable, the file and why, for one that is missing, unreadable, not
 * a regular file, empty, another user's, or writable or readable as above; KPC_E_NOMEM. */
kpc_status kpc__secret_file_read(const char *var, const char *path, void **buf, size_t *size);
/* A size in bytes: digits and an optional K, M, G, T, P or E suffix (binary, any case), as
 * libbsd's expand_number reads it; KPC_E_INVALID for anything else or past 2^64 - 1. 0 is
 * a size here (`kpc prune --max-size 0`); a setting's range may refuse it. */
kpc_status kpc__parse_size(const char *text, uint64_t *out);
/* The one reader of a number, for the settings and every numeric argument of the tools:
 * a COUNT, MS or SECONDS value is digits only, a SIZE one kpc__parse_size's form; either
 * from min to max. KPC_E_INVALID for anything else (NULL, empty, a sign, a space before or
 * after, other characters, past 2^64 - 1), *out untouched. */
kpc_status kpc__parse_number(enum kpc_setting_type type, const char *text, uint64_t min, uint64_t max,
                             uint64_t *out);
/* The one rule of a path (a PATH setting, kpc_config.cache_dir): not empty, under 4096
 * bytes, no control character (a byte below 0x20, or 0x7f). KPC_OK or KPC_E_INVALID. */
kpc_status kpc__path_check(const char *path);
/* The accepted form of such a number in words, as kpc__setting_form says it of a row. */
void kpc__number_form(enum kpc_setting_type type, uint64_t min, uint64_t max, char *out, size_t cap);

#endif /* KPC_BASE_SETTINGS_H */
