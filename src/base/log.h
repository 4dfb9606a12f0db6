/*
 * log.h - KPC_LOG, the only way library code speaks (base/log.c).
 *
 * Naming, for every internal header of libkpc (written once, here at the bottom of the
 * include graph): the public API is `kpc_` and lives only in include/kpc/kpc.h; an
 * internal non-static function or type carries the prefix of the module whose header
 * declares it, `kpc_<module>_` (storage/store.h: kpc_store_, core/map.h: kpc_map_,
 * platform/names.h: kpc_names_, ...); `kpc__` is kept for the base utilities (base/log.h,
 * base/util.h, base/fault.h). Everything else is static. None of these symbols is
 * exported from libkpc.so (hidden visibility); the tools and tests link the static
 * library to reach them.
 *
 * Include rules (scripts/check-includes.sh): base/ includes nothing of ours outside
 * base/; platform/ includes base/; storage/ includes base/ and platform/; core/ includes
 * base/, platform/ and storage/; tools/ anything. kpc/kpc.h may be included anywhere.
 */
#ifndef KPC_BASE_LOG_H
#define KPC_BASE_LOG_H

#include "kpc/kpc.h"

enum kpc_log_level { KPC_LOG_ERROR = 1, KPC_LOG_WARN, KPC_LOG_INFO, KPC_LOG_DEBUG, KPC_LOG_TRACE };
extern int kpc__log_level; /* read racily on purpose: a level change is advisory */
void kpc__log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define KPC_LOG(level, ...)                                                                    \
    do {                                                                                       \
        if ((level) <= kpc__log_level)                                                         \
            kpc__log((level), __VA_ARGS__);                                                    \
    } while (0)
/* Parse a KPC_LOG value; -1 when it names no level. */
int kpc__log_parse(const char *value);
/* Set this thread's kpc_last_log() text (copied; NULL clears it). */
void kpc__last_log_set(const char *text);

#endif /* KPC_BASE_LOG_H */
