/*
 * fake_comgr_major.c - a comgr of the major after the one kpc's header names: its version
 * call alone (test_comgr puts it where the loader finds the header's soname, and the
 * comgr platform must refuse it before calling any action by number).
 */
#include <amd_comgr.h>
#include <stddef.h>

void amd_comgr_get_version(size_t *major, size_t *minor)
{
    *major = AMD_COMGR_INTERFACE_VERSION_MAJOR + 1;
    *minor = 0;
}
