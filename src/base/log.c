/*
 * log.c - KPC_LOG output, status names and the per-thread compile log.
 *
 * The library prints nothing except through kpc__log, to stderr, at or below the level
 * KPC_LOG names (default: error). kpc_last_log() is thread-local so that concurrent
 * failing requests never see each other's logs.
 */
#define _GNU_SOURCE
#include "base/log.h"
#include "base/settings.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

int kpc__log_level = -1; /* -1: not read from the environment yet */

static const char *const level_names[] = {"", "error", "warn", "info", "debug", "trace"};

int kpc__log_parse(const char *value)
{
    if (value == NULL || *value == '\0')
        return KPC_LOG_ERROR;
    for (int i = KPC_LOG_ERROR; i <= KPC_LOG_TRACE; i++)
        if (strcasecmp(value, level_names[i]) == 0)
            return i;
    return -1;
}

__attribute__((constructor)) static void log_level_from_env(void)
{
    /* raw: a malformed value is refused by kpc_cache_open and the tools, not here */
    int level = kpc__log_parse(kpc__setting_raw(KPC_SET_LOG));
    kpc__log_level = level < 0 ? KPC_LOG_ERROR : level;
}

void kpc__log(int level, const char *fmt, ...)
{
    char line[2048];
    int n = snprintf(line, sizeof line, "kpc[%d]: %s: ", (int)getpid(),
                     level_names[level < KPC_LOG_ERROR || level > KPC_LOG_TRACE ? 1 : level]);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    size_t len = strlen(line);
    if (len + 1 < sizeof line)
        line[len++] = '\n';
    else
        line[sizeof line - 2] = '\n', len = sizeof line - 1;
    /* one write so that lines of concurrent processes do not interleave; bare: stderr is
     * not kpc's file, and a log line must not fail a call in a fault test */
    ssize_t r = write(STDERR_FILENO, line, len);
    (void)r;
}

/* A pthread key rather than _Thread_local: its destructor frees a thread's last log
 * when the thread exits. */
static pthread_key_t last_log_key;
static pthread_once_t last_log_once = PTHREAD_ONCE_INIT;

static void last_log_key_create(void)
{
    pthread_key_create(&last_log_key, free);
}

void kpc__last_log_set(const char *text)
{
    pthread_once(&last_log_once, last_log_key_create);
    free(pthread_getspecific(last_log_key));
    pthread_setspecific(last_log_key, text ? strdup(text) : NULL);
}

const char *kpc_last_log(void)
{
    pthread_once(&last_log_once, last_log_key_create);
    const char *log = pthread_getspecific(last_log_key);
    return log ? log : "";
}

const char *kpc_status_str(kpc_status s)
{
    switch (s) {
    case KPC_OK: return "KPC_OK";
    case KPC_E_INVALID: return "KPC_E_INVALID";
    case KPC_E_NOMEM: return "KPC_E_NOMEM";
    case KPC_E_COMPILE: return "KPC_E_COMPILE";
    case KPC_E_NO_DEVICE: return "KPC_E_NO_DEVICE";
    case KPC_E_HIP: return "KPC_E_HIP";
    case KPC_E_NOT_FOUND: return "KPC_E_NOT_FOUND";
    case KPC_E_IO: return "KPC_E_IO";
    case KPC_E_SHM: return "KPC_E_SHM";
    case KPC_E_CORRUPT: return "KPC_E_CORRUPT";
    case KPC_E_UNAVAILABLE: return "KPC_E_UNAVAILABLE";
    }
    return "KPC_E_UNKNOWN";
}
