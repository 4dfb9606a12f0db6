/*
 * faults_support.h - what the file-system fault tests (tests/test_faults_*.c) share:
 * the case's cache directory (under a parent of its own) and its fixtures, paths in it.
 * The fake platform compiles: what matters here is the disk tree.
 */
#ifndef KPC_TEST_FAULTS_SUPPORT_H
#define KPC_TEST_FAULTS_SUPPORT_H

#include "support.h"

extern char *dir;
extern char *parent;

void setup(void);

void teardown(void);

#endif
