/*
 * manifest_seen.h - the manifest under a request's key as one request has seen it
 * (core/manifest_seen.c): what core/resolve.c asks of manifests, in two calls, one
 * before the build (read) and one after it (record, core/manifest_record.c).
 */
#ifndef KPC_CORE_MANIFEST_SEEN_H
#define KPC_CORE_MANIFEST_SEEN_H

#include "core/context.h"
#include "core/manifest.h"
#include "storage/record.h"
#include "storage/tier.h"

#include <stdbool.h>

/* The manifest under the request key as one request has seen it: read once by each look
 * (a round of obtain), and recorded into by that request's build without being read again.
 * Between the look and the build, a builder on another host (through the shared tier or
 * a pack made meanwhile) may have added an entry that this extension then drops: that
 * costs the other file set one more build when next asked, never a wrong object, and
 * builders of one key on one host never race here (the host index lets one build). */
typedef struct kpc_seen_manifest {
    bool read;      /* looked, and nothing matched: m is what the build records into */
    kpc_manifest m; /* m.block set: a manifest held, kpc_seen_manifest_free due (most
                       requests end holding none: a match or a build let it go) */
} kpc_seen_manifest;
void kpc_seen_manifest_free(kpc_seen_manifest *sm);

/* The outcome the manifest under key leads to for the files as they are now: the record
 * (CODE or LOG) of the first entry whose files all match, with that entry's files in
 * *deps (owned), the tier it came from in *from (the caller checks it, then accepts it:
 * storage/tier.h), and the manifest let go. KPC_E_NOT_FOUND: no manifest, no entry
 * matches (sm keeps the manifest as read, for the build to record into), or its record
 * is gone. */
kpc_status kpc_seen_manifest_read(kpc_context *ctx, const kpc_key *key, kpc_seen_manifest *sm,
                                  kpc_record *rec, kpc_deps **deps, kpc_tier **from);
/* Read the manifest under key into sm, as a look that finds no entry leaves it (what sm
 * held is freed first): for a build that records into it without having looked. */
void kpc_seen_manifest_look(kpc_context *ctx, const kpc_key *key, kpc_seen_manifest *sm);
/* A build that read files (b), recorded (core/manifest_record.c):
 * kpc_manifest_record_build on the manifest under key as sm saw it (read now if this
 * request has not looked since a match: a rare path): *deps, *object, and the new
 * manifest's bytes in *buf (malloc'd), to be written once the outcome's record is. sm
 * holds nothing after. */
kpc_status kpc_seen_manifest_record(kpc_context *ctx, const kpc_key *key, kpc_seen_manifest *sm,
                                    const kpc_manifest_build *b, uint32_t outcome, kpc_deps **deps,
                                    kpc_key *object, void **buf, size_t *size);

#endif /* KPC_CORE_MANIFEST_SEEN_H */
