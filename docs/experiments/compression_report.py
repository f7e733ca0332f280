#!/usr/bin/env python3
"""Tables for docs/experiments/compression.md from compression_run.sh output.

    python3 docs/experiments/compression_report.py docs/experiments/results
    python3 docs/experiments/compression_report.py --downsample PER_MESSAGE.csv OUT.csv [TARGET]

The second form turns the driver's per-message CSV (one line per message)
into one line per 100 messages, which is what the results directory keeps:
i (first message of the bin), t_ms (its time since the run started, when
the driver wrote one), n, mean_rtt_ns, p50_rtt_ns, compressed
(messages sent compressed), codecs (codec:count;...), chosen (the preferred
codec most often in the bin), cpu_util (mean CPU utilization the throttle
saw, over the bin's messages), cpu_within (share of the bin's messages sent
while utilization was within ±5 pp of the burner run's target, TARGET,
default 0.8), cpu_absdev (mean |utilization − target|), cpu_share (mean
throttle share).
"""
import csv
import glob
import json
import os
import statistics
import sys
from collections import Counter, defaultdict

BIN = 100


def downsample(src, dst, target=0.8):
    rows = list(csv.DictReader(open(src)))
    with open(dst, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["i", "t_ms", "n", "mean_rtt_ns", "p50_rtt_ns", "compressed", "codecs", "chosen", "cpu_util", "cpu_within", "cpu_absdev", "cpu_share"])
        for i in range(0, len(rows), BIN):
            b = rows[i:i + BIN]
            rtts = [int(x["rtt_ns"]) for x in b]
            codecs = Counter(x["codec"] for x in b)
            chosen = Counter(x["chosen"] for x in b).most_common(1)[0][0]
            utils = [float(x["cpu_util"]) for x in b if x["cpu_util"]]
            shares = [float(x["cpu_share"]) for x in b if x["cpu_share"]]
            util = f"{sum(utils) / len(utils):.4f}" if utils else ""
            within = f"{sum(1 for u in utils if abs(u - target) <= 0.05) / len(utils):.3f}" if utils else ""
            absdev = f"{sum(abs(u - target) for u in utils) / len(utils):.4f}" if utils else ""
            w.writerow([i, b[0].get("t_ms", ""), len(b), round(sum(rtts) / len(b)), round(statistics.median(rtts)),
                        sum(v for k, v in codecs.items() if k != "none"),
                        ";".join(f"{k}:{v}" for k, v in sorted(codecs.items())), chosen,
                        util, within, absdev, f"{sum(shares) / len(shares):.4f}" if shares else ""])


if len(sys.argv) in (4, 5) and sys.argv[1] == "--downsample":
    downsample(sys.argv[2], sys.argv[3], float(sys.argv[4]) if len(sys.argv) == 5 else 0.8)
    sys.exit(0)

SPECIAL = ("change", "change-ab", "burner", "loopback-ab", "1gbit-ab", "100mbit-ab", "10mbit-ab")

res = sys.argv[1] if len(sys.argv) > 1 else "docs/experiments/results"
rows = [json.loads(l) for l in open(os.path.join(res, "compression_rtt.jsonl")) if l.strip()]
shaper_file = os.path.join(res, "compression_shaper.txt")
shaper = open(shaper_file).read().split()[-1] if os.path.exists(shaper_file) else "netem"
print(f"Link emulation: {shaper}" + (" (user-space emulator; this kernel lacks netem)" if shaper == "linkemu" else "") + "\n")

print("## Mean RTT per link profile, data set and policy (µs, ±95% CI)\n")
by = defaultdict(dict)
for r in rows:
    if r["label"] in SPECIAL:
        continue
    by[(r["label"], r["dataset"])][r["policy"]] = r
links = []
for r in rows:
    if r["label"] not in links and r["label"] not in SPECIAL:
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

def pooled(v):
    """Mean RTT over every message of every repetition (equal message counts)."""
    return statistics.mean(r["mean_rtt_us"] for r in v)


def paired(a, b):
    """Ratios a/b of the repetitions' means, repetition by repetition (the
    policies of one repetition ran back to back, so the VM's slow drift
    cancels)."""
    return [x["mean_rtt_us"] / y["mean_rtt_us"] for x, y in zip(a, b)]


def ratio_cell(ratios, limit):
    med = statistics.median(ratios)
    within = sum(1 for q in ratios if q <= 1 + limit)
    return f"{100 * (med - 1):+.1f}% ({100 * (min(ratios) - 1):+.1f} … {100 * (max(ratios) - 1):+.1f}); {within} of {len(ratios)} within {100 * limit:.0f}%"


def paired_table(label, reps, pols):
    """Adaptive against the best fixed codec (lowest pooled mean) and `none`."""
    limit = 0.03 if label == "loopback-ab" else 0.02
    print(f"### {label}: adaptive against the best fixed codec and `none`, pooled and paired by repetition\n")
    print("| data set | best fixed (pooled mean) | its pooled mean | adaptive pooled | adaptive vs best, pooled | paired ratio to best: median (range); repetitions within the target | adaptive vs none, pooled | paired ratio to none |")
    print("|---|---|---:|---:|---:|---|---:|---|")
    for ds in ("Zeros", "Ones", "Realistic"):
        a = reps.get((ds, "adaptive"))
        none = reps.get((ds, "one:none"))
        fixed = {p: reps[(ds, p)] for p in pols if p.startswith("one:") and (ds, p) in reps}
        if not a or not fixed or not none:
            continue
        bp, bv = min(fixed.items(), key=lambda kv: pooled(kv[1]))
        print(f"| {ds} | {bp} | {pooled(bv):.1f} | {pooled(a):.1f} | {100 * (pooled(a) / pooled(bv) - 1):+.1f}% | {ratio_cell(paired(a, bv), limit)} | {100 * (pooled(a) / pooled(none) - 1):+.1f}% | {ratio_cell(paired(a, none), limit)} |")
    print()


for label in ("loopback-ab", "1gbit-ab", "100mbit-ab", "10mbit-ab"):
    ab = [r for r in rows if r["label"] == label]
    if not ab:
        continue
    reps = defaultdict(list)
    for r in ab:
        reps[(r["dataset"], r["policy"])].append(r)
    n = max(len(v) for v in reps.values())
    msgs = ab[0]["messages"]
    print(f"## {label}: {n} interleaved repetitions of {msgs} messages (median over repetitions, µs)\n")
    print("| data set | policy | mean RTT | p50 | means of the repetitions | mean vs none | codecs sent (first repetition) |")
    print("|---|---|---:|---:|---|---:|---|")
    pols = []
    for r in ab:
        if r["policy"] not in pols:
            pols.append(r["policy"])
    for ds in ("Zeros", "Ones", "Realistic"):
        none = reps.get((ds, "one:none"))
        if not none:
            continue
        none_mean = statistics.median(r["mean_rtt_us"] for r in none)
        for p in pols:
            v = reps.get((ds, p))
            if not v:
                continue
            mean = statistics.median(r["mean_rtt_us"] for r in v)
            p50 = statistics.median(r["p50_us"] for r in v)
            each = ", ".join(f"{r['mean_rtt_us']:.1f}" for r in v)
            sent = ", ".join(f"{k} {c}" for k, c in sorted(v[0]["sent_per_codec"].items(), key=lambda kv: -kv[1])[:3])
            print(f"| {ds} | {p} | {mean:.1f} | {p50:.1f} | {each} | {100 * (mean / none_mean - 1):+.1f}% | {sent} |")
    print()
    paired_table(label, reps, pols)

def phase_title(r):
    k = r.get("phase_starts") or [0, r["messages"] // 2]
    if len(k) == 3:
        return (f"Content and bandwidth change: Dr (random) on 10 Mbit/s, 5 ms; from message {k[1]} Dp batches; "
                f"from message {k[2]} a 10 Gbit/s, 0 ms link; {r['messages']} messages of ≥ {r.get('batch', 2048) // 1024} KiB")
    return f"Content and bandwidth change: phases from messages {', '.join(map(str, k))}"


def phase_cells(r):
    means = r.get("phase_means_us") or [r.get("mean_before_change_us"), r.get("mean_after_change_us")]
    return " | ".join(f"{m:.1f}" if m is not None else "" for m in means)


def phase_header(r):
    n = len(r.get("phase_means_us") or [0, 0])
    return " | ".join(f"phase {j + 1}" for j in range(n)), "|".join("---:" for _ in range(n))


change = [r for r in rows if r["label"] == "change"]
if change:
    print(f"## {phase_title(change[0])}\n")
    ph, al = phase_header(change[0])
    print(f"| policy | mean RTT (µs) | ±CI95 | {ph} | preferred codec changed after (per phase) | codecs sent |")
    print(f"|---|---:|---:|{al}|---|---|")
    for r in sorted(change, key=lambda r: r["mean_rtt_us"]):
        sent = ", ".join(f"{k} {v}" for k, v in sorted(r["sent_per_codec"].items(), key=lambda kv: -kv[1])[:4])
        re = r.get("phase_reselected_after") or [r.get("reselected_after")]
        re = ", ".join("–" if x is None else str(x) for x in re)
        print(f"| {r['policy']} | {r['mean_rtt_us']:.1f} | {r['ci95_us']:.1f} | {phase_cells(r)} | {re} | {sent} |")
    print()
    f = os.path.join(res, "compression_change", "adaptive.csv")
    if os.path.exists(f):
        bins = list(csv.DictReader(open(f)))
        starts = change[0].get("phase_starts") or [0]
        # Around each change: the 100-message windows before and after it
        # (a run of 100,000 messages would otherwise print 1,000 lines).
        keep = set()
        for k in starts:
            keep.update(range(k - 2 * BIN, k + 10 * BIN, BIN))
        keep.add(int(bins[-1]["i"]))
        print("Adaptive's preferred codec around each change (windows of 100 messages):\n")
        print("| messages | preferred | sent | mean RTT of the window (µs) |")
        print("|---|---|---|---:|")
        for b in bins:
            i, n = int(b["i"]), int(b["n"])
            if i in keep:
                print(f"| {i}–{i + n - 1} | {b['chosen']} | {b['codecs'].replace(';', ', ')} | {int(b['mean_rtt_ns']) / 1e3:.1f} |")
        print()

cab = [r for r in rows if r["label"] == "change-ab"]
if cab:
    reps = defaultdict(list)
    for r in cab:
        reps[r["policy"]].append(r)
    n = max(len(v) for v in reps.values())
    print(f"## Change run, {n} interleaved repetitions (µs)\n")
    print(f"{phase_title(cab[0])}. Ranked by the pooled mean (every message of every repetition); phase columns are medians over the repetitions.\n")
    ph, al = phase_header(cab[0])
    print(f"| policy | pooled mean RTT | median of the repetitions | means of the repetitions | {ph} | rank in each repetition |")
    print(f"|---|---:|---:|---|{al}|---|")
    ranks = defaultdict(list)
    for i in range(n):
        rep_rows = sorted((v[i] for v in reps.values() if len(v) > i), key=lambda r: r["mean_rtt_us"])
        for j, r in enumerate(rep_rows):
            ranks[r["policy"]].append(str(j + 1))
    for p, v in sorted(reps.items(), key=lambda kv: pooled(kv[1])):
        each = ", ".join(f"{r['mean_rtt_us']:.1f}" for r in v)
        phases = [statistics.median(m) for m in zip(*(r.get("phase_means_us") or [r["mean_before_change_us"], r["mean_after_change_us"]] for r in v))]
        cells = " | ".join(f"{m:.1f}" for m in phases)
        print(f"| {p} | {pooled(v):.1f} | {statistics.median(r['mean_rtt_us'] for r in v):.1f} | {each} | {cells} | {', '.join(ranks[p])} |")
    print()
    a = reps.get("adaptive")
    if a:
        print("Adaptive against each other policy, repetition by repetition:\n")
        print("| against | adaptive faster in | paired ratio adaptive / it: median (range) | pooled |")
        print("|---|---:|---|---:|")
        for p, v in sorted(reps.items(), key=lambda kv: pooled(kv[1])):
            if p == "adaptive":
                continue
            q = paired(a, v)
            print(f"| {p} | {sum(1 for x in q if x < 1)} of {len(q)} | {100 * (statistics.median(q) - 1):+.1f}% ({100 * (min(q) - 1):+.1f} … {100 * (max(q) - 1):+.1f}) | {100 * (pooled(a) / pooled(v) - 1):+.1f}% |")
        print()

def seconds_within(weighted_bins, target=0.8):
    """Share of the whole seconds (by t_ms) whose mean utilization is within ±5 pp."""
    per_second = defaultdict(list)
    for k, b in weighted_bins:
        if b.get("t_ms"):
            per_second[int(float(b["t_ms"]) // 1000)].append((k, float(b["cpu_util"])))
    # The phase's first and last seconds are partial: left out.
    seconds = sorted(per_second)[1:-1]
    if not seconds:
        return "n/a"
    means = [sum(k * u for k, u in per_second[t]) / sum(k for k, _ in per_second[t]) for t in seconds]
    inside = sum(1 for m in means if abs(m - target) <= 0.05)
    return f"{inside} of {len(means)} ({100 * inside / len(means):.0f}%)"


burn = sorted(glob.glob(os.path.join(res, "compression_burner", "*.csv")))
if burn:
    print("## CPU burner (cgroup limited to one CPU; burner at half a CPU during messages 10,000–19,999 of 30,000, one every 500 µs; throttle target 0.8 of the cgroup's limit)\n")
    print("Utilization is the throttle's own input (the cgroup's CPU use over its limit, read every 100 ms). *Within ±5 pp*: the share of the phase's messages sent while the latest 100 ms reading was within ±5 pp of the target, and the share of the phase's whole seconds whose utilization (mean of the readings in that second) was.\n")
    print("| policy | phase | messages compressed | mean CPU utilization | mean abs(util − target) | within ±5 pp (100 ms readings) | within ±5 pp (1 s) | mean throttle share |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for f in burn:
        bins = list(csv.DictReader(open(f)))
        n = sum(int(b["n"]) for b in bins)
        third = n // 3
        phases = (("before", 0, third), ("burner", third, 2 * third), ("after", 2 * third, n))
        for name, lo, hi in phases:
            w = [b for b in bins if lo <= int(b["i"]) < hi]
            comp = sum(int(b["compressed"]) for b in w)
            count = sum(int(b["n"]) for b in w)
            # Messages are paced evenly, so means over messages are means over time.
            ws = [(int(b["n"]), b) for b in w if b["cpu_util"]]
            wn = sum(k for k, _ in ws)
            mu = sum(k * float(b["cpu_util"]) for k, b in ws) / wn if wn else float("nan")
            dev = sum(k * float(b["cpu_absdev"]) for k, b in ws) / wn if wn else float("nan")
            within = sum(k * float(b["cpu_within"]) for k, b in ws) / wn if wn else float("nan")
            shares = [float(b["cpu_share"]) for b in w if b["cpu_share"]]
            ms = sum(shares) / len(shares) if shares else float("nan")
            print(f"| {os.path.basename(f)[:-4]} | {name} | {comp} of {count} | {mu:.3f} | {dev:.3f} | {100 * within:.0f}% | {seconds_within(ws)} | {ms:.3f} |")
    print()

il_path = os.path.join(res, "compression_interleaved.jsonl")
il_rows = [json.loads(l) for l in open(il_path)] if os.path.exists(il_path) else []
if il_rows:
    print("## Interleaved: every policy's stream in one process, a new random order every cycle (µs)\n")
    print("Per link and data set: pooled mean over the repetitions (equal message counts), median of the repetitions' medians, and adaptive's ratio to the best fixed codec (lowest pooled mean) computed per repetition and pooled. Within one repetition the streams share the same stretch of time, so the VM's drift cancels in the ratio.\n")
    il = defaultdict(lambda: defaultdict(list))
    for r in il_rows:
        il[(r["label"], r["dataset"])][r["policy"]].append(r)
    print("| link | data set | streams × messages × repetitions | best fixed | its pooled mean | none | majority | adaptive | adaptive vs best, pooled | per repetition | p50 vs best's p50 | adaptive vs none | adaptive sent (first repetition) |")
    print("|---|---|---|---|---:|---:|---:|---:|---:|---|---:|---:|---|")
    for (link, ds), pols in il.items():
        fixed = {p: v for p, v in pols.items() if p.startswith("one:")}
        best_p = min(fixed, key=lambda p: pooled(fixed[p]))
        a = pols.get("adaptive")
        if not a:
            continue
        b, none, maj = pooled(fixed[best_p]), pooled(pols["one:none"]), pooled(pols["majority"]) if "majority" in pols else float("nan")
        per_rep = ", ".join(f"{100 * (q - 1):+.1f}%" for q in paired(a, fixed[best_p]))
        p50 = statistics.median(x["p50_us"] for x in a) / statistics.median(x["p50_us"] for x in fixed[best_p])
        sent = ", ".join(f"{k} {v}" for k, v in sorted(a[0]["sent_per_codec"].items(), key=lambda kv: -kv[1])[:3])
        shape = f"{a[0]['streams']} × {a[0]['messages']} × {len(a)}"
        print(f"| {link[3:]} | {ds} | {shape} | {best_p} | {b:.1f} | {none:.1f} | {maj:.1f} | {pooled(a):.1f} | {100 * (pooled(a) / b - 1):+.1f}% | {per_rep} | {100 * (p50 - 1):+.1f}% | {100 * (pooled(a) / none - 1):+.1f}% | {sent} |")
    print()
