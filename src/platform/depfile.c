/*
 * depfile.c - make-format dependency files, as clang's -MD writes them: the first
 * rule's target and prerequisites, unescaped. Lengths are bounded by the text given;
 * nothing is trusted past it.
 */
#define _GNU_SOURCE
#include "platform/depfile.h"
#include "base/fault.h"
#include "base/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

kpc_status kpc_depfile_temp(char *path, size_t cap)
{
    const char *tmp = getenv("TMPDIR");
    if (tmp == NULL || tmp[0] != '/')
        tmp = "/tmp";
    int n = snprintf(path, cap, "%s/kpc-deps-XXXXXX", tmp);
    if (n < 0 || (size_t)n >= cap)
        return KPC_E_INVALID;
    int fd = kpc__sys_fault(KPC_SYS_OPEN) ? -1 : mkostemp(path, O_CLOEXEC);
    if (fd < 0) {
        KPC_LOG(KPC_LOG_WARN, "mkostemp(%s): %s: dependencies unknown, the outcome is not cached",
                path, strerror(errno));
        path[0] = '\0';
        return KPC_E_IO;
    }
    close(fd);
    return KPC_OK;
}


/* ---- parsing ---------------------------------------------------------------------- */
void kpc_depfile_paths_free(char **paths, size_t n)
{
    for (size_t i = 0; paths && i < n; i++)
        free(paths[i]);
    free(paths);
}

/* The next word of a make rule, unescaped into a malloc'd string; NULL at the end (or
 * on ENOMEM: *nomem). A backslash-newline is a space. */
static char *next_word(const char *text, size_t len, size_t *pos, bool *nomem)
{
    size_t i = *pos;
    for (;;) { /* skip blanks and continuations */
        while (i < len && (text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r'))
            i++;
        if (i + 1 < len && text[i] == '\\' && (text[i + 1] == '\n' || text[i + 1] == '\r')) {
            i += 2;
            continue;
        }
        break;
    }
    if (i >= len) {
        *pos = i;
        return NULL;
    }
    char *w = malloc(len - i + 1), *o = w;
    if (w == NULL) {
        *nomem = true;
        return NULL;
    }
    while (i < len && text[i] != ' ' && text[i] != '\t' && text[i] != '\n' && text[i] != '\r') {
        if (text[i] == '\\') {
            size_t k = 0;
            while (i + k < len && text[i + k] == '\\')
                k++;
            char next = i + k < len ? text[i + k] : '\0';
            if (next == ' ') { /* 2m+1 backslashes then a space: m backslashes and the space */
                for (size_t b = 0; b < (k - 1) / 2; b++)
                    *o++ = '\\';
                *o++ = ' ';
                i += k + 1;
                continue;
            }
            if (next == '#' && k == 1) {
                *o++ = '#';
                i += 2;
                continue;
            }
            if ((next == '\n' || next == '\r') && k == 1)
                break; /* a continuation ends the word */
            for (size_t b = 0; b < k; b++)
                *o++ = '\\';
            i += k;
            continue;
        }
        if (text[i] == '$' && i + 1 < len && text[i + 1] == '$') {
            *o++ = '$';
            i += 2;
            continue;
        }
        *o++ = text[i++];
    }
    *o = '\0';
    *pos = i;
    return w;
}

kpc_status kpc_depfile_parse(const char *text, size_t len, char **target, char ***paths,
                                      size_t *n)
{
    *target = NULL;
    *paths = NULL;
    *n = 0;
    size_t pos = 0, cap = 0;
    bool nomem = false;
    char *t = next_word(text, len, &pos, &nomem);
    if (t == NULL)
        return nomem ? KPC_E_NOMEM : KPC_E_CORRUPT;
    size_t tl = strlen(t);
    if (tl > 0 && t[tl - 1] == ':') {
        t[tl - 1] = '\0';
    } else { /* "target :" */
        char *colon = next_word(text, len, &pos, &nomem);
        bool ok = colon && strcmp(colon, ":") == 0;
        free(colon);
        if (!ok) {
            free(t);
            return nomem ? KPC_E_NOMEM : KPC_E_CORRUPT;
        }
    }
    char **v = NULL;
    size_t count = 0;
    for (;;) {
        /* the first rule only: a newline not escaped ends it */
        size_t i = pos;
        while (i < len && (text[i] == ' ' || text[i] == '\t'))
            i++;
        if (i >= len || text[i] == '\n' || text[i] == '\r')
            break;
        char *w = next_word(text, len, &pos, &nomem);
        if (w == NULL)
            break;
        if (count == cap) {
            cap = cap ? cap * 2 : 16;
            char **nv = realloc(v, cap * sizeof *nv);
            if (nv == NULL) {
                free(w);
                nomem = true;
                break;
            }
            v = nv;
        }
        v[count++] = w;
    }
    if (nomem) {
        kpc_depfile_paths_free(v, count);
        free(t);
        return KPC_E_NOMEM;
    }
    *target = t;
    *paths = v;
    *n = count;
    return KPC_OK;
}
