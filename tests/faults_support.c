/*
 * faults_support.c - the fault tests' shared fixtures and helpers (faults_support.h).
 */
#define _GNU_SOURCE
#include "support.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "faults_support.h"

char *dir;   /* <parent>/cache */
char *parent; /* the mkdtemp directory holding it */

void setup(void)
{
    dir = ts_tmpdir();
    parent = strdup(dir);
    *strrchr(parent, '/') = '\0';
    ts_fake_install();
}

void teardown(void)
{
    ts_fake_remove();
    chmod(parent, 0700);
    free(parent);
    ts_cleanup(dir);
}
