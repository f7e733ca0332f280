#!/usr/bin/env python3
"""Wake-up latency of plain sleeps on this node, with the thread's default timer
slack (50 us) and with 1 ns (prctl PR_SET_TIMERSLACK): 300 sleeps uniform in
0-10 ms (fixed seed), latency = actual - requested, in us. Python adds a few
us of its own to every figure; the point is the difference between the two
slack settings and where the distribution lies against hybrid's 100 us spin.

    taskset -c 1 python3 wake_latency.py
"""
import ctypes
import random
import time

libc = ctypes.CDLL(None)
PR_SET_TIMERSLACK, PR_GET_TIMERSLACK = 29, 30


def run(n=300):
    random.seed(1)
    lat = []
    for _ in range(n):
        r = random.uniform(0, 0.01)
        t0 = time.monotonic_ns()
        time.sleep(r)
        lat.append((time.monotonic_ns() - t0 - r * 1e9) / 1e3)
    lat.sort()
    q = lambda p: round(lat[int(p * (len(lat) - 1))], 1)
    return (f"p10 {q(.1)} p25 {q(.25)} median {q(.5)} p75 {q(.75)} p90 {q(.9)} us; "
            f"over 100 us: {100 * sum(x > 100 for x in lat) / len(lat):.0f} %")


print(f"timer slack {libc.prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0)} ns: {run()}")
libc.prctl(PR_SET_TIMERSLACK, 1, 0, 0, 0)
print(f"timer slack {libc.prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0)} ns: {run()}")
