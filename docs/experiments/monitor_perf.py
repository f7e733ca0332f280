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

Run as root from the repository root:
  python3 docs/experiments/monitor_perf.py [--quick] [--only overhead,jitter,scale]
        [--jitter-seconds 600] -o docs/experiments/results/monitor_perf.json

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
REL = os.path.join(ROOT, "target", "release")
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
                 api=True):
    cfg = os.path.join(d, "monitor.toml")
    sets = "[[" + ", ".join(f'"{e}"' for e in EVENTS) + "]]"
    lines = [f"rate_hz = {rate}", f"per_cpu = {str(per_cpu).lower()}",
             f"procfs = {str(procfs).lower()}", f"event_sets = {sets}", "rescan_every = 0"]
    for t in targets:
        lines += ["[[target]]", f'select = "{t}"']
    lines += ["[database]", f"frames = {frames}", f"max_mib = {max_mib}",
              "[output]", f'dir = "{d}/out"', 'formats = ["jsonl"]', "flush_on_exit = true",
              "[api]", f"enabled = {str(api).lower()}", f'socket = "{d}/api.sock"',
              "[metrics]", "enabled = false"]
    with open(cfg, "w") as f:
        f.write("\n".join(lines) + "\n")
    return cfg


def start_monitor(cfg, cpu="0"):
    return subprocess.Popen(["taskset", "-c", cpu, MONITOR, "--config", cfg],
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
def spin_run(mode, rate, seconds, warmup):
    """One workload run; mode in {baseline, hwqos, perf}. Returns iterations/s."""
    d = tempfile.mkdtemp(prefix="hwqos-ovh-")
    pidfile = os.path.join(d, "pid")
    w = subprocess.Popen(["taskset", "-c", "1", SPIN, "--seconds", str(seconds),
                          "--warmup", str(warmup), "--pid-file", pidfile],
                         stdout=subprocess.PIPE, text=True)
    wait_for(pidfile)
    pid = int(open(pidfile).read())
    mon = None
    if mode == "hwqos":
        cfg = write_config(d, rate, [f"pid:{pid}"], api=False)
        mon = start_monitor(cfg)
    elif mode == "perf":
        interval_ms = max(1, round(1000 / rate))
        mon = subprocess.Popen(["taskset", "-c", "0", "perf", "stat", "-I", str(interval_ms),
                                "-e", PERF_EVENTS, "-p", str(pid), "-o", "/dev/null"],
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
    return json.loads(out)["iterations_per_sec"], mon_cpu


def overhead(rates, reps, seconds, warmup):
    res = {}
    for rate in rates:
        runs = {"baseline": [], "hwqos": [], "perf": []}
        cpu = {"hwqos": [], "perf": []}
        for _ in range(reps):
            for mode in ("baseline", "hwqos", "perf"):
                ips, c = spin_run(mode, rate, seconds, warmup)
                runs[mode].append(ips)
                if c is not None:
                    cpu[mode].append(c)
        base = statistics.median(runs["baseline"])
        row = {"rate_hz": rate, "reps": reps, "seconds": seconds,
               "baseline_ips_median": base}
        for mode in ("hwqos", "perf"):
            med = statistics.median(runs[mode])
            row[f"{mode}_ips_median"] = med
            row[f"{mode}_overhead_pct"] = round((base - med) / base * 100, 3)
            row[f"{mode}_tool_cpu_s_median"] = statistics.median(cpu[mode]) if cpu[mode] else None
        row["runs"] = runs
        res[str(rate)] = row
        print(f"overhead @{rate} Hz: hwqos {row['hwqos_overhead_pct']:+.2f}%  "
              f"perf {row['perf_overhead_pct']:+.2f}%", flush=True)
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


def jitter(seconds, rate=100):
    d = tempfile.mkdtemp(prefix="hwqos-jit-")
    # Keep every frame of the run: drift is judged over the whole run.
    cfg = write_config(d, rate, [], per_cpu=True, procfs=True,
                       frames=int(rate * seconds) + 1000, max_mib=4096)
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


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer, shorter runs")
    ap.add_argument("--only", default="overhead,jitter,scale")
    ap.add_argument("--jitter-seconds", type=float, default=None)
    ap.add_argument("-o", "--output", default=os.path.join(ROOT, "docs/experiments/results/monitor_perf.json"))
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("monitor_perf.py: run as root (per-process perf events of other processes, taskset)")
    build()
    only = set(a.only.split(","))
    result = {"command": " ".join(["python3", "docs/experiments/monitor_perf.py"] + sys.argv[1:]),
              "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "node": node_info()}
    if "overhead" in only:
        result["overhead"] = overhead([100, 1000], 3 if a.quick else 7, 3 if a.quick else 5, 1)
    if "jitter" in only:
        result["jitter"] = jitter(a.jitter_seconds or (30 if a.quick else 600))
    if "scale" in only:
        result["scale"] = scale(100, 10 if a.quick else 60, 1000)
    os.makedirs(os.path.dirname(a.output), exist_ok=True)
    with open(a.output, "w") as f:
        json.dump(result, f, indent=1)
    print(f"wrote {a.output}")


if __name__ == "__main__":
    main()
