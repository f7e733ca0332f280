#!/usr/bin/env python3
"""Tables for docs/experiments/compression.md from compression_run.sh output.

    python3 docs/experiments/compression_report.py docs/experiments/results
"""
import csv
import glob
import json
import os
import sys
from collections import defaultdict

res = sys.argv[1] if len(sys.argv) > 1 else "docs/experiments/results"
rows = [json.loads(l) for l in open(os.path.join(res, "compression_rtt.jsonl")) if l.strip()]
shaper_file = os.path.join(res, "compression_shaper.txt")
shaper = open(shaper_file).read().split()[-1] if os.path.exists(shaper_file) else "netem"
print(f"Link emulation: {shaper}" + (" (user-space emulator; this kernel lacks netem)" if shaper == "linkemu" else "") + "\n")

print("## Mean RTT per link profile, data set and policy (µs, ±95% CI)\n")
by = defaultdict(dict)
for r in rows:
    if r["label"] in ("change", "burner"):
        continue
    by[(r["label"], r["dataset"])][r["policy"]] = r
links = []
for r in rows:
    if r["label"] not in links and r["label"] not in ("change", "burner"):
        links.append(r["label"])
summary = []
medians = []
for link in links:
    for ds in ("Zeros", "Ones", "Realistic"):
        runs = by.get((link, ds))
        if not runs:
            continue
        n = next(iter(runs.values()))["messages"]
        print(f"### {link}, {ds} ({n} messages per policy)\n")
        print("| policy | mean RTT | ±CI95 | p50 | p99 | codecs sent |")
        print("|---|---:|---:|---:|---:|---|")
        for p, r in sorted(runs.items(), key=lambda kv: kv[1]["mean_rtt_us"]):
            sent = ", ".join(f"{k} {v}" for k, v in sorted(r["sent_per_codec"].items(), key=lambda kv: -kv[1])[:4])
            print(f"| {p} | {r['mean_rtt_us']:.1f} | {r['ci95_us']:.1f} | {r['p50_us']:.1f} | {r['p99_us']:.1f} | {sent} |")
        fixed = {p: r for p, r in runs.items() if p.startswith("one:")}
        best_p, best = min(fixed.items(), key=lambda kv: kv[1]["mean_rtt_us"])
        a = runs.get("adaptive")
        m = runs.get("majority")
        none = runs.get("one:none")
        if a:
            summary.append((link, ds, best_p, best["mean_rtt_us"], a["mean_rtt_us"], m["mean_rtt_us"] if m else float("nan"), none["mean_rtt_us"] if none else float("nan")))
            bp50_p, bp50 = min(fixed.items(), key=lambda kv: kv[1]["p50_us"])
            medians.append((link, ds, bp50_p, bp50["p50_us"], a["p50_us"], m["p50_us"] if m else float("nan"), none["p50_us"] if none else float("nan")))
        print()

print("## Adaptive against the best fixed codec, majority and uncompressed\n")
print("| link | data set | best fixed | its RTT | adaptive | adaptive vs best | majority vs best | adaptive vs none |")
print("|---|---|---|---:|---:|---:|---:|---:|")
for link, ds, bp, b, a, m, n in summary:
    print(f"| {link} | {ds} | {bp} | {b:.1f} | {a:.1f} | {100*(a/b-1):+.1f}% | {100*(m/b-1):+.1f}% | {100*(a/n-1):+.1f}% |")
print()
print("## The same with medians (p50, µs): robust to the shared VM's latency spikes\n")
print("| link | data set | best fixed (p50) | its p50 | adaptive p50 | adaptive vs best | majority vs best | adaptive vs none |")
print("|---|---|---|---:|---:|---:|---:|---:|")
for link, ds, bp, b, a, m, n in medians:
    print(f"| {link} | {ds} | {bp} | {b:.1f} | {a:.1f} | {100*(a/b-1):+.1f}% | {100*(m/b-1):+.1f}% | {100*(a/n-1):+.1f}% |")
print()

change = [r for r in rows if r["label"] == "change"]
if change:
    print("## Content change (D1 → Dp) and bandwidth change (100 → 10 Mbit/s)\n")
    print("| policy | mean RTT (µs) | ±CI95 | codecs sent |")
    print("|---|---:|---:|---|")
    for r in sorted(change, key=lambda r: r["mean_rtt_us"]):
        sent = ", ".join(f"{k} {v}" for k, v in sorted(r["sent_per_codec"].items(), key=lambda kv: -kv[1])[:4])
        print(f"| {r['policy']} | {r['mean_rtt_us']:.1f} | {r['ci95_us']:.1f} | {sent} |")
    print()
    f = os.path.join(res, "compression_change", "adaptive.csv")
    if os.path.exists(f):
        rows_c = list(csv.DictReader(open(f)))
        n = len(rows_c)
        print("Adaptive's preferred codec over the run (every 100 messages):\n")
        print("| messages | preferred | mean RTT of the window (µs) |")
        print("|---|---|---:|")
        for i in range(0, n, 100):
            w = rows_c[i:i + 100]
            pref = max(set(x["chosen"] for x in w), key=lambda c: sum(1 for x in w if x["chosen"] == c))
            print(f"| {i}–{i + len(w) - 1} | {pref} | {sum(int(x['rtt_ns']) for x in w) / len(w) / 1e3:.1f} |")
        print()

burn = sorted(glob.glob(os.path.join(res, "compression_burner", "*.csv")))
if burn:
    print("## CPU burner (messages 10,000–19,999 of 30,000, one every 500 µs, throttle target 0.5)\n")
    print("| policy | phase | messages compressed | mean CPU utilization | mean abs(util − target) | mean throttle share |")
    print("|---|---|---:|---:|---:|---:|")
    for f in burn:
        rows_b = list(csv.DictReader(open(f)))
        n = len(rows_b)
        third = n // 3
        for name, w in (("before", rows_b[:third]), ("burner", rows_b[third:2 * third]), ("after", rows_b[2 * third:])):
            comp = sum(1 for x in w if x["codec"] != "none")
            utils = [float(x["cpu_util"]) for x in w if x["cpu_util"]]
            shares = [float(x["cpu_share"]) for x in w if x["cpu_share"]]
            # Distinct readings only (the throttle reads /proc/stat every 200 ms).
            distinct = [u for i, u in enumerate(utils) if i == 0 or u != utils[i - 1]]
            mu = sum(distinct) / len(distinct) if distinct else float("nan")
            dev = sum(abs(u - 0.5) for u in distinct) / len(distinct) if distinct else float("nan")
            ms = sum(shares) / len(shares) if shares else float("nan")
            print(f"| {os.path.basename(f)[:-4]} | {name} | {comp} of {len(w)} | {mu:.3f} | {dev:.3f} | {ms:.3f} |")
    print()
