/*
 * amd_comgr.h - what the AMD platforms share of comgr (platform/amd_comgr.c): loading it
 * (dlopen'ed, never linked), validating a target against its ISA list, and hashing the
 * device libraries it links into a compiler identity. platform/amd.c (hipRTC) asks it to
 * validate targets; platform/comgr.c compiles through it.
 */
#ifndef KPC_PLATFORM_AMD_COMGR_H
#define KPC_PLATFORM_AMD_COMGR_H

#include "base/root.h"
#include "kpc/kpc.h"
#include "platform/identity.h"

#include <stddef.h>
#include <stdint.h>

/* The prefix of comgr's ISA names ("amdgcn-amd-amdhsa--gfx90a"). */
#define KPC_COMGR_ISA_PREFIX "amdgcn-amd-amdhsa--"

/* comgr's handle (for the caller's own dlsym), loaded on the first call: a comgr already
 * in the process first, then by soname, the newest generation first; for the comgr
 * platform only the major of the header it was built against. KPC_E_UNAVAILABLE
 * (logged) when none loads. */
kpc_status kpc_comgr_open(void **lib);

/* Validate and normalize target (platform.h's target_normalize) for the platform named
 * platform: the canonical form (processor, then :sramecc, then :xnack), a processor
 * comgr lists and features comgr accepts for it (compiling for any other crashes
 * comgr), remembered under root for compiler id. KPC_E_INVALID (logged with the
 * supported list); KPC_E_UNAVAILABLE. */
kpc_status kpc_comgr_target_normalize(const kpc_root *root, const char *platform, const uint8_t id[16],
                                      const char *target, char *out, size_t cap);

/* Hash the device libraries comgr links into every object (amdgcn/bitcode beside the
 * loaded comgr, where they are files) into st, and remember their directory in files. */
struct XXH3_state_s;
void kpc_comgr_identity_add_device_libs(struct XXH3_state_s *st, kpc_identity_files *files);
/* Hash the HIP headers of hip_dir ("<dir>/hip/": its headers and amd_detail/'s) into st
 * and remember both directories in files: for a platform that compiles them from disk. */
void kpc_comgr_identity_add_hip_headers(struct XXH3_state_s *st, kpc_identity_files *files,
                                        const char *hip_dir);

#endif /* KPC_PLATFORM_AMD_COMGR_H */
