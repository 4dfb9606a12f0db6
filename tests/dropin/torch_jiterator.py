"""torch_jiterator.py - PyTorch's runtime-compiled element-wise kernels (torch.cuda.jiterator,
compiled by NVRTC at first use) as an application that knows nothing of kpc.

usage: python torch_jiterator.py OUT.pt
Runs 4 jiterator kernels on float32 and float64 (8 NVRTC compiles), saves every result
(CPU tensors) to OUT.pt, prints the time of each first call (compile + launch) and the
NVRTC libraries this process has mapped. Run it with USE_PYTORCH_KERNEL_CACHE=0 so that
PyTorch's own disk cache of jiterator kernels is off.
"""
import sys
import time

import torch
from torch.cuda import jiterator

KERNELS = {  # name: (code, the defaults of its scalar arguments)
    "axpby": ("template <typename T> T axpby(T x, T y, T a, T b) { return a * x + b * y; }", {"a": 1.0, "b": 1.0}),
    "poly": ("template <typename T> T poly(T x) { return ((x * T(3) - T(2)) * x + T(5)) * x - T(7); }", {}),
    "clampsq": ("template <typename T> T clampsq(T x, T lo, T hi) { T c = x < lo ? lo : (x > hi ? hi : x); return c * c; }",
                {"lo": 0.0, "hi": 1.0}),
    "gelu_like": ("template <typename T> T gelu_like(T x) { return x * T(0.5) * (T(1) + tanh(T(0.79788456) * (x + T(0.044715) * x * x * x))); }", {}),
}


def main(out):
    torch.manual_seed(0)
    fns = {name: jiterator._create_jit_fn(code, **defaults) for name, (code, defaults) in KERNELS.items()}
    results, times = {}, {}
    total = time.perf_counter()
    for dtype in (torch.float32, torch.float64):
        x = torch.randn(1 << 20, device="cuda", dtype=dtype)
        y = torch.randn(1 << 20, device="cuda", dtype=dtype)
        for name, fn in fns.items():
            t = time.perf_counter()
            if name == "axpby":
                r = fn(x, y, a=2.0, b=-0.5)
            elif name == "clampsq":
                r = fn(x, lo=-0.5, hi=0.75)
            else:
                r = fn(x)
            torch.cuda.synchronize()
            times[f"{name}/{dtype}"] = (time.perf_counter() - t) * 1e3
            results[f"{name}/{dtype}"] = r.cpu()
    total = (time.perf_counter() - total) * 1e3
    torch.save(results, out)
    for k, v in times.items():
        print(f"first call {k}: {v:.1f} ms")
    print(f"all first calls: {total:.1f} ms")
    with open("/proc/self/maps") as f:
        libs = sorted({l.split()[-1] for l in f if "nvrtc" in l or "kpc" in l})
    print("mapped:", " ".join(libs))


if __name__ == "__main__":
    main(sys.argv[1])
