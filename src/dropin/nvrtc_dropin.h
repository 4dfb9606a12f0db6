/*
 * nvrtc_dropin.h - what nvrtc.c and nvrtc_platform.c share: the NVRTC vendor of
 * the engine and the kpc platform that compiles through the real NVRTC.
 */
#ifndef KPC_DROPIN_NVRTC_H
#define KPC_DROPIN_NVRTC_H

#include "rtc.h"

extern const rtc_vendor kpc_nvrtc_vendor;
/* Make the drop-in's copy of kpc compile through the real NVRTC (before its cache opens). */
void kpc_nvrtc_platform_install(void);

#endif
