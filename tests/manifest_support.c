/*
 * manifest_support.c - the fixture and file helpers of the manifest tests
 * (manifest_support.h).
 */
#define _GNU_SOURCE
#include "manifest_support.h"
#include "support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

char *mf_dir;
char *mf_work;

void mf_setup(void)
{
    mf_dir = ts_tmpdir();
    mf_work = strdup(mf_dir);
    *strrchr(mf_work, '/') = '\0';
}

void mf_teardown(void)
{
    free(mf_work);
    ts_cleanup(mf_dir);
}

void mf_settle(void)
{
    usleep(1100 * 1000);
}

void mf_put(const char *rel, const char *text)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", mf_work, rel);
    char parent[4200];
    snprintf(parent, sizeof parent, "%s", path);
    *strrchr(parent, '/') = '\0';
    ck_assert_int_eq(kpc__mkdir_p(parent, 0700), 0);
    ts_write_file(path, text, strlen(text));
}
