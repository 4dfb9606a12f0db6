/* Links against an installed drop-in and calls one of its API's functions (no kpc include). */
#include <stdio.h>
#ifdef DROPIN_hiprtc
const char *hiprtcGetErrorString(int result);
#define ERROR_STRING hiprtcGetErrorString
#else
const char *nvrtcGetErrorString(int result);
#define ERROR_STRING nvrtcGetErrorString
#endif

int main(int argc, char **argv)
{
    if (argc > 1) /* only when asked: the real library may be absent where it is built */
        puts(ERROR_STRING(6));
    return 0;
}
