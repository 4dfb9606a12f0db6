/*
 * manifest_support.h - what the tests of files read from disk share (manifest_support.c):
 * a cache directory and a work directory beside it for the files the requests read, and
 * the wait that makes a file old enough for a compile's outcome to be cached.
 */
#ifndef KPC_TESTS_MANIFEST_SUPPORT_H
#define KPC_TESTS_MANIFEST_SUPPORT_H

extern char *mf_dir;  /* the cache */
extern char *mf_work; /* the files the requests read live under it */

void mf_setup(void);    /* a checked fixture: both made */
void mf_teardown(void); /* both removed */
/* A second and a bit: what a file's age must exceed for the next compile to be cached. */
void mf_settle(void);
/* Write text to <work>/rel, making its directories. */
void mf_put(const char *rel, const char *text);

#endif
