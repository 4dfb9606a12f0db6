/*
 * pack_tier.h - the read-only storage tier of the packs named by KPC_PACK_PATH
 * (storage/pack_tier.c), second in the walk: after the disk tree, before a compile.
 */
#ifndef KPC_STORAGE_PACK_TIER_H
#define KPC_STORAGE_PACK_TIER_H

#include "storage/tier.h"

/* KPC_E_NOT_FOUND (the tier is absent) when KPC_PACK_PATH is unset or names no usable
 * pack; a refused pack is logged and left out, the others are used. */
kpc_status kpc_pack_tier_open(const kpc_tier_env *env, kpc_tier **out);

#endif /* KPC_STORAGE_PACK_TIER_H */
