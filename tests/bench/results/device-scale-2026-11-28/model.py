#!/usr/bin/env python3
"""docs/scale.md's model of a cold start, fitted to figure 12's points (this folder's
scale.log; the local 16-host points are in docs/benchmarks.md). Prints the measured points
beside the model, then the predictions. python3 model.py"""
import math, random

A = 10.2     # commands per host and key that are not polls (fitted: 16 hosts, C 0.5 s and 2 s)
B = 2.9      # poll streams per rank (fitted likewise)
R = 50e3     # calls a primary answers per second, each on a new connection (assumed; measured >= 43.8k)
BW = 0.7e9   # bytes a primary sends per second during a cold start (fitted: the 590 KB points)
T0 = 0.2     # ranks starting, opening caches, first calls (measured: warm storm of 16 KB, 64 hosts)

def polls(t):
    """polls of one waiter in t seconds: 20 ms, each wait a quarter longer, at most 250 ms"""
    n, at, w = 0, 0.0, 0.020
    while True:
        at += w
        if at > t:
            return n
        n += 1
        w = min(w * 1.25, 0.250)

def busiest(k, n, runs=4000):
    """the busiest of n primaries' share of k keys against an even share (mean of runs)"""
    if n == 1:
        return 1.0
    rnd, tot = random.Random(7), 0.0
    for _ in range(runs):
        c = [0] * n
        for _ in range(k):
            c[rnd.randrange(n)] += 1
        tot += max(c) / (k / n)
    return tot / runs

def model(h, p, k, c, s, n):
    f = busiest(k, n)
    per_host = k * A + p * B * polls(c)
    cmds = h * per_host
    fetch = h * k * s * f / n / BW
    floor = math.ceil(k / (h * p)) * c + T0 + fetch
    # the cold start makes per_host commands while every host waits; waiting hosts poll
    # 4 times a second per stream once past the first second: a closed loop that the
    # busiest primary can serve only while cap > the polls' own rate
    cap = n * R / f
    steady = 4 * h * p * B
    if steady >= cap:
        t = None
    else:
        t = max(floor, h * (k * A + p * B * polls(c)) / (cap - steady) + c)
    return dict(cmds=cmds, rate=cmds * f / n / (t or floor), bytes=h * k * s * f / n, f=f, floor=floor, t=t,
                steady=steady * f / n, conns=min(2 * h, 3.2 * h * f / n))

if __name__ == "__main__":
    print("measured (figure 12) against the model, compile 0.5 s unless said")
    pts = [  # hosts, ranks, keys, compile s, object bytes, primaries, cold wall, commands (all nodes)
        (64, 4, 32, 0.5, 16384, 1, 0.735, 32189), (64, 4, 32, 0.5, 16384, 3, 0.916, 33208),
        (64, 4, 32, 0.5, 604160, 1, 2.24, 28994), (64, 4, 32, 0.5, 604160, 3, 1.51, 28116),
        (32, 4, 32, 0.5, 16384, 1, 0.906, 16415), (32, 4, 32, 0.5, 16384, 3, 0.959, 13203),
        (16, 4, 32, 0.5, 16384, 1, 1.35, 6993), (16, 4, 32, 2.0, 16384, 1, 2.48, 8148)]
    for h, p, k, c, s, n, wall, cmds in pts:
        m = model(h, p, k, c, s, n)
        print(f"  {h}x{p}x{k} C={c} S={s//1024}KB N={n}: wall {wall:.2f} s, model {m['t'] or m['floor']:.2f} s; "
              f"commands {cmds}, model {m['cmds']:.0f}")
    print("predictions: hosts x 8 ranks, K = 100")
    for s, c in ((16384, 0.6), (604160, 5.0)):
        for h in (1024, 4096):
            for n in (1, 3, 6, 12):
                m = model(h, 8, 100, c, s, n)
                t = f"{m['t']:.1f} s" if m["t"] else "none: the polls alone exceed the busiest primary"
                print(f"  S={s//1024}KB C={c}s H={h} N={n}: busiest {m['f']:.2f}x, commands {m['cmds']/1e6:.2f} M "
                      f"(polls alone {m['steady']/1e3:.0f}k/s on the busiest), bytes out {m['bytes']/1e9:.1f} GB "
                      f"on the busiest, fetch floor {m['floor']:.1f} s, time {t}, peak clients {m['conns']:.0f}")
