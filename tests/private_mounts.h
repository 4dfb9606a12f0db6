/*
 * private_mounts.h - a mount namespace of the calling process's own whose mounts on a
 * path stay in it, for the tests that mount (a tmpfs on /dev/shm for a simulated host, a
 * small tmpfs for a full disk). Header-only: the tests (support library) and the cluster
 * benchmark (no Check) both use it.
 *
 * Mounts made in a new namespace propagate back to the namespace it came from when the
 * mount they are made on is shared, so that mount is made private first. It is the
 * nearest mount point at or above the path, not `/`: in a container `/` is a mount point,
 * but in a chroot into a plain directory it is not (mount(2) refuses it with EINVAL), and
 * there /dev/shm is often a bind mount of its own. Nothing here changes the root
 * directory, so a process in a chroot stays in it (setns(2) into another process's mount
 * namespace, as nsenter does, would not).
 */
#ifndef KPC_TEST_PRIVATE_MOUNTS_H
#define KPC_TEST_PRIVATE_MOUNTS_H

#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <unistd.h>

/* Enter a new mount namespace and make the mount holding `path` (which must exist)
 * private in it. 0, or -1 with the reason in why (for a skip line). Needs root. */
static inline int tm_private_mounts(const char *path, char *why, size_t cap)
{
    char p[PATH_MAX];
    if (geteuid() != 0) {
        snprintf(why, cap, "mounting needs root (uid %u)", (unsigned)geteuid());
        return -1;
    }
    if (realpath(path, p) == NULL) {
        snprintf(why, cap, "realpath(%.300s): %s", path, strerror(errno));
        return -1;
    }
    if (unshare(CLONE_NEWNS) != 0) {
        snprintf(why, cap, "no mount namespace here (unshare: %s)", strerror(errno));
        return -1;
    }
    for (;;) {
        if (mount(NULL, p, NULL, MS_REC | MS_PRIVATE, NULL) == 0)
            return 0;
        if (errno != EINVAL) {
            snprintf(why, cap, "cannot make the mount at %.300s private: %s", p, strerror(errno));
            return -1;
        }
        if (strcmp(p, "/") == 0)
            break;
        char *slash = strrchr(p, '/');
        slash[slash == p ? 1 : 0] = '\0';
    }
    snprintf(why, cap, "no mount point at or above %.300s in this root (a chroot into a plain "
             "directory): a mount there could reach the namespace outside; bind-mount the root "
             "onto itself before the chroot", path);
    return -1;
}

#endif
