/*
 * rtc_abi.h - the little of the hipRTC and NVRTC ABIs the drop-ins need, declared here so
 * that neither <hip/hiprtc.h> (whose 5.2 edition lacks the link API) nor <nvrtc.h> (absent
 * where CUDA is not installed) is needed to build them.
 *
 * Both APIs number their results the same way from 0 to 11 (hipRTC copied NVRTC), and a
 * program is an opaque pointer in both; the enum values below are their stable ABI.
 */
#ifndef KPC_DROPIN_RTC_ABI_H
#define KPC_DROPIN_RTC_ABI_H

#include <stddef.h>

enum {
    RTC_SUCCESS = 0,
    RTC_ERROR_OUT_OF_MEMORY = 1,
    RTC_ERROR_PROGRAM_CREATION_FAILURE = 2,
    RTC_ERROR_INVALID_INPUT = 3,
    RTC_ERROR_INVALID_PROGRAM = 4,
    RTC_ERROR_INVALID_OPTION = 5,
    RTC_ERROR_COMPILATION = 6,
    RTC_ERROR_BUILTIN_OPERATION_FAILURE = 7,
    RTC_ERROR_NO_NAME_EXPRESSIONS_AFTER_COMPILATION = 8,
    RTC_ERROR_NO_LOWERED_NAMES_BEFORE_COMPILATION = 9,
    RTC_ERROR_NAME_EXPRESSION_NOT_VALID = 10,
    RTC_ERROR_INTERNAL_ERROR = 11,
};

/* hipRTC (hip/hiprtc.h) */
typedef int hiprtcResult;
typedef struct _hiprtcProgram *hiprtcProgram;
typedef struct ihiprtcLinkState *hiprtcLinkState;
typedef int hiprtcJIT_option;
typedef int hiprtcJITInputType;

/* NVRTC (nvrtc.h) */
typedef int nvrtcResult;
typedef struct _nvrtcProgram *nvrtcProgram;

#endif
