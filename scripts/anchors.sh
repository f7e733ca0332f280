#!/usr/bin/env bash
# Every peer comparison of hwqos, side by side in one run, as ratios (issue 22,
# item 3). This machine class is noisy — shared 2-vCPU VMs — so no figure here
# is an absolute time alone: each is a ratio against the peer (or against a
# run without any tool) measured in the same run, interleaved, with its spread.
#
#   monitor   hwqos-monitor vs `perf stat -I` at 10 Hz, 100 Hz and 1 kHz, four
#             software events, per process and per CPU: the tool's own CPU time
#             (hwqos ÷ perf, paired runs) and the workload's throughput kept
#             (tool ÷ no tool, paired runs), per wall-second and per CPU-second
#             of the workload (docs/experiments/monitor_perf.py);
#   loadgen   hwqos-loadgen's closed loop vs `stress-ng --cpu-load` on a 35 %
#             target, alone and with a 15 % background load: the total put on
#             the CPU ÷ the target (docs/experiments/loadgen_stressng.sh);
#   relay     the adaptive relay vs the same relay with each fixed codec and
#             vs `zstd --adapt | socat`, one generated-text payload over one
#             100 Mbit/s veth link between two network namespaces
#             (docs/experiments/relay_vs_cli.sh);
#   sra       hwqos-sra's `sw.task_clock` quota (5 ms per 10 ms) vs CFS
#             bandwidth control with the same budget and period: CPU time per
#             period and per 100 ms, the agent's own CPU
#             (docs/experiments/sra_precision.sh);
#   kernel    SCHED_SRA vs CFS: copied from kernel-patch/README.md (a qemu
#             guest with a kernel build; not rerun here).
#
# Writes docs/anchors.md (the table, the command, the machine, the load
# average before and after each part) and the raw results under
# docs/experiments/results/anchors/, and prints the table. Run as root from
# any directory of a clone; it builds the release binaries it needs and
# installs the Debian packages it needs (linux-perf, stress-ng, zstd, socat,
# bc) when they are missing. Measured on the 2-vCPU development VM: 14 min
# 35 s at 1-minute load average 0.4–2 (2 min 7 s of it an incremental build),
# 16 min 30 s at 2.4–6.3 (3 min 44 s build).
#
# Usage: scripts/anchors.sh [--reps N] [--only monitor,loadgen,relay,sra]
#                           [--out FILE] [--results DIR] [--no-build]
#        scripts/anchors.sh --report-from DIR [--out FILE]
#   --reps N     repetitions of the monitor and relay comparisons (default 5)
#   --only LIST  run only these parts (the others are listed as not run)
#   --no-build   measure the release binaries already in target/release (the
#                document then says so, with their build times)
#   --report-from DIR  measure nothing: write the document again from the raw
#                results of an earlier run (DIR = its --results directory)
# Not part of scripts/test.sh: it measures, it does not test.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

REPS=5
ONLY="monitor,loadgen,relay,sra"
OUT=docs/anchors.md
RESULTS=docs/experiments/results/anchors
BUILD=1
REPORT_FROM=""
ARGS="$*"
while [ $# -gt 0 ]; do
  case "$1" in
    --reps) REPS="$2"; shift 2 ;;
    --only) ONLY="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --results) RESULTS="$2"; shift 2 ;;
    --no-build) BUILD=0; shift ;;
    --report-from) REPORT_FROM="$2"; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "anchors.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
case "$REPS" in ''|*[!0-9]*) echo "anchors.sh: --reps needs a number" >&2; exit 2 ;; esac
[ "$REPS" -ge 3 ] || { echo "anchors.sh: --reps must be at least 3 (medians of paired runs)" >&2; exit 2; }
want() { case ",$ONLY," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }

die() { echo "anchors.sh: $*" >&2; exit 1; }
if [ -n "$REPORT_FROM" ]; then
  [ -f "$REPORT_FROM/run.txt" ] && [ -f "$REPORT_FROM/machine.txt" ] \
    || die "--report-from: $REPORT_FROM holds no anchors.sh results (run.txt, machine.txt)"
  RESULTS=$REPORT_FROM
fi

report() { # RESULTS dir -> $OUT, prints the summary
python3 - "$RESULTS" "$OUT" <<'PY'
import json, os, re, statistics as st, sys, collections, csv
R, OUT = sys.argv[1:3]
run = dict(l.rstrip("\n").split("=", 1) for l in open(f"{R}/run.txt") if "=" in l)
SECS, CMD, CODECS = run["seconds"], run["command"], run["relay_codecs"]
RESULTS = R
only = run["only"].split(",")
failed = run.get("failed", "").split()
m = dict(l.rstrip("\n").split("=", 1) for l in open(f"{R}/machine.txt") if "=" in l)
load = [l.split() for l in open(f"{R}/load.txt")]

def sp(d, f="{:.3f}"):
    """'median [min–max]' of a spread dict from monitor_perf.py."""
    if not d:
        return "–"
    return f"{f.format(d['median'])} [{f.format(d['min'])}–{f.format(d['max'])}]"

def spread(xs):
    xs = sorted(xs)
    return {"median": st.median(xs), "min": xs[0], "max": xs[-1], "n": len(xs)} if xs else None

def section_load(name):
    s = [l for l in load if l[0] == name and l[1] == "start"]
    e = [l for l in load if l[0] == name and l[1] == "end"]
    if not s or not e:
        return "not run"
    return f"{s[0][4]} → {e[0][4]} (1-min load average at start → end)"

md, head = [], []
build_note = ""
try:
    import datetime
    t0 = datetime.datetime.strptime(load[0][1], "%Y-%m-%dT%H:%M:%SZ")
    first = next(l for l in load[1:] if l[1] == "start")
    h, mi, se = map(int, first[2].split(":"))
    t1 = t0.replace(hour=h, minute=mi, second=se)
    pre = int((t1 - t0).total_seconds())
    if 0 <= pre < 86400:
        build_note = (f" (of which {pre // 60} min {pre % 60} s before the first comparison: "
                      "prerequisite checks and the incremental release build)")
except (ValueError, StopIteration, IndexError):
    pass
P = md.append
P("# Anchors: hwqos against its peers, side by side")
P("")
P("Generated by `scripts/anchors.sh` (issue 22, item 3) — do not edit by hand; rerun it. "
  "Every figure is a **ratio** measured in this one run against the peer tool (or "
  "against the same workload without any tool), from interleaved runs, with its "
  "spread (median [min–max] over the paired repetitions): this is a shared, "
  "noisy VM, where an absolute time alone means little.")
P("")
P(f"- **Command:** `{CMD}` (as root, from the repository root), run {m.get('date')}, "
  f"took {int(SECS) // 60} min {int(SECS) % 60} s" + build_note
  + (f"; this page rendered again from that run's raw results (`scripts/anchors.sh --report-from "
     f"{os.environ['ANCHORS_REPORT_FROM']}`)" if os.environ.get("ANCHORS_REPORT_FROM") else "") + ".")
P(f"- **Machine:** {m.get('model')}, {m.get('cpus')} vCPUs ({m.get('threads_per_core')} thread per core"
  f"{', ' + m['hypervisor'] + ' guest' if m.get('hypervisor') else ''}), {m.get('memory')}, "
  f"kernel {m.get('kernel')}; {m.get('perf')}, {m.get('stressng')}, "
  f"zstd {(re.findall(r'v[0-9][0-9.]*', m.get('zstd', '')) or ['?'])[0]}, {m.get('rustc')}; "
  f"hwqos at commit {m.get('commit')}"
  + (f" ({m['built']})" if m.get("built", "this run") != "this run" else "")
  + (f" with {m.get('dirty')} uncommitted tracked file(s) in the checkout (other work in progress on the shared machine)"
     if m.get('dirty', '0') != '0' else "") + ".")
la0 = [l for l in load if l[0] == "start"][0]
la1 = [l for l in load if l[0] == "end"][0]
P(f"- **Load average** (1, 5, 15 min): {' '.join(la0[3:6])} at the start, {' '.join(la1[3:6])} at the end; "
  "per part below. The machine was shared with other jobs (builds) while this ran.")
if m.get("pmu") == "no":
    P("- **No hardware PMU** on this VM (hardware events fail with ENOENT): every monitor "
      "comparison counts the four kernel *software* events `task-clock`, `page-faults`, "
      "`context-switches`, `cpu-migrations` (`sw.*` in hwqos) in both tools, and the SRA "
      "quota is on the `sw.task_clock` software event.")
else:
    P("- This node has a hardware PMU, but the monitor comparisons still count the four "
      "software events (`task-clock`, `page-faults`, `context-switches`, `cpu-migrations`), "
      "as on the VMs the earlier figures came from.")
P("")

# ------------------------------------------------------------ monitor
mon = None
if "monitor" in only and os.path.exists(f"{R}/monitor.json"):
    mon = json.load(open(f"{R}/monitor.json"))
mon_abs = None
if mon and os.path.exists(f"{R}/monitor_absolute.json"):
    mon_abs = json.load(open(f"{R}/monitor_absolute.json"))
if mon:
    P("## Monitor vs `perf stat -I`")
    P("")
    P("`hwqos-monitor` (`rate_hz` = R, `procfs = false`, API and `/metrics` off) against "
      "`perf stat -I 1000/R` with the same four software events, per process (`pid:` target vs "
      "`perf stat -p`) and per CPU (`per_cpu = true` vs `perf stat -a -A`). The workload is "
      "`hwqos-spinload` (an integer kernel; its throughput is the figure) pinned to CPU 1, the "
      "tool to CPU 0. Each repetition runs *no tool*, *hwqos-monitor* and *perf* in turn (the "
      "order rotated each repetition), "
      f"{mon.get('overhead', {}).get('1000', {}).get('seconds', '?')} s measured after 0.5 s of warm-up. "
      "Per repetition:")
    P("")
    P("- **own CPU** = the tool process's CPU time over the run (all its threads, "
      "`/proc/PID/task/*/schedstat`: the scheduler's run time) — hwqos ÷ perf of the same repetition;")
    P("- **kept per CPU-s** = the workload's iterations per CPU-second it got (its own "
      "`/proc/self/schedstat`) with the tool ÷ without a tool in the same repetition: 1.000 = no "
      "slowdown; insensitive to how much CPU the other tenants took from the workload"
      + ({"n": " (this kernel has no `CONFIG_IRQ_TIME_ACCOUNTING`, so interrupts on the workload's "
               "CPU — a per-process counter read from another CPU is an IPI to it — are charged to "
               "the workload's run time and do count as slowdown here"
               + ("; steal time is not charged (`CONFIG_PARAVIRT_TIME_ACCOUNTING`)"
                  if m.get("paravirt_time_accounting") == "y" else "") + ");",
          "y": " (this kernel accounts interrupt time separately, `CONFIG_IRQ_TIME_ACCOUNTING`: "
               "time in the tool's interrupts on the workload's CPU is *not* in this figure, only "
               "their effect on caches and pipelines);"}.get(m.get("irq_time_accounting"), ";")))
    P("- **kept wall** = the same with iterations per wall-clock second (what a user sees; moves "
      "with the other tenants).")
    P("")
    P("| rate | counting | monitor `sleep` | own CPU hwqos ÷ perf | kept per CPU-s: hwqos | kept per CPU-s: perf | kept wall: hwqos | kept wall: perf | own CPU (median s) hwqos / perf |")
    P("|---|---|---|---|---|---|---|---|---|")
    for key, label in (("overhead", "per process"), ("overhead_per_cpu", "per CPU")):
      for src in (mon, mon_abs):
        if not src:
            continue
        for rate, row in sorted(src.get(key, {}).items(), key=lambda kv: int(kv[0])):
            pr = row["paired_throughput_ratio"]
            r = f"{int(rate) // 1000} kHz" if int(rate) >= 1000 else f"{rate} Hz"
            sl = row.get("monitor_sleep", "default")
            mds = m.get("monitor_default_sleep", "")
            if sl != "default":
                slp = sl
            elif mds.startswith("slack"):
                slp = "default (" + ("absolute" if int(rate) > 100 else "slack-compensated") + ")"
            elif mds:
                slp = f"default ({mds})"
            else:
                slp = "default"
            P(f"| {r} | {label} | {slp} | {sp(row['tool_cpu_ratio_hwqos_over_perf_paired'], '{:.2f}')} "
              f"| {sp(pr['hwqos']['cpu_second'])} | {sp(pr['perf']['cpu_second'])} "
              f"| {sp(pr['hwqos']['wall'])} | {sp(pr['perf']['wall'])} "
              f"| {row['hwqos_tool_cpu_s_median']:.3f} / {row['perf_tool_cpu_s_median']:.3f} |")
            ocpu = row["tool_cpu_ratio_hwqos_over_perf_paired"]
            kh, kp = pr["hwqos"]["cpu_second"], pr["perf"]["cpu_second"]
            if sl != "default":
                label_h = f"{label}, sleep = {sl}"
            elif slp != "default":
                label_h = f"{label}, {slp.replace('default (', 'default sleep (')}"
            else:
                label_h = label
            head.append((f"monitor vs perf stat -I, {r}, {label_h}: own CPU", "hwqos ÷ perf",
                         sp(ocpu, "{:.2f}"), "≤ 1" , "scheduler run time (schedstat)"))
            head.append((f"monitor vs perf stat -I, {r}, {label_h}: workload slowdown",
                         "throughput kept per CPU-s, hwqos ; perf",
                         f"{kh['median']:.3f} ; {kp['median']:.3f}" if kh and kp else "–",
                         "hwqos ≥ perf", "workload iterations ÷ its schedstat run time"))
    P("")
    spin = []
    for key, label in (("overhead", "per process"), ("overhead_per_cpu", "per CPU")):
        for rate, row in mon.get(key, {}).items():
            o = row["tool_cpu_ratio_hwqos_over_perf_paired"]
            if int(rate) <= 100 and o and o["median"] > 1:
                spin.append(f"{rate} Hz {label} ({o['median']:.2f})")
    if spin and m.get("monitor_default_sleep", "").startswith("slack"):
        P("**Own CPU above perf's at " + ", ".join(spin) + ".** Up to 100 Hz (periods of 10 ms "
          f"and longer) the default `sleep` of the monitor measured here (commit {m.get('commit')}) "
          "was `slack-compensated` (since commit 6943efa, after this run, the default is "
          "`absolute` at every rate): it wakes early by a "
          "learnt wake-up latency (bounded by a quarter of the period) and spins to the deadline, "
          "which buys tick precision at the price of CPU, and the learnt latency grows on a busy "
          "VM; above 100 Hz that build's default was a plain `absolute` sleep (docs/monitor.md, "
          "\"The monitor's own CPU\"). `sleep = \"absolute\"` in the configuration removes the spin "
          "at every rate" + ("; the rows with `sleep` = absolute are the same comparison with that "
          "setting, run right after the default ones." if mon_abs else "."))
        P("")
    P(f"Load during this part: {section_load('monitor')}. Raw runs: "
      f"`{RESULTS}/monitor.json` (`runs`, `runs_iterations_per_cpu_sec`, `tool_cpu_s`, "
      "`paired_throughput_ratio_runs`).")
    P("")
    # Honest reading of the spread
    wide = []
    for key, label in (("overhead", "per process"), ("overhead_per_cpu", "per CPU")):
        for rate, row in mon.get(key, {}).items():
            for tool in ("hwqos", "perf"):
                w = row["paired_throughput_ratio"][tool]["wall"]
                if w and w["max"] - w["min"] > 0.1:
                    wide.append(f"{rate} Hz {label} {tool}")
    if wide:
        P("**Load distortion:** the wall-clock ratios spread by more than 0.1 between "
          f"repetitions in {len(wide)} of the {2 * 2 * len(mon.get('overhead', {}))} cells "
          "(the other tenants took the workload's CPU away in some runs and not in others); "
          "read the per-CPU-second columns, and take a wall-clock difference between the tools "
          "smaller than that spread as no difference.")
        P("")
    for key, label in (("overhead", "per process"), ("overhead_per_cpu", "per CPU")):
        row = mon.get(key, {}).get("1000")
        if not row:
            continue
        o = row["tool_cpu_ratio_hwqos_over_perf_paired"]
        kh, kp = row["paired_throughput_ratio"]["hwqos"]["cpu_second"], row["paired_throughput_ratio"]["perf"]["cpu_second"]
        if not (o and kh and kp):
            continue
        own = "≤ perf's" if o["median"] <= 1 else "**above** perf's"
        if kh["max"] >= kp["min"] and kp["max"] >= kh["min"]:
            slow = (f"not distinguishable from perf's in this run: throughput kept {kh['median']:.3f} "
                    f"[{kh['min']:.3f}–{kh['max']:.3f}] with hwqos, {kp['median']:.3f} "
                    f"[{kp['min']:.3f}–{kp['max']:.3f}] with perf, the ranges overlap")
        elif kh["median"] > kp["median"]:
            slow = f"smaller than perf's (kept {kh['median']:.3f} vs {kp['median']:.3f}, ranges apart)"
        else:
            slow = f"**larger** than perf's (kept {kh['median']:.3f} vs {kp['median']:.3f}, ranges apart)"
        P(f"**1 kHz, {label} (issue 22's target):** own CPU {own} (median ratio {o['median']:.2f}); "
          f"workload slowdown per CPU-second {slow}.")
        P("")
    P("A throughput kept above 1.000 means that repetition's run with the tool happened to do "
      "more work than the one without: noise, not a speed-up. Differences between the tools "
      "smaller than the [min–max] ranges are not a ranking.")
    P("")

# ------------------------------------------------------------ loadgen
lg = f"{R}/loadgen_stressng.csv"
if "loadgen" in only and os.path.exists(lg):
    rows = list(csv.DictReader(open(lg)))
    P("## Load generator vs `stress-ng --cpu-load`")
    P("")
    P("Target: 35 % of CPU 1. `stress-ng --cpu 1 --cpu-load 35 --taskset 1` (open loop) and "
      "`hwqos-loadgen synthesize` (closed loop on the measured processes' CPU), each alone and "
      "next to a separate 15 % background load on the same CPU (`hwqos-loadgen generate "
      "--knob cpu_util@1=0.15`), all at nice −20 and pinned to CPU 1. The **total** is what the "
      "tool and the background together put on CPU 1 over 15 s (`perf stat -e task-clock -p` "
      "over their processes: a software event), started 5 s after the tools; the last column "
      "is CPU 1's whole busy share from `/proc/stat` over the same 15 s, which also counts "
      "every other tenant of this shared machine (`docs/experiments/loadgen_stressng.sh 2`).")
    P("")
    P("| tool | background 15 % | runs | total ÷ target (mean) | error, percentage points (mean; worst) | CPU 1 busy, /proc/stat, all tenants |")
    P("|---|---|---|---|---|---|")
    acc = {}
    for tool in ("stress-ng", "hwqos-loadgen"):
        for bg in ("no", "yes"):
            sel = [r for r in rows if r["tool"] == tool and r["background"] == bg and r["cpu1_load"]]
            if not sel:
                continue
            u = [float(r["cpu1_load"]) for r in sel]
            e = [float(r["error_pp"]) for r in sel]
            ps = [float(r["procstat_cpu1_busy"]) for r in sel if r.get("procstat_cpu1_busy") not in (None, "", "nan")]
            acc[(tool, bg)] = st.mean(u) / 0.35
            busy = f"{st.mean(ps) * 100:.1f} %" if ps else "–"
            P(f"| {tool} | {bg} | {len(sel)} | {st.mean(u) / 0.35:.3f} | {st.mean(e):+.2f}; {max(e, key=abs):+.2f} "
              f"| {busy} |")
    P("")
    allbusy = [float(r["procstat_cpu1_busy"]) for r in rows if r.get("procstat_cpu1_busy") not in (None, "", "nan")]
    if allbusy and st.mean(allbusy) > 0.9:
        P(f"CPU 1 was {st.mean(allbusy) * 100:.0f} % busy on average (`/proc/stat`) while the target "
          "was 35 % (+15 %): other tenants filled the rest. The task-clock totals are unaffected "
          "in kind (they count only the tools' and the background's processes, at nice −20), but "
          "an open-loop tool like stress-ng, which sleeps by wall-clock time, delivers less when "
          "its CPU is contended, and a closed loop compensates; on an idle machine the gap can be "
          "smaller.")
        P("")
    P(f"Load during this part: {section_load('loadgen')}. Raw: `{RESULTS}/loadgen_stressng.csv`.")
    P("")
    for bg, what in (("no", "alone"), ("yes", "with 15 % background")):
        if ("stress-ng", bg) in acc and ("hwqos-loadgen", bg) in acc:
            head.append((f"loadgen vs stress-ng --cpu-load, 35 % target, {what}",
                         "total on CPU 1 ÷ target, loadgen ; stress-ng",
                         f"{acc[('hwqos-loadgen', bg)]:.3f} ; {acc[('stress-ng', bg)]:.3f}",
                         "closer to 1", "task-clock (software event)"))

# ------------------------------------------------------------ relay
rl = f"{R}/relay.txt"
if "relay" in only and os.path.exists(rl) and os.path.getsize(rl):
    runs = collections.defaultdict(dict)
    for l in open(rl):
        r, p, t, rep, s = l.split()
        runs[rep][t] = float(s)
    tools = sorted({t for d in runs.values() for t in d})
    def paired(t, ref):
        return spread([d[t] / d[ref] for d in runs.values() if t in d and ref in d and d[ref] > 0])
    order = ["relay-adaptive"] + [f"relay-{c}" for c in CODECS.split()] + ["zstd-adapt", "raw"]
    P("## Relay: adaptive vs each fixed codec vs `zstd --adapt`")
    P("")
    P(f"One payload (16 MB of generated text, `docs/experiments/gentext.py`), one link (a veth "
      "pair between two network namespaces, 100 Mbit/s by tc htb on the sending side), "
      f"{len(runs)} repetitions, the tools in a new random order each repetition, every output "
      "checked by sha256. Time = wall time from the first byte sent to the last byte received "
      "and hashed. The relay pair is the release build with `cpu_target = 0` and `chunk_bytes = "
      "262144` (as `scripts/relay-vs-zstd.sh`), `policy = \"adaptive\"` or `policy = "
      "\"one:CODEC\"`; `zstd-adapt` is `zstd --adapt` piped through socat, `raw` plain socat. Ratios are "
      "paired: each tool's time ÷ the other's time in the same repetition.")
    P("")
    P("| tool | time ÷ zstd --adapt | time ÷ relay adaptive | median time (s) |")
    P("|---|---|---|---|")
    for t in order + [t for t in tools if t not in order]:
        if t not in tools:
            continue
        med = st.median([d[t] for d in runs.values() if t in d])
        P(f"| {t} | {sp(paired(t, 'zstd-adapt'))} | {sp(paired(t, 'relay-adaptive'))} | {med:.2f} |")
    P("")
    fixed = [f"relay-{c}" for c in CODECS.split() if f"relay-{c}" in tools]
    if fixed and "relay-adaptive" in tools:
        best = min(fixed, key=lambda t: st.median([d[t] for d in runs.values() if t in d]))
        ra = paired("relay-adaptive", best)
        head.append(("relay adaptive vs best fixed codec (" + best.replace("relay-", "") + "), 100 Mbit/s, text",
                     "time, adaptive ÷ fixed", sp(ra), "≤ 1", "wall time"))
    if "relay-adaptive" in tools and "zstd-adapt" in tools:
        head.append(("relay adaptive vs zstd --adapt piped through socat, 100 Mbit/s, text", "time, relay ÷ zstd",
                     sp(paired("relay-adaptive", "zstd-adapt")), "≤ 1.15 (test suite's limit)", "wall time"))
    rz = paired("relay-adaptive", "zstd-adapt") if "zstd-adapt" in tools and "relay-adaptive" in tools else None
    if rz and rz["max"] > 1.3 * rz["min"]:
        P(f"**Load distortion:** relay adaptive ÷ zstd --adapt ranged from {rz['min']:.2f} to "
          f"{rz['max']:.2f} between repetitions of the same comparison, more than 30 %: the "
          "median is this run's best estimate, the range is the machine's load.")
        P("")
    P(f"Load during this part: {section_load('relay')}. The relay's pipeline (compress, send, "
      "decompress, in separate processes) competes for the 2 vCPUs with the other tenants, "
      "more than a single zstd process does, so this comparison is load-sensitive; the "
      f"repetitions' spread shows how much. Raw: `{RESULTS}/relay.txt` (rate, payload, tool, "
      "repetition, seconds).")
    P("")

# ------------------------------------------------------------ sra
sj = f"{R}/sra_precision.json"
if "sra" in only and os.path.exists(sj):
    s = json.load(open(sj))
    tc = s["taskclock_per_10ms_period_ms"]
    sh = {("sra" if "hwqos" in d["label"] else "cfs"): d for d in s.get("share", [])}
    P("## hwqos-sra quota on `sw.task_clock` vs CFS bandwidth control")
    P("")
    P("The same budget and period: 5 ms of CPU per 10 ms on a busy loop pinned to CPU 1 "
      "(`hwqos-sra leech cpu --cpu 1`). hwqos-sra: `apply` of a contract with the quota "
      "`sw.task_clock` = 5,000,000 ns per 10,000 µs, direct route (the kernel stops the task at "
      "the counter's overflow). CFS: " + (sh["cfs"]["label"].split(": ", 1)[1] if "cfs" in sh else "–") +
      ". Per 10 ms period: hwqos-sra's history (the kernel's task-clock count of each period); per "
      "100 ms window: the task's run time from `/proc/PID/task/*/schedstat`, for both "
      "(`docs/experiments/sra_precision.sh 300`; the page-fault part of that script runs too "
      "and is in the raw file).")
    P("")
    P("| figure | hwqos-sra `sw.task_clock` | CFS bandwidth | hwqos ÷ CFS |")
    P("|---|---|---|---|")
    if "sra" in sh and "cfs" in sh:
        a, b = sh["sra"], sh["cfs"]
        P(f"| long-run share of one CPU ÷ budget (0.5) | {a['share'] / 0.5:.4f} | {b['share'] / 0.5:.4f} | {a['share'] / b['share']:.4f} |")
        P(f"| per-100 ms share: stdev | {a['stdev_100ms']:.4f} | {b['stdev_100ms']:.4f} | {a['stdev_100ms'] / b['stdev_100ms']:.2f} |")
        P(f"| per-100 ms share: min–max | {a['min_100ms']:.3f}–{a['max_100ms']:.3f} | {b['min_100ms']:.3f}–{b['max_100ms']:.3f} | – |")
        head.append(("hwqos-sra sw.task_clock quota vs CFS bandwidth (5 ms / 10 ms)",
                     "long-run share ÷ budget, hwqos ; CFS", f"{a['share'] / 0.5:.4f} ; {b['share'] / 0.5:.4f}",
                     "both 1", "schedstat run time"))
        head.append(("hwqos-sra vs CFS bandwidth: per-100 ms variation", "stdev of share, hwqos ÷ CFS",
                     f"{a['stdev_100ms'] / b['stdev_100ms']:.2f}", "≤ 1", "schedstat run time"))
    P(f"| per 10 ms period: CPU time ÷ budget, mean (p1, p99, max) over {tc['periods']} periods | "
      f"{tc['mean'] / 5:.4f} ({tc.get('p1', float('nan')) / 5:.3f}, {tc['p99'] / 5:.3f}, {tc['max'] / 5:.3f}) "
      "| not exposed per period (cpu.stat counts throttled periods only) | – |")
    if "periods_over_1.02_budget" in tc:
        cs = s.get("cfs_cpu_stat", {})
        P(f"| periods over 1.02 × budget; within ±2 % of it | {tc['periods_over_1.02_budget']}; "
          f"{tc['periods_within_2pct_of_budget']} of {tc['periods']} "
          f"| periods throttled: {cs.get('nr_throttled', '?')} of {cs.get('nr_periods', '?')} (cpu.stat) | – |")
    over = tc["mean"] / 5 - 1
    if over > 0.01:
        sra_note = (f"hwqos-sra let the task run {over * 100:.1f} % over its budget on average "
                    f"({(tc['mean'] - 5) * 1000:.0f} µs per 10 ms period): the quota stops the task "
                    "when the `sw.task_clock` counter overflows, and that software counter's overflow "
                    "is checked by an hrtimer, so the stop comes that much after the budget is used "
                    "(docs/sra.md: \"an hrtimer, tens of µs late on this VM\"); CFS bandwidth control "
                    "charges run time in the scheduler itself.")
    else:
        sra_note = ""
    ag = s.get("agent_cpu")
    if ag:
        P(f"| own CPU of the enforcing side, share of one CPU | {ag['share_of_one_cpu'] * 100:.3f} % (`hwqos-sra apply`, perf stat task-clock) "
          "| inside the scheduler, not separated | – |")
        head.append(("hwqos-sra quota: the agent's own CPU", "share of one CPU", f"{ag['share_of_one_cpu'] * 100:.3f} %",
                     "small", "task-clock (software event)"))
    P("")
    if sra_note:
        P(sra_note)
        P("")
    if "sra" in sh and "cfs" in sh and min(sh["sra"]["share"], sh["cfs"]["share"]) < 0.95 * 0.5:
        P("**Load distortion:** the busy loop got less than its budget over the run (long-run "
          "share below 0.95 × budget): other tenants of CPU 1 took the CPU in some periods, so "
          "there the budget was not the limit. Where that happens the shares and their spread "
          "measure the machine's load, not the mechanism; what still holds is the upper side "
          "(p99 and max per period against the budget: a quota must never let through more).")
        P("")
    P(f"Load during this part: {section_load('sra')}. Raw: `{RESULTS}/sra_precision.json` and `.txt`.")
    P("")

# ------------------------------------------------------------ kernel (copied)
P("## Kernel SCHED_SRA vs CFS (copied, not rerun)")
P("")
P("**Copied from `kernel-patch/README.md`, \"Measured results\"** — measured by "
  "`HWQOS_KERNEL_STRICT_OVERHEAD=1 kernel-patch/test.sh` (six runs, 2026-11-22, host load "
  "average 2.1–2.7), in a TCG-emulated qemu guest (`-smp 2`, no KVM, no PMU) running the "
  "patched Linux 6.1 tinyconfig kernel; counters are the software page-fault event, times "
  "guest `CLOCK_MONOTONIC`. anchors.sh does not rerun it: it needs a kernel build (about 6 "
  "minutes with an empty cache) and a qemu guest; run `kernel-patch/test.sh` for fresh figures. "
  "Scenario 7: a never-throttled task's iterations per second, upper-quartile ratio over 80 "
  "groups of 4 × 100 ms rounds:")
P("")
P("| ratio (SCHED_SRA ÷ CFS) | range over six runs |")
P("|---|---|")
P("| SRA with page-fault quota ÷ CFS with the same page-fault counter (the class's own cost) | 0.982–0.997 |")
P("| SRA with task-clock quota ÷ CFS (no per-event hook) | 0.995–1.013 |")
P("| SRA with page-fault quota ÷ bare CFS (class + counter hook) | 0.971–0.986 |")
P("")
P("Also from that document: a quota of 20 page faults per 10 ms held in all 500 periods "
  "(max 20), and a CFS task got 79–87 % of the CPU next to a throttled SRA task.")
P("")
head.append(("kernel SCHED_SRA vs CFS, never-throttled task (copied from kernel-patch/README.md)",
             "iterations/s, SRA+counter ÷ CFS+counter", "0.982–0.997 (six runs)", "≥ 0.97",
             "guest CLOCK_MONOTONIC, software page-fault event"))

# ------------------------------------------------------------ summary first
summary = ["## Summary", "",
           "| comparison | ratio | this run: median [min–max] | good when | counter |",
           "|---|---|---|---|---|"]
summary += [f"| {a} | {b} | {c} | {d} | {e} |" for a, b, c, d, e in head]
summary.append("")
notrun = [p for p in ("monitor", "loadgen", "relay", "sra") if p not in only]
if notrun:
    summary.append(f"Not run this time (`--only`): {', '.join(notrun)}.")
    summary.append("")
if failed:
    summary.append(f"**FAILED parts:** {', '.join(failed)} — see their logs in `{RESULTS}/`.")
    summary.append("")
i = next(k for k, l in enumerate(md) if l.startswith("## "))
md[i:i] = summary
open(OUT, "w").write("\n".join(md) + "\n")
print("\n".join(summary))
print(f"wrote {OUT}")
PY
}
[ -z "$REPORT_FROM" ] || { ANCHORS_REPORT_FROM=$REPORT_FROM report; exit 0; }

# ---------------------------------------------------------------- prerequisites
[ "$(uname -s)" = Linux ] || die "needs Linux (perf_event, cgroups, network namespaces)"
[ "$(id -u)" -eq 0 ] || die "run as root: per-process perf events of other processes, taskset at nice -20, cgroups and network namespaces need it"
command -v cargo >/dev/null 2>&1 || die "cargo not found: install a Rust toolchain (rustup) first"
command -v python3 >/dev/null 2>&1 || die "python3 not found (apt-get install python3)"

need=()
command -v perf >/dev/null 2>&1 || need+=(linux-perf)
command -v stress-ng >/dev/null 2>&1 || need+=(stress-ng)
command -v zstd >/dev/null 2>&1 || need+=(zstd)
command -v socat >/dev/null 2>&1 || need+=(socat)
command -v bc >/dev/null 2>&1 || need+=(bc)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v taskset >/dev/null 2>&1 || need+=(util-linux)
command -v pgrep >/dev/null 2>&1 || need+=(procps)
if [ ${#need[@]} -gt 0 ]; then
  command -v apt-get >/dev/null 2>&1 || die "missing ${need[*]} and no apt-get to install them; install them by hand"
  echo "anchors.sh: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null; } \
    || die "could not install ${need[*]} with apt-get (no access to the package registry?)"
fi
for c in perf stress-ng zstd socat bc ip tc taskset pgrep; do
  command -v "$c" >/dev/null 2>&1 || die "$c is still missing after installing packages"
done
perf stat -x, -e task-clock -- true >/dev/null 2>&1 \
  || die "perf stat cannot count the task-clock software event (perf_event_paranoid? a perf that does not match the kernel?)"
if want relay; then
  ns="hwqanchor$$"
  ip netns add "$ns" 2>/dev/null || die "ip netns add failed: the relay comparison needs network namespaces (or drop it: --only monitor,loadgen,sra)"
  if ! { ip -n "$ns" link add p0 type veth peer name p1 && tc -n "$ns" qdisc add dev p0 root handle 1: htb default 10; } 2>/dev/null; then
    ip netns del "$ns"; die "veth or tc htb unavailable: the relay comparison needs both"
  fi
  ip netns del "$ns"
fi
if want sra; then
  grep -qw cpu /sys/fs/cgroup/cgroup.controllers 2>/dev/null || [ -d /sys/fs/cgroup/cpu ] \
    || die "no cgroup cpu controller (v2 cpu.max or v1 cpu): the SRA comparison needs CFS bandwidth control"
fi

# ---------------------------------------------------------------- machine
W=$(mktemp -d /tmp/anchors.XXXXXX)
trap 'rm -rf "$W"' EXIT
t_start=$(date +%s)
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }
echo "start $(date -u +%FT%TZ) loadavg $(loadavg)" > "$W/load.txt"
{
  echo "date=$(date -u +%FT%TZ)"
  echo "model=$(lscpu | sed -n 's/^Model name: *//p' | head -1)"
  echo "cpus=$(nproc)"
  echo "threads_per_core=$(lscpu | sed -n 's/^Thread(s) per core: *//p' | head -1)"
  echo "hypervisor=$(lscpu | sed -n 's/^Hypervisor vendor: *//p' | head -1)"
  echo "kernel=$(uname -r)"
  echo "memory=$(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)"
  if perf stat -x, -e instructions -- true 2>&1 >/dev/null | grep -q '^[0-9]'; then
    echo "pmu=yes"
  else
    echo "pmu=no"
  fi
  kconfig() { # OPTION -> y / n / unknown, from the running kernel's configuration
    local v
    if [ -r /proc/config.gz ]; then v=$(zcat /proc/config.gz | grep -E "^$1=|^# $1 is not set" || true)
    elif [ -r "/boot/config-$(uname -r)" ]; then v=$(grep -E "^$1=|^# $1 is not set" "/boot/config-$(uname -r)" || true)
    else echo unknown; return; fi
    case "$v" in "$1=y") echo y ;; "") echo unknown ;; *) echo n ;; esac
  }
  echo "irq_time_accounting=$(kconfig CONFIG_IRQ_TIME_ACCOUNTING)"
  echo "paravirt_time_accounting=$(kconfig CONFIG_PARAVIRT_TIME_ACCOUNTING)"
  echo "commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  # hwqos-monitor's default `sleep` changed in 6943efa (absolute at every rate).
  if git merge-base --is-ancestor 6943efa HEAD 2>/dev/null; then
    echo "monitor_default_sleep=absolute"
  elif git rev-parse -q --verify 6943efa^{commit} >/dev/null 2>&1; then
    echo "monitor_default_sleep=slack-compensated up to 100 Hz, absolute above"
  fi
  echo "dirty=$(git status --porcelain --untracked-files=no 2>/dev/null | wc -l)"
  echo "perf=$(perf --version)"
  echo "stressng=$(stress-ng --version | head -1)"
  echo "zstd=$(zstd --version)"
  echo "rustc=$(rustc --version 2>/dev/null || echo unknown)"
} > "$W/machine.txt"

# ---------------------------------------------------------------- build
echo "anchors.sh: building the release binaries"
bins=(-p hwqos-benches)
want monitor && bins+=(-p hwqos-monitor)
want loadgen && bins+=(-p hwqos-loadgen)
want relay && bins+=(-p hwqos-relay)
want sra && bins+=(-p hwqos-sra)
REL=$ROOT/target/release
[ -n "${CARGO_TARGET_DIR:-}" ] && REL=$CARGO_TARGET_DIR/release
if [ "$BUILD" = 1 ]; then
  cargo build --release -q "${bins[@]}" --bins || die "cargo build --release failed"
  echo "built=this run" >> "$W/machine.txt"
else
  for b in hwqos-spinload hwqos-monitor hwqos-loadgen hwqos-relay hwqos-sra; do
    [ -x "$REL/$b" ] || die "--no-build: $REL/$b is missing; build it first (cargo build --release ${bins[*]} --bins)"
  done
  echo "built=not rebuilt (--no-build): binaries in target/release built $(cd "$REL" && stat -c '%n %y' hwqos-spinload hwqos-monitor hwqos-loadgen hwqos-relay hwqos-sra | cut -c1-36 | sed 's/\.[0-9]*$//' | paste -sd, - | sed 's/,/, /g')" >> "$W/machine.txt"
fi

section() { # name: marks a part's start in load.txt
  echo "$1 start $(date -u +%T) loadavg $(loadavg)" >> "$W/load.txt"
  echo; echo "=== $1 ($(date -u +%T), load average $(loadavg))"
}
section_end() { # name status
  echo "$1 end $(date -u +%T) loadavg $(loadavg) status $2" >> "$W/load.txt"
}
failed=()

# ---------------------------------------------------------------- monitor vs perf
if want monitor; then
  section monitor
  if HWQOS_BIN_DIR=$REL python3 docs/experiments/monitor_perf.py --no-build \
      --only overhead,overhead-cpu --rates 10,100,1000 --reps "$REPS" --seconds 2 --warmup 0.5 \
      -o "$W/monitor.json" 2>&1 | tee "$W/monitor.log" \
    && echo "--- the same at 10 and 100 Hz with sleep = \"absolute\" (no spin before the deadline)" | tee -a "$W/monitor.log" \
    && HWQOS_BIN_DIR=$REL python3 docs/experiments/monitor_perf.py --no-build \
      --only overhead,overhead-cpu --rates 10,100 --reps "$REPS" --seconds 2 --warmup 0.5 --sleep absolute \
      -o "$W/monitor_absolute.json" 2>&1 | tee -a "$W/monitor.log"; then
    section_end monitor ok
  else
    section_end monitor failed; failed+=(monitor)
  fi
fi

# ---------------------------------------------------------------- loadgen vs stress-ng
if want loadgen; then
  section loadgen
  if HWQOS_NO_BUILD=1 LOADGEN_STRESSNG_OUT=$W/loadgen docs/experiments/loadgen_stressng.sh 2 2>&1 | tee "$W/loadgen.log"; then
    section_end loadgen ok
  else
    section_end loadgen failed; failed+=(loadgen)
  fi
fi

# ---------------------------------------------------------------- relay vs codecs and zstd --adapt
RELAY_CODECS="none lz4 snappy zstd-1 zstd-3 zstd-9 deflate lzma-0 lzma-6 bzip2-1 bzip2-9"
if want relay; then
  section relay
  pol=()
  for c in $RELAY_CODECS; do pol+=(--relay-policy "$c=one:$c"); done
  : > "$W/relay.txt"
  if timeout 900 docs/experiments/relay_vs_cli.sh --rates 100mbit --payloads gentext --size-mb 16 \
      --reps "$REPS" --tools "raw zstd-adapt relay" --relay "adaptive=$REL/hwqos-relay" \
      "${pol[@]}" --relay-opt 'cpu_target = 0.0' --relay-opt 'chunk_bytes = 262144' \
      --out "$W/relay.txt" 2>&1 | tee "$W/relay.log"; then
    section_end relay ok
  else
    section_end relay failed; failed+=(relay)
  fi
fi

# ---------------------------------------------------------------- SRA quota vs CFS bandwidth
if want sra; then
  section sra
  if HWQOS_NO_BUILD=1 SRA_PRECISION_OUT=$W/sra docs/experiments/sra_precision.sh 300 2>&1 | tee "$W/sra.log"; then
    section_end sra ok
  else
    section_end sra failed; failed+=(sra)
  fi
fi

echo "end $(date -u +%FT%TZ) loadavg $(loadavg)" >> "$W/load.txt"
t_end=$(date +%s)

# ---------------------------------------------------------------- report
mkdir -p "$RESULTS"
for f in machine.txt load.txt monitor.json monitor_absolute.json monitor.log loadgen/stressng.csv loadgen.log relay.txt relay.log \
         sra/sra_precision.json sra/sra_precision.txt sra.log; do
  name=${f/loadgen\//loadgen_}; name=${name#sra/}
  if [ -f "$W/$f" ]; then cp "$W/$f" "$RESULTS/$name"; fi
done
echo "command=scripts/anchors.sh${ARGS:+ $ARGS}" > "$RESULTS/run.txt"
{ echo "seconds=$((t_end - t_start))"; echo "only=$ONLY"; echo "relay_codecs=$RELAY_CODECS"
  echo "failed=${failed[*]:-}"; } >> "$RESULTS/run.txt"
report
echo "anchors.sh: $(( (t_end - t_start) / 60 )) min $(( (t_end - t_start) % 60 )) s"
if [ ${#failed[@]} -gt 0 ]; then
  echo "anchors.sh: FAILED parts: ${failed[*]} (logs in $RESULTS/)" >&2
  exit 1
fi
