/*
 * settings.c - the table of KPC_* variables (rows in base/settings_table.h): reading,
 * checking, and the accepted form that messages and the docs show.
 *
 * One parser per type, so a variable is accepted or refused by what it is, never by the
 * habits of the file that reads it: a number is digits only (no sign, no space, no
 * suffix) inside the row's range; a size is libbsd's expand_number with its overflow
 * check, no sign and not 0; a flag is exactly 1 or 0; a path holds no control character.
 * An empty number, size, path or name is malformed (`export KPC_CACHE_DIR=$UNSET` must
 * not turn into a default silently: an empty KPC_REMOTE_NAMESPACE would put a job's keys
 * among another cache's); an empty flag, level, list, URL, word or text means unset. The
 * tools read their numeric arguments with the same number parser (kpc__parse_number), so
 * an option and a variable take one form.
 */
#define _GNU_SOURCE
#include "base/settings.h"
#include "base/log.h"
#include "base/fault.h"
#include "base/util.h"

#include <bsd/libutil.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TEXT_MAX 4096 /* a path, a list or a text: PATH_MAX, and the room of kpc_settings */

static const kpc_setting table[KPC_SET_COUNT] = {
#define KPC_SETTING(id, type, def, min, max, shown, doc)                                       \
    [KPC_SET_##id] = {"KPC_" #id, KPC_SETTING_##type, (uint64_t)(def), (uint64_t)(min),        \
                      (uint64_t)(max), shown, doc, NULL},
#define KPC_SETTING_WORDS(id, def, shown, doc, words)                                          \
    [KPC_SET_##id] = {"KPC_" #id, KPC_SETTING_WORDS, (uint64_t)(def), 0, 0, shown, doc, words},
#include "base/settings_table.h"
#undef KPC_SETTING_WORDS
#undef KPC_SETTING
};

/* a NAME: what may go into a Redis key name and a log line as it is */
#define NAME_MAX_LEN 63
#define NAME_CHARS "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-."

/* The place of v among the space-separated words; -1 when it is none of them. */
static int word_index(const char *words, const char *v)
{
    size_t n = strlen(v);
    int i = 0;
    for (const char *w = words; *w; i++) {
        size_t len = strcspn(w, " ");
        if (len == n && n > 0 && strncmp(w, v, n) == 0)
            return i;
        w += len;
        w += strspn(w, " ");
    }
    return -1;
}

/* a malformed value already logged by a reader (once per variable and process) */
static atomic_bool warned[KPC_SET_COUNT];

const kpc_setting *kpc__setting(kpc_setting_id id)
{
    return (unsigned)id < KPC_SET_COUNT ? &table[id] : NULL;
}

const char *kpc__setting_raw(kpc_setting_id id)
{
    return (unsigned)id < KPC_SET_COUNT ? getenv(table[id].name) : NULL;
}

void kpc__number_form(enum kpc_setting_type type, uint64_t min, uint64_t max, char *out, size_t cap)
{
    const char *unit = type == KPC_SETTING_MS ? " of milliseconds" : type == KPC_SETTING_SECONDS ? " of seconds" : "";
    if (type == KPC_SETTING_SIZE)
        snprintf(out, cap, "a size in bytes from %llu, with an optional K, M, G, T, P or E suffix (binary), such as 512M or 2G",
                 (unsigned long long)min);
    else
        snprintf(out, cap, "a whole number%s from %llu to %llu", unit, (unsigned long long)min,
                 (unsigned long long)max);
}

void kpc__setting_form(kpc_setting_id id, char *out, size_t cap)
{
    const kpc_setting *s = &table[id];
    switch (s->type) {
    case KPC_SETTING_FLAG: snprintf(out, cap, "1 or 0"); break;
    case KPC_SETTING_COUNT:
    case KPC_SETTING_MS:
    case KPC_SETTING_SECONDS:
    case KPC_SETTING_SIZE: kpc__number_form(s->type, s->min, s->max, out, cap); break;
    case KPC_SETTING_LEVEL: snprintf(out, cap, "error, warn, info, debug or trace"); break;
    case KPC_SETTING_PATH:
        snprintf(out, cap, "a path, not empty, under %d bytes, with no control character", TEXT_MAX);
        break;
    case KPC_SETTING_PATHS:
        snprintf(out, cap, "paths separated by colons, under %d bytes, with no control character", TEXT_MAX);
        break;
    case KPC_SETTING_URL:
        snprintf(out, cap, "redis://[[USER]:PASSWORD@]HOST[:PORT][/DB] or redis+unix:///PATH[?db=N]");
        break;
    case KPC_SETTING_NAME:
        snprintf(out, cap, "1 to %d letters, digits, '_', '-' or '.'", NAME_MAX_LEN);
        break;
    case KPC_SETTING_TEXT: snprintf(out, cap, "a text under %d bytes", TEXT_MAX); break;
    case KPC_SETTING_WORDS: {
        /* "a or b", "a, b or c" */
        size_t len = 0, n = 0;
        out[0] = '\0';
        for (const char *w = s->words; *w && len < cap; n++) {
            size_t wl = strcspn(w, " ");
            const char *next = w + wl + strspn(w + wl, " ");
            const char *sep = n == 0 ? "" : *next ? ", " : " or ";
            int k = snprintf(out + len, cap - len, "%s%.*s", sep, (int)wl, w);
            len += k > 0 ? (size_t)k : 0;
            w = next;
        }
        break;
    }
    }
}

kpc_status kpc__parse_size(const char *text, uint64_t *out)
{
    /* expand_number alone takes "-1" (wrapped around), "5K5", "0x10" and, without a
     * suffix, a number past 2^64 (as 2^64 - 1, errno ERANGE): digits and one suffix only */
    size_t digits = text ? strspn(text, "0123456789") : 0;
    if (digits == 0 || (text[digits] != '\0' && (text[digits + 1] != '\0' || !strchr("kKmMgGtTpPeE", text[digits]))))
        return KPC_E_INVALID;
    uint64_t n;
    errno = 0;
    if (expand_number(text, &n) != 0 || errno != 0)
        return KPC_E_INVALID;
    *out = n;
    return KPC_OK;
}

kpc_status kpc__parse_number(enum kpc_setting_type type, const char *text, uint64_t min, uint64_t max,
                             uint64_t *out)
{
    uint64_t n;
    if (text == NULL)
        return KPC_E_INVALID;
    if (type == KPC_SETTING_SIZE) {
        if (kpc__parse_size(text, &n) != KPC_OK)
            return KPC_E_INVALID;
    } else {
        if (text[0] < '0' || text[0] > '9')
            return KPC_E_INVALID; /* strtoull would take a sign or a space */
        char *end;
        errno = 0;
        unsigned long long v = strtoull(text, &end, 10);
        if (errno != 0 || *end != '\0')
            return KPC_E_INVALID;
        n = v;
    }
    if (n < min || n > max)
        return KPC_E_INVALID;
    *out = n;
    return KPC_OK;
}

/* A byte below 0x20 or 0x7f: a newline or a tab in a path is a pasted or generated value
 * gone wrong, and it would split the log line that names it. */
static bool has_control(const char *v)
{
    for (const unsigned char *p = (const unsigned char *)v; *p; p++)
        if (*p < 0x20 || *p == 0x7f)
            return true;
    return false;
}

kpc_status kpc__path_check(const char *path)
{
    return path != NULL && path[0] != '\0' && strlen(path) < TEXT_MAX && !has_control(path) ? KPC_OK
                                                                                             : KPC_E_INVALID;
}

/* The value of v for row s into *num (numbers); false when malformed. */
static bool parse(const kpc_setting *s, const char *v, uint64_t *num)
{
    *num = s->def;
    switch (s->type) {
    case KPC_SETTING_FLAG:
        if (v[0] == '\0')
            return true;
        if (strcmp(v, "1") != 0 && strcmp(v, "0") != 0)
            return false;
        *num = v[0] == '1';
        return true;
    case KPC_SETTING_COUNT:
    case KPC_SETTING_MS:
    case KPC_SETTING_SECONDS:
    case KPC_SETTING_SIZE: return kpc__parse_number(s->type, v, s->min, s->max, num) == KPC_OK;
    case KPC_SETTING_LEVEL: {
        int level = kpc__log_parse(v);
        if (level < 0)
            return false;
        *num = (uint64_t)level;
        return true;
    }
    case KPC_SETTING_PATH: return kpc__path_check(v) == KPC_OK;
    case KPC_SETTING_PATHS: return strlen(v) < TEXT_MAX && !has_control(v);
    case KPC_SETTING_URL:
    case KPC_SETTING_TEXT: return strlen(v) < TEXT_MAX;
    case KPC_SETTING_NAME: {
        size_t n = strlen(v);
        return n >= 1 && n <= NAME_MAX_LEN && strspn(v, NAME_CHARS) == n;
    }
    case KPC_SETTING_WORDS: {
        if (v[0] == '\0')
            return true;
        int i = word_index(s->words, v);
        if (i < 0)
            return false;
        *num = (uint64_t)i;
        return true;
    }
    }
    return false;
}

kpc_status kpc__setting_check(kpc_setting_id id, char *why, size_t cap)
{
    const kpc_setting *s = kpc__setting(id);
    const char *v = kpc__setting_raw(id);
    uint64_t num;
    if (s == NULL || v == NULL || parse(s, v, &num))
        return KPC_OK;
    char form[160];
    kpc__setting_form(id, form, sizeof form);
    if (s->type == KPC_SETTING_URL)
        snprintf(why, cap, "%s is not %s", s->name, form);
    else { /* a control character shown as \xNN: the line stays one line */
        char shown[804]; /* 200 bytes of v, each at most \xNN */
        size_t n = 0;
        for (const unsigned char *p = (const unsigned char *)v; *p && p - (const unsigned char *)v < 200; p++)
            n += (size_t)snprintf(shown + n, sizeof shown - n, *p < 0x20 || *p == 0x7f ? "\\x%02x" : "%c", *p);
        snprintf(why, cap, "%s=\"%s%s\" is not %s", s->name, shown, strlen(v) > 200 ? "..." : "", form);
    }
    return KPC_E_INVALID;
}

static void warn_once(kpc_setting_id id)
{
    if (atomic_exchange(&warned[id], true))
        return;
    char why[512];
    if (kpc__setting_check(id, why, sizeof why) != KPC_OK)
        KPC_LOG(KPC_LOG_WARN, "%s: using the default%s%s", why, table[id].shown_default[0] ? ", " : "",
                table[id].shown_default);
}

uint64_t kpc__setting_number(kpc_setting_id id)
{
    const kpc_setting *s = kpc__setting(id);
    if (s == NULL)
        return 0;
    const char *v = getenv(s->name);
    uint64_t num;
    if (v == NULL)
        return s->def;
    if (!parse(s, v, &num)) {
        warn_once(id);
        return s->def;
    }
    return num;
}

const char *kpc__setting_text(kpc_setting_id id)
{
    const kpc_setting *s = kpc__setting(id);
    if (s == NULL)
        return NULL;
    const char *v = getenv(s->name);
    uint64_t num;
    if (v == NULL || v[0] == '\0')
        return NULL;
    if (!parse(s, v, &num)) {
        warn_once(id);
        return NULL;
    }
    return v;
}

/* Why a secret file's owner or mode lets another user know or change the secret (NULL
 * when neither does): another owner, or a write bit for the group or others, lets that
 * user choose the secret; a read bit for others lets every user of the host read it.
 * Either way they could tag records every host of the group runs. A group read bit is
 * said as a warning only: a group an administrator gave the secret to is its group. */
static const char *secret_file_exposed(const struct stat *st, char *why, size_t cap)
{
    if (st->st_uid != geteuid() && st->st_uid != 0)
        snprintf(why, cap, "is owned by uid %u, not by this user (uid %u) or root", (unsigned)st->st_uid,
                 (unsigned)geteuid());
    else if (st->st_mode & 0022)
        snprintf(why, cap, "may be written by %s (mode %03o)", (st->st_mode & 0002) ? "every user" : "its group",
                 (unsigned)(st->st_mode & 0777));
    else if (st->st_mode & 0004)
        snprintf(why, cap, "may be read by every user (mode %03o)", (unsigned)(st->st_mode & 0777));
    else
        return NULL;
    return why;
}

kpc_status kpc__secret_file_read(const char *name, const char *path, void **buf, size_t *size)
{
    *buf = NULL;
    *size = 0;
    if (path == NULL || path[0] == '\0') {
        KPC_LOG(KPC_LOG_ERROR, "%s names an empty path", name);
        return KPC_E_INVALID;
    }
    int fd = kpc__open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, 0);
    if (fd < 0) {
        KPC_LOG(KPC_LOG_ERROR, "%s=%s: %s", name, path, strerror(errno));
        return KPC_E_INVALID;
    }
    struct stat st;
    kpc_status s = kpc__read_fd_stat(fd, 1 << 20, buf, size, &st);
    close(fd);
    if (s == KPC_OK && *size == 0)
        s = KPC_E_INVALID;
    char exposed[160];
    if (s == KPC_OK && secret_file_exposed(&st, exposed, sizeof exposed)) {
        KPC_LOG(KPC_LOG_ERROR, "%s=%s %s: refused, since another user could know or choose the secret and tag "
                "code that this host runs; if it is yours to change: chown $(id -u) %s && chmod 600 %s",
                name, path, exposed, path, path);
        explicit_bzero(*buf, *size);
        free(*buf);
        *buf = NULL;
        *size = 0;
        return KPC_E_INVALID;
    }
    if (s != KPC_OK) {
        const char *why = s == KPC_E_NOMEM         ? "out of memory"
                          : s == KPC_E_IO          ? "cannot be read"
                          : !S_ISREG(st.st_mode)   ? "is not a regular file"
                          : st.st_size > (1 << 20) ? "is over 1 MiB"
                                                   : "is empty";
        KPC_LOG(KPC_LOG_ERROR, "%s=%s %s", name, path, why);
        free(*buf);
        *buf = NULL;
        *size = 0;
        return s == KPC_E_NOMEM ? s : KPC_E_INVALID;
    }
    if (st.st_mode & 0040)
        KPC_LOG(KPC_LOG_WARN, "%s=%s may be read by its group (mode %03o): chmod 600 %s", name, path,
                (unsigned)(st.st_mode & 0777), path);
    return KPC_OK;
}
