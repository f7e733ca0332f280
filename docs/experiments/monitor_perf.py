#!/usr/bin/env python3
"""Monitor performance experiments (issue: hwqos-monitor performance targets).

Reproduces the figures in docs/monitor.md ("Performance"):

  overhead  throughput of a CPU-bound workload (hwqos-spinload) alone, sampled by
            hwqos-monitor, and sampled by `perf stat -I` at the same interval,
            interleaved runs, same events, same CPU placement;
  jitter    tick lateness of hwqos-monitor at 100 Hz (p50/p99/max) and drift
            (lateness trend over the run), computed from the recorded frames;
  scale     100 monitored processes x 4 events at 10 Hz: CPU per tick and per
            process-sample, and RSS with a full 30,000-frame database.
  overhead-cpu  as overhead, but both tools count every CPU (monitor
            `per_cpu = true`, `perf stat -a -A`);
  hotpath   system calls and allocator calls per tick of the monitor's sampling
            thread at 1 kHz, per process and per CPU (tracepoint and uprobes,
            counted by `perf stat --per-thread`; names from `strace -c`);
  jitter-1k tick lateness at 1 kHz, default sleep vs slack-compensated.

Run as root from the repository root:
  python3 docs/experiments/monitor_perf.py [--quick] [--only overhead,jitter,scale]
        [--jitter-seconds 600] [--rates 100,1000] [--reps N] [--seconds S] [--warmup S]
        [--sleep STRATEGY] [--before DIR] [--no-build] -o docs/experiments/results/monitor_perf.json
(HWQOS_BIN_DIR=DIR measures the binaries in DIR; --before DIR adds DIR's
hwqos-monitor as a fourth interleaved mode of the overhead runs.)

The overhead runs rotate the order of the modes from one repetition to the
next and record, besides the medians, each repetition's *paired* ratios
(mode ÷ the baseline of the same repetition) of the workload's wall-clock
throughput and of its work per CPU-second (iterations ÷ the CPU time the
workload got, from its own /proc/self/schedstat): on a shared machine the
wall-clock figure moves with the other tenants, the per-CPU-second one much
less (scripts/anchors.sh reports both).

Every counter used here is a kernel *software* event (task-clock, page-faults,
context-switches, cpu-migrations); the script records which kind of counters
the node offers in the result file.
"""
import argparse
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
# HWQOS_BIN_DIR: measure binaries built elsewhere (e.g. a copy of the "before" build).
REL = os.environ.get("HWQOS_BIN_DIR", os.path.join(ROOT, "target", "release"))
MONITOR = os.path.join(REL, "hwqos-monitor")
SPIN = os.path.join(REL, "hwqos-spinload")
EVENTS = ["sw.task_clock", "sw.page_faults", "sw.context_switches", "sw.cpu_migrations"]
PERF_EVENTS = "task-clock,page-faults,context-switches,cpu-migrations"


def build():
    subprocess.run(["cargo", "build", "--release", "--quiet", "-p", "hwqos-monitor",
                    "-p", "hwqos-benches", "--bins"], cwd=ROOT, check=True)


def node_info():
    has_pmu = subprocess.run(["perf", "stat", "-x,", "-e", "instructions", "true"],
                             capture_output=True, text=True).stderr
    hw = any(line[:1].isdigit() for line in has_pmu.splitlines())
    cpu = "unknown"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {"kernel": platform.release(), "cpu": cpu, "cpus": os.cpu_count(),
            "hardware_pmu": hw, "counters_used": "software"}


def write_config(d, rate, targets, per_cpu=False, procfs=False, frames=30000, max_mib=256,
                 api=True, sleep=None):
    cfg = os.path.join(d, "monitor.toml")
    sets = "[[" + ", ".join(f'"{e}"' for e in EVENTS) + "]]"
    lines = [f"rate_hz = {rate}", f"per_cpu = {str(per_cpu).lower()}",
             f"procfs = {str(procfs).lower()}", f"event_sets = {sets}", "rescan_every = 0"]
    if sleep:
        lines.append(f'sleep = "{sleep}"')
    for t in targets:
        lines += ["[[target]]", f'select = "{t}"']
    lines += ["[database]", f"frames = {frames}", f"max_mib = {max_mib}",
              "[output]", f'dir = "{d}/out"', 'formats = ["jsonl"]', "flush_on_exit = true",
              "[api]", f"enabled = {str(api).lower()}", f'socket = "{d}/api.sock"',
              "[metrics]", "enabled = false"]
    with open(cfg, "w") as f:
        f.write("\n".join(lines) + "\n")
    return cfg


# --before DIR: also run the hwqos-monitor binary in DIR (an earlier build) in the
# same interleaving, as mode "hwqos_before".
BEFORE = None
# --sleep STRATEGY: the monitor's `sleep` in the overhead runs (default: its own default).
SLEEP = None


def start_monitor(cfg, cpu="0", binary=None):
    return subprocess.Popen(["taskset", "-c", cpu, binary or MONITOR, "--config", cfg],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def stop(p):
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def proc_cpu_seconds(pid):
    """CPU time of a process (all threads), in seconds: nanosecond precision from
    /proc/PID/task/*/schedstat where the kernel has it, else clock ticks."""
    try:
        total = 0
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        return total / 1e9
    except (OSError, ValueError, IndexError):
        pass
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return None


def api_request(sock, req):
    import socket
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(sock)
    f = s.makefile("rw")
    f.readline()  # hello
    f.write(json.dumps(req) + "\n")
    f.flush()
    out = json.loads(f.readline())
    s.close()
    return out


def wait_for(path, timeout=20):
    t0 = time.time()
    while not os.path.exists(path):
        if time.time() - t0 > timeout:
            raise RuntimeError(f"{path} did not appear")
        time.sleep(0.05)


# ---------------------------------------------------------------- overhead
def spin_run(mode, rate, seconds, warmup, per_cpu=False):
    """One workload run; mode in {baseline, hwqos, perf}. Returns iterations/s and
    the tool's CPU time. With `per_cpu` the tools count every CPU (hwqos-monitor
    `per_cpu = true` without process targets, `perf stat -a -A`) instead of the
    workload's process."""
    d = tempfile.mkdtemp(prefix="hwqos-ovh-")
    pidfile = os.path.join(d, "pid")
    w = subprocess.Popen(["taskset", "-c", "1", SPIN, "--seconds", str(seconds),
                          "--warmup", str(warmup), "--pid-file", pidfile],
                         stdout=subprocess.PIPE, text=True)
    wait_for(pidfile)
    pid = int(open(pidfile).read())
    mon = None
    if mode in ("hwqos", "hwqos_before"):
        targets = [] if per_cpu else [f"pid:{pid}"]
        cfg = write_config(d, rate, targets, per_cpu=per_cpu, api=False, sleep=SLEEP)
        mon = start_monitor(cfg, binary=BEFORE if mode == "hwqos_before" else None)
    elif mode == "perf":
        interval_ms = max(1, round(1000 / rate))
        what = ["-a", "-A"] if per_cpu else ["-p", str(pid)]
        mon = subprocess.Popen(["taskset", "-c", "0", "perf", "stat", "-I", str(interval_ms),
                                "-e", PERF_EVENTS] + what + ["-o", "/dev/null"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    out, _ = w.communicate()
    mon_cpu = None
    if mon is not None:
        try:
            mon_cpu = proc_cpu_seconds(mon.pid)
        except OSError:
            pass
        if mode == "perf":
            mon.send_signal(signal.SIGINT)
            mon.wait(timeout=30)
        else:
            stop(mon)
    shutil.rmtree(d, ignore_errors=True)
    res = json.loads(out)
    return res["iterations_per_sec"], mon_cpu, res.get("iterations_per_cpu_sec")


def spread(xs):
    """Median, quartiles and range of a list (None when empty)."""
    if not xs:
        return None
    xs = sorted(xs)
    q = statistics.quantiles(xs, n=4, method="inclusive") if len(xs) > 1 else [xs[0]] * 3
    return {"median": round(statistics.median(xs), 4), "q1": round(q[0], 4),
            "q3": round(q[2], 4), "min": round(xs[0], 4), "max": round(xs[-1], 4), "n": len(xs)}


def overhead(rates, reps, seconds, warmup, per_cpu=False):
    res = {}
    for rate in rates:
        modes = ["baseline", "hwqos", "perf"] + (["hwqos_before"] if BEFORE else [])
        runs = {m: [] for m in modes}
        per_cpu_s = {m: [] for m in modes}
        cpu = {m: [] for m in modes if m != "baseline"}
        paired = {m: {"wall": [], "cpu_second": []} for m in modes[1:]}
        pair_cpu = []
        for i in range(reps):
            # Rotate the order, so no mode always runs first or right after another.
            order = modes[i % len(modes):] + modes[:i % len(modes)]
            got = {}
            for mode in order:
                got[mode] = spin_run(mode, rate, seconds, warmup, per_cpu)
                ips, c, ipcs = got[mode]
                runs[mode].append(ips)
                if ipcs is not None:
                    per_cpu_s[mode].append(ipcs)
                if c is not None:
                    cpu[mode].append(c)
            b_ips, _, b_ipcs = got["baseline"]
            for mode in modes[1:]:
                ips, _, ipcs = got[mode]
                paired[mode]["wall"].append(ips / b_ips)
                if ipcs and b_ipcs:
                    paired[mode]["cpu_second"].append(ipcs / b_ipcs)
            if got["hwqos"][1] and got["perf"][1]:
                pair_cpu.append(got["hwqos"][1] / got["perf"][1])
        base = statistics.median(runs["baseline"])
        row = {"rate_hz": rate, "reps": reps, "seconds": seconds,
               "counting": "per CPU" if per_cpu else "per process",
               "baseline_ips_median": base}
        for mode in modes[1:]:
            med = statistics.median(runs[mode])
            row[f"{mode}_ips_median"] = med
            row[f"{mode}_overhead_pct"] = round((base - med) / base * 100, 3)
            row[f"{mode}_tool_cpu_s_median"] = statistics.median(cpu[mode]) if cpu[mode] else None
        # The tools' own CPU time, paired run by run (each hwqos run with the perf
        # run right after it): the median of the ratios, and the ratio of medians.
        pairs = pair_cpu
        if BEFORE:
            bp = [h / p for h, p in zip(cpu["hwqos_before"], cpu["perf"]) if p]
            row["tool_cpu_ratio_before_over_perf_median"] = (
                round(statistics.median(bp), 3) if bp else None)
        row["tool_cpu_ratio_hwqos_over_perf_median"] = (
            round(statistics.median(pairs), 3) if pairs else None)
        if row["hwqos_tool_cpu_s_median"] and row["perf_tool_cpu_s_median"]:
            row["tool_cpu_ratio_of_medians"] = round(
                row["hwqos_tool_cpu_s_median"] / row["perf_tool_cpu_s_median"], 3)
        row["runs"] = runs
        row["runs_iterations_per_cpu_sec"] = per_cpu_s
        row["tool_cpu_s"] = cpu
        row["order"] = "rotated per repetition"
        row["monitor_sleep"] = SLEEP or "default"
        # Each repetition's mode ÷ its own baseline: throughput kept (1 = no
        # slowdown), wall-clock and per CPU-second of the workload.
        row["paired_throughput_ratio"] = {m: {k: spread(v) for k, v in p.items()}
                                          for m, p in paired.items()}
        row["paired_throughput_ratio_runs"] = paired
        row["tool_cpu_ratio_hwqos_over_perf_paired"] = spread(pair_cpu)
        res[str(rate)] = row
        if BEFORE:
            print(f"  before: {row['hwqos_before_overhead_pct']:+.2f}%, own CPU before/perf "
                  f"{row['tool_cpu_ratio_before_over_perf_median']}", flush=True)
        print(f"overhead @{rate} Hz ({row['counting']}): hwqos {row['hwqos_overhead_pct']:+.2f}%  "
              f"perf {row['perf_overhead_pct']:+.2f}%  own CPU hwqos/perf "
              f"{row['tool_cpu_ratio_hwqos_over_perf_median']}", flush=True)
        pr = row["paired_throughput_ratio"]
        print("  paired throughput kept (median of mode/baseline): "
              + "  ".join(f"{m} wall {pr[m]['wall']['median'] if pr[m]['wall'] else '-'}"
                          f" per-CPU-s {pr[m]['cpu_second']['median'] if pr[m]['cpu_second'] else '-'}"
                          for m in modes[1:]), flush=True)
    return res


# ---------------------------------------------------------------- jitter
def steal_ticks():
    """Clock ticks the hypervisor took from this VM, all CPUs (/proc/stat)."""
    with open("/proc/stat") as f:
        return int(f.readline().split()[8])


def cyclictest_control(seconds, rate):
    """Starts cyclictest (rt-tests) at the same interval as a control: the wake-up
    latency any periodic thread sees on this machine at the same time."""
    if not shutil.which("cyclictest"):
        return None
    return subprocess.Popen(
        ["cyclictest", "-q", "-m", "-i", str(round(1e6 / rate)), "-l", str(int(seconds * rate)),
         "-h", "60000"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)


def cyclictest_summary(proc):
    if proc is None:
        return {"available": False, "note": "apt-get install rt-tests for the cyclictest control"}
    out, _ = proc.communicate()
    hist, overflows = [], 0
    for line in out.splitlines():
        parts = line.split()
        if line.startswith("#") :
            if "Histogram Overflows" in line:
                overflows = int(line.split(":")[1].split()[0])
            continue
        if len(parts) == 2 and parts[0].isdigit():
            hist.append((int(parts[0]), int(parts[1])))
    total = sum(c for _, c in hist) + overflows
    def pct(p):
        need, acc = p / 100 * total, 0
        for us, c in hist:
            acc += c
            if acc >= need:
                return us
        return None
    mx = max((us for us, c in hist if c), default=None)
    return {"available": True, "samples": total, "p50_us": pct(50), "p99_us": pct(99),
            "p999_us": pct(99.9), "max_us": mx if not overflows else ">60000",
            "over_200us": sum(c for us, c in hist if us > 200) + overflows}


def jitter(seconds, rate=100, sleep=None, procfs=True):
    d = tempfile.mkdtemp(prefix="hwqos-jit-")
    # Keep every frame of the run: drift is judged over the whole run.
    cfg = write_config(d, rate, [], per_cpu=True, procfs=procfs,
                       frames=int(rate * seconds) + 1000, max_mib=4096, sleep=sleep)
    mon = start_monitor(cfg)
    wait_for(os.path.join(d, "api.sock"))
    steal0 = steal_ticks()
    control = cyclictest_control(seconds, rate)
    time.sleep(seconds)
    steal = steal_ticks() - steal0
    flushed = api_request(os.path.join(d, "api.sock"), {"op": "flush"})
    status = api_request(os.path.join(d, "api.sock"), {"op": "status"})
    stop(mon)
    control = cyclictest_summary(control)
    # One flush appends to this run's segments; a large one spans several.
    paths = [p for p in flushed.get("paths", []) if p.endswith(".jsonl")]
    period = 1e9 / rate
    seqs, monos = [], []
    for path in paths:
        with open(path) as f:
            next(f)  # header
            for line in f:
                fr = json.loads(line)
                seqs.append(fr["seq"])
                monos.append(fr["time"]["mono_ns"])
    offsets = [m - s * period for s, m in zip(seqs, monos)]
    origin = min(offsets)
    late_us = [(o - origin) / 1000 for o in offsets]
    n = len(late_us)
    q = max(1, n // 10)
    first, last = late_us[:q], late_us[-q:]
    # least-squares slope of lateness over time, in microseconds per minute
    xs = [(m - monos[0]) / 6e10 for m in monos]
    mx, my = statistics.fmean(xs), statistics.fmean(late_us)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, late_us)) / sxx if sxx else 0.0
    late_sorted = sorted(late_us)
    pct = lambda p: late_sorted[min(n - 1, int(p / 100 * (n - 1) + 0.5))]
    shutil.rmtree(d, ignore_errors=True)
    out = {"rate_hz": rate, "seconds": seconds, "frames": n,
           "sleep": sleep or "default", "procfs": procfs,
           "missed_ticks": (seqs[-1] - seqs[0] + 1) - n,
           "lateness_us": {"p50": pct(50), "p99": pct(99), "p999": pct(99.9), "max": late_sorted[-1]},
           "ticks_later_than_200us": sum(1 for x in late_us if x > 200),
           "first_tenth_median_us": statistics.median(first),
           "last_tenth_median_us": statistics.median(last),
           "drift_slope_us_per_min": slope,
           "vm_steal_ms": steal * 1000 / os.sysconf("SC_CLK_TCK"),
           "cyclictest_control": control,
           "monitor_status": status}
    print(f"jitter @{rate} Hz over {seconds}s: p50 {pct(50):.1f} us, p99 {pct(99):.1f} us, "
          f"slope {slope:+.3f} us/min; steal {out['vm_steal_ms']:.0f} ms; "
          f"cyclictest p99 {control.get('p99_us')} us max {control.get('max_us')} us", flush=True)
    return out


# ---------------------------------------------------------------- scale
def scale(nproc, seconds, fill_rate):
    d = tempfile.mkdtemp(prefix="hwqos-scale-")
    marker = "1000.123"
    kids = [subprocess.Popen(["sleep", marker]) for _ in range(nproc)]
    try:
        target = f"regex:^sleep {marker.replace('.', '[.]')}$"
        cfg = write_config(d, 10, [target])
        mon = start_monitor(cfg)
        wait_for(os.path.join(d, "api.sock"))
        time.sleep(2)
        c0, t0 = proc_cpu_seconds(mon.pid), time.time()
        s0 = api_request(os.path.join(d, "api.sock"), {"op": "status"})
        time.sleep(seconds)
        c1, t1 = proc_cpu_seconds(mon.pid), time.time()
        s1 = api_request(os.path.join(d, "api.sock"), {"op": "status"})
        stop(mon)
        ticks = s1.get("frames_sampled", 0) - s0.get("frames_sampled", 0)
        cpu_s = c1 - c0
        res = {"processes": nproc, "events": len(EVENTS), "rate_hz": 10, "seconds": round(t1 - t0, 2),
               "ticks": ticks, "monitor_cpu_s": cpu_s,
               "cpu_pct_of_one_cpu": round(cpu_s / (t1 - t0) * 100, 3),
               "cpu_us_per_tick": round(cpu_s / ticks * 1e6, 1) if ticks else None,
               "cpu_us_per_process_sample": round(cpu_s / ticks / nproc * 1e6, 2) if ticks else None,
               "scopes_in_last_frame": s1.get("scopes_in_last_frame")}
        # fill the database: sample fast until 30,000 frames are held
        cfg = write_config(d, fill_rate, [target], max_mib=8192)
        mon = start_monitor(cfg)
        wait_for(os.path.join(d, "api.sock"))
        t0 = time.time()
        held = 0
        while time.time() - t0 < 600:
            st = api_request(os.path.join(d, "api.sock"), {"op": "status"})
            held = st.get("frames_in_db", 0)
            if held >= 30000:
                break
            time.sleep(1)
        res["full_db_frames"] = held
        res["full_db_rss_mib"] = round(rss_kib(mon.pid) / 1024, 1)
        res["full_db_fill_rate_hz"] = fill_rate
        res["full_db_status"] = st
        stop(mon)
    finally:
        for k in kids:
            k.kill()
            k.wait()
        shutil.rmtree(d, ignore_errors=True)
    print(f"scale: {res['cpu_us_per_tick']} us/tick, {res['cpu_pct_of_one_cpu']}% of a CPU, "
          f"RSS {res['full_db_rss_mib']} MiB at {res['full_db_frames']} frames", flush=True)
    return res



# ---------------------------------------------------------------- hot path
ALLOC_FUNCS = ["malloc", "calloc", "realloc", "posix_memalign", "aligned_alloc", "memalign"]


def libc_path():
    out = subprocess.run(["ldd", MONITOR], capture_output=True, text=True).stdout
    for line in out.splitlines():
        if "libc.so" in line and "=>" in line:
            return line.split("=>")[1].split()[0]
    return None


def add_alloc_probes():
    """User-space probes (uprobes, software; no PMU needed) on the C library's
    allocation entry points, which Rust's default global allocator calls. Returns
    the probe events that exist afterwards and the ones this call added."""
    libc = libc_path()
    have = subprocess.run(["perf", "list", "probe_libc:*"], capture_output=True,
                          text=True).stdout
    events, added = [], []
    for fn in ALLOC_FUNCS:
        ev = f"probe_libc:{fn}"
        if ev not in have and libc:
            r = subprocess.run(["perf", "probe", "-q", "-x", libc, "--add", fn],
                               capture_output=True, text=True)
            if r.returncode != 0:
                continue
            added.append(ev)
        events.append(ev)
    return events, added


def tick_window(sock, seconds):
    """Frames the monitor sampled over `seconds` (API status before and after);
    run as the command `perf stat` counts, so the ticks lie inside its window."""
    s0 = api_request(sock, {"op": "status"})
    time.sleep(seconds)
    s1 = api_request(sock, {"op": "status"})
    print(json.dumps({"ticks": s1["frames_sampled"] - s0["frames_sampled"],
                      "missed": s1["missed_ticks"] - s0["missed_ticks"],
                      "scopes_in_last_frame": s1.get("scopes_in_last_frame")}))


def perf_stat_per_thread(pid, events, sock, seconds):
    """Counts `events` per thread of `pid` while `tick_window` runs:
    ({comm: {event: count}}, the tick window's result)."""
    r = subprocess.run(["perf", "stat", "-x", ",", "--per-thread", "-e", ",".join(events),
                        "-p", str(pid), "--", sys.executable, os.path.abspath(__file__),
                        "--tick-window", sock, str(seconds)],
                       capture_output=True, text=True)
    out = {}
    for line in r.stderr.splitlines():
        parts = line.split(",")
        # thread,count,unit,event,...
        if len(parts) < 4 or not parts[1].strip().isdigit():
            continue
        thread = parts[0].strip().rsplit("-", 1)[0]
        out.setdefault(thread, {})
        out[thread][parts[3]] = out[thread].get(parts[3], 0) + int(parts[1])
    return out, json.loads(r.stdout.strip().splitlines()[-1])


def strace_summary(pid, seconds):
    """`strace -c -f -p PID` for `seconds`: {syscall: calls}. (ptrace slows the
    monitor, so its tick count is taken over the same window by the caller.)"""
    p = subprocess.Popen(["strace", "-c", "-f", "-p", str(pid)], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    time.sleep(seconds)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=30)
    calls = {}
    for line in err.splitlines():
        parts = line.split()
        if len(parts) >= 5 and parts[0].replace(".", "").isdigit() and parts[-1] != "total":
            try:
                calls[parts[-1]] = int(parts[3])
            except ValueError:
                pass
    return calls


def hotpath(rate, seconds, per_cpu):
    """Syscalls and allocations per tick of the monitor's sampling thread, at
    `rate`, counting the workload's process or every CPU (software events)."""
    d = tempfile.mkdtemp(prefix="hwqos-hot-")
    pidfile = os.path.join(d, "pid")
    events, added = add_alloc_probes()
    w = subprocess.Popen(["taskset", "-c", "1", SPIN, "--seconds", str(3 * seconds + 10),
                          "--warmup", "0", "--pid-file", pidfile],
                         stdout=subprocess.DEVNULL)
    try:
        wait_for(pidfile)
        pid = int(open(pidfile).read())
        targets = [] if per_cpu else [f"pid:{pid}"]
        cfg = write_config(d, rate, targets, per_cpu=per_cpu, api=True)
        mon = start_monitor(cfg)
        sock = os.path.join(d, "api.sock")
        wait_for(sock)
        time.sleep(2)
        counts, win = perf_stat_per_thread(mon.pid, ["raw_syscalls:sys_enter"] + events, sock,
                                           seconds)
        ticks = win["ticks"]
        sampler = counts.get("hwqos-sampler", {})
        allocs = sum(v for k, v in sampler.items() if k.startswith("probe_libc:"))
        proc_sys = sum(c.get("raw_syscalls:sys_enter", 0) for c in counts.values())
        proc_allocs = sum(v for c in counts.values() for k, v in c.items()
                          if k.startswith("probe_libc:"))
        st = strace_summary(mon.pid, seconds)
        stop(mon)
    finally:
        w.kill()
        w.wait()
        for ev in added:
            subprocess.run(["perf", "probe", "-q", "-d", ev], capture_output=True)
        shutil.rmtree(d, ignore_errors=True)
    sampler_sys = sampler.get("raw_syscalls:sys_enter", 0) / ticks
    st_total = sum(st.values())
    res = {"rate_hz": rate, "counting": "per CPU" if per_cpu else "per process",
           "seconds": seconds, "ticks": ticks, "missed_ticks": win["missed"],
           "scopes_in_last_frame": win["scopes_in_last_frame"],
           "sampler_thread": {
               "syscalls_per_tick": round(sampler.get("raw_syscalls:sys_enter", 0) / ticks, 3),
               "allocator_calls_per_tick": round(allocs / ticks, 2),
               "by_function_per_tick": {k.split(":")[1]: round(v / ticks, 2)
                                        for k, v in sampler.items() if k.startswith("probe_libc:")}},
           "whole_process": {"syscalls_per_tick": round(proc_sys / ticks, 3),
                             "allocator_calls_per_tick": round(proc_allocs / ticks, 2)},
           # strace names the calls; its shares are scaled to the perf count per tick
           # (strace's own window and ptrace slow-down make its tick count unreliable)
           "strace_syscalls_per_tick": {k: round(v / st_total * sampler_sys, 3) for k, v in
                                        sorted(st.items(), key=lambda kv: -kv[1])} if st_total else None,
           "strace_calls": st,
           "method": "perf stat --per-thread -e raw_syscalls:sys_enter,probe_libc:{"
                     + ",".join(ALLOC_FUNCS) + "} (tracepoint and uprobes: software) over "
                     f"{seconds} s, divided by the frames sampled meanwhile (API status); "
                     "allocator calls exclude free; then strace -c -f -p for the syscall names"}
    print(f"hot path @{rate} Hz ({res['counting']}): "
          f"{res['sampler_thread']['syscalls_per_tick']} syscalls/tick, "
          f"{res['sampler_thread']['allocator_calls_per_tick']} allocations/tick "
          f"(sampling thread); strace: {res['strace_syscalls_per_tick']}", flush=True)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer, shorter runs")
    ap.add_argument("--no-build", action="store_true", help="measure the binaries as they are")
    ap.add_argument("--before", metavar="DIR",
                    help="also run DIR/hwqos-monitor (an earlier build) in the overhead runs")
    ap.add_argument("--only", default="overhead,jitter,scale",
                    help="any of overhead, overhead-cpu (per CPU), hotpath, jitter, jitter-1k, scale")
    ap.add_argument("--rates", default="100,1000", help="overhead rates in Hz")
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument("--jitter-seconds", type=float, default=None)
    ap.add_argument("--seconds", type=float, default=None,
                    help="measured seconds per overhead run (default 5, 3 with --quick)")
    ap.add_argument("--sleep", default=None,
                    help="the monitor's `sleep` strategy in the overhead runs (e.g. absolute; "
                         "default: the monitor's default for the rate)")
    ap.add_argument("--warmup", type=float, default=1.0,
                    help="warm-up seconds per overhead run (default 1)")
    ap.add_argument("-o", "--output", default=os.path.join(ROOT, "docs/experiments/results/monitor_perf.json"))
    ap.add_argument("--tick-window", nargs=2, metavar=("SOCK", "SECONDS"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.tick_window:
        return tick_window(a.tick_window[0], float(a.tick_window[1]))
    global BEFORE, SLEEP
    SLEEP = a.sleep
    BEFORE = os.path.join(a.before, "hwqos-monitor") if a.before else None
    if os.geteuid() != 0:
        sys.exit("monitor_perf.py: run as root (per-process perf events of other processes, taskset)")
    if not a.no_build:
        build()
    only = set(a.only.split(","))
    result = {"command": " ".join(["python3", "docs/experiments/monitor_perf.py"] + sys.argv[1:]),
              "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "node": node_info(),
              "loadavg_at_start": open("/proc/loadavg").read().split()[:3]}
    rates = [int(r) for r in a.rates.split(",")]
    reps = a.reps or (3 if a.quick else 7)
    if "hotpath" in only:
        result["hotpath"] = {"per_process": hotpath(1000, 3 if a.quick else 5, False),
                             "per_cpu": hotpath(1000, 3 if a.quick else 5, True)}
    if "overhead" in only:
        result["overhead"] = overhead(rates, reps, a.seconds or (3 if a.quick else 5), a.warmup)
    if "overhead-cpu" in only:
        result["overhead_per_cpu"] = overhead(rates, reps, a.seconds or (3 if a.quick else 5),
                                              a.warmup, per_cpu=True)
    if "jitter" in only:
        result["jitter"] = jitter(a.jitter_seconds or (30 if a.quick else 600))
    if "jitter-1k" in only:
        # The default at 1 kHz (absolute sleep) against the spinning strategy,
        # interleaved, procfs off (as the overhead runs).
        secs = a.jitter_seconds or 20
        runs = []
        for _ in range(2):
            for sleep in (None, "slack-compensated"):
                runs.append(jitter(secs, 1000, sleep=sleep, procfs=False))
        result["jitter_1khz"] = runs
    if "scale" in only:
        result["scale"] = scale(100, 10 if a.quick else 60, 1000)
    result["loadavg_at_end"] = open("/proc/loadavg").read().split()[:3]
    os.makedirs(os.path.dirname(a.output), exist_ok=True)
    with open(a.output, "w") as f:
        json.dump(result, f, indent=1)
    print(f"wrote {a.output}")


if __name__ == "__main__":
    main()
