/*
 * nvrtc_dropin.h - what nvrtc.c and nvrtc_platform.c share: the NVRTC vendor of
 * the engine, which nvrtc_platform.c (the platform built into this library's copy of kpc)
 * compiles through.
 */
#ifndef KPC_DROPIN_NVRTC_H
#define KPC_DROPIN_NVRTC_H

#include "dropin/rtc.h"

extern const rtc_vendor kpc_nvrtc_vendor;

#endif
