#!/usr/bin/env python3
# Two builds of cc_server timed against each other in one run, alternating
# (A, B, B, A, …) so a drift of a noisy host hits both; prints each median
# and the median of the paired differences (docs/measurements.md).
#
# Usage: python3 bench/ab.py OLD/cc_server NEW/cc_server [RUNS] [ARGS…]
# (ARGS default: run -- true; each build loads the plugins beside it)
import subprocess, time, sys, statistics, os
a, b = sys.argv[1], sys.argv[2]
n = int(sys.argv[3]) if len(sys.argv) > 3 else 150
cmd = sys.argv[4:] or ["run", "--", "true"]
ta, tb = [], []
dn = open(os.devnull, "w")
for i in range(n + 5):
    order = [(a, ta), (b, tb)] if i % 2 == 0 else [(b, tb), (a, ta)]
    for exe, out in order:
        s = time.perf_counter()
        subprocess.run([exe] + cmd, stdout=dn, stderr=dn)
        if i >= 5: out.append((time.perf_counter() - s) * 1000)
d = [x - y for x, y in zip(ta, tb)]
q = lambda v: statistics.quantiles(v, n=4)
print(f"A median {statistics.median(ta):.2f} ms (q1 {q(ta)[0]:.2f}), B median {statistics.median(tb):.2f} ms (q1 {q(tb)[0]:.2f}); median paired A-B {statistics.median(d):+.2f} ms, B/A {statistics.median(tb)/statistics.median(ta):.3f}")
