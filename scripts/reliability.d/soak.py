"""scripts/reliability --soak MINUTES: the agents under steady load on
loopback, each agent's RSS recorded every 10 s, and the RSS slope (least
squares, MiB/min) over the part of the run after the monitor's database
filled. Load: a relay transfer every second, the monitor at 1 kHz with
procfs, process churn under its regex target (10 short processes a second),
/metrics scrapes every 10 s and a 1,000-frame window every minute, the SRA
agent throttling a faulting leech, the load generator at 10 % of CPU 0."""

import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from common import (CHURN_MARK, Api, Backend, Loadgen, Monitor, RelayPair, Sra, end_all, http_get,
                    log, on_signals, rss, rss_anon, transfer)


def slope(points):
    """Least-squares slope of (x, y) points; None with fewer than 3."""
    if len(points) < 3:
        return None
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if sxx == 0:
        return None
    return sum((x - mx) * (y - my) for x, y in points) / sxx


def main(minutes, out_dir, rate_hz=1000.0):
    on_signals()
    work = Path(tempfile.mkdtemp(prefix="hwqos-soak-"))
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    log(f"soak: {minutes} min, work dir {work}, results in {out_dir}")
    backend = Backend()
    relays = RelayPair(work, backend, far_extra={"peer_expansion_bytes_per_s": 64 << 20,
                                                 "idle_timeout_ms": 600000})
    monitor = Monitor(work, rate_hz=rate_hz, frames=30000, max_mib=256, window_timeout_s=60.0)
    sra = Sra(work)
    loadgen = Loadgen(work)
    agents = {"relay-near": relays.near, "relay-far": relays.far, "monitor": monitor.agent,
              "sra": sra.agent, "loadgen": loadgen.agent}
    stop = threading.Event()
    counts = {"transfers": 0, "transfer_failures": 0, "churned": 0, "scrapes_failed": 0,
              "windows": 0, "window_failures": 0}

    def transfers():
        i = 0
        while not stop.is_set():
            i += 1
            ok, _ = transfer(relays.near_port, 256 << 10, seed=i, timeout=30)
            counts["transfers"] += 1
            counts["transfer_failures"] += 0 if ok else 1
            stop.wait(1.0)

    def churn():
        live = []
        while not stop.is_set():
            live.append(subprocess.Popen(["sh", "-c", "sleep 0.3; :", CHURN_MARK]))
            counts["churned"] += 1
            live = [p for p in live if p.poll() is None]
            stop.wait(0.1)
        for p in live:
            p.wait(timeout=5)

    def scrapes():
        while not stop.wait(10):
            for port in (relays.near_metrics, relays.far_metrics, monitor.metrics_port, sra.metrics_port):
                if http_get(port, timeout=10)[0] != 200:
                    counts["scrapes_failed"] += 1

    def windows():
        while not stop.wait(60):
            try:
                a = Api(monitor.socket, 60)
                a.s.sendall(b'{"op":"window","frames":1000}\n')
                while True:
                    line = json.loads(a.f.readline())
                    if line["type"] != "frame":
                        break
                a.close()
                counts["windows"] += 1
                if line["type"] != "end":
                    counts["window_failures"] += 1
            except Exception:
                counts["window_failures"] += 1

    threads = [threading.Thread(target=f, daemon=True) for f in (transfers, churn, scrapes, windows)]
    for t in threads:
        t.start()
    samples = []
    csv = open(out_dir / "soak-rss.csv", "w")
    csv.write("t_s," + ",".join(f"{k}_anon_mib" for k in agents) + "," + ",".join(f"{k}_rss_mib" for k in agents)
              + ",frames_in_db,db_capacity,frames_sampled,missed_ticks\n")
    t0 = time.monotonic()
    end = t0 + minutes * 60
    fill_t = None
    while True:
        now = time.monotonic() - t0
        try:
            st = monitor.status(10)
        except Exception:
            st = {}
        row = {"t": now, **{k: (rss_anon(a.pid) if a.alive() else None) for k, a in agents.items()},
               **{k + "_rss": (rss(a.pid) if a.alive() else None) for k, a in agents.items()},
               "frames_in_db": st.get("frames_in_db"), "db_capacity": st.get("db_capacity"),
               "frames_sampled": st.get("frames_sampled"), "missed_ticks": st.get("missed_ticks")}
        samples.append(row)
        if fill_t is None and row["frames_in_db"] is not None and row["frames_in_db"] >= row["db_capacity"]:
            fill_t = now
            log(f"soak: the monitor's database is full ({row['frames_in_db']} frames) at {now:.0f} s")
        csv.write(",".join("" if row[k] is None else (f"{row[k]:.3f}" if isinstance(row[k], float) else str(row[k]))
                           for k in ["t", *agents, *(k + "_rss" for k in agents), "frames_in_db", "db_capacity",
                                     "frames_sampled",
                                     "missed_ticks"]) + "\n")
        csv.flush()
        dead = [k for k, a in agents.items() if not a.alive()]
        if dead:
            log(f"soak: agents died: {dead}")
            break
        if time.monotonic() >= end:
            break
        time.sleep(max(0.0, 10 - ((time.monotonic() - t0) % 10)))
    stop.set()
    for t in threads:
        t.join(timeout=60)
    result = {"minutes": minutes, "rate_hz": rate_hz, "fill_s": fill_t, "counts": counts, "agents": {}}
    start = fill_t if fill_t is not None else 0.0
    for k in agents:
        pts = [(r["t"] / 60.0, r[k]) for r in samples if r["t"] >= start and r[k] is not None]
        s = slope(pts)
        # The same slope over the second half of the filled part: creep that stops is not a leak.
        half = [(x, y) for x, y in pts if x >= (pts[0][0] + pts[-1][0]) / 2] if pts else []
        vm = [(r["t"] / 60.0, r[k + "_rss"]) for r in samples if r["t"] >= start and r[k + "_rss"] is not None]
        result["agents"][k] = {
            "slope_mib_per_min": s, "slope_second_half": slope(half), "vmrss_slope_mib_per_min": slope(vm),
            "rss_first_mib": pts[0][1] if pts else None, "rss_last_mib": pts[-1][1] if pts else None,
            "rss_max_mib": max(y for _, y in pts) if pts else None, "points": len(pts)}
    last = samples[-1]
    result["monitor_frames_sampled"] = last.get("frames_sampled")
    result["monitor_missed_ticks"] = last.get("missed_ticks")
    dead = [k for k, a in agents.items() if not a.alive()]
    result["dead"] = dead
    (out_dir / "soak-result.json").write_text(json.dumps(result, indent=2))
    print()
    print(f"soak {minutes} min at {rate_hz:g} Hz; database full at "
          f"{'never' if fill_t is None else f'{fill_t:.0f} s'}; slopes over the filled part "
          f"(anonymous RSS, RssAnon; VmRSS slope for comparison)")
    print(f"{'agent':<12} {'anon first':>10} {'anon last':>10} {'anon max':>10} {'slope MiB/min':>14} {'2nd half':>10}"
          f" {'VmRSS slope':>12}")
    for k, v in result["agents"].items():
        def f(x, spec):
            return "-" if x is None else format(x, spec)
        print(f"{k:<12} {f(v['rss_first_mib'], '10.1f')} {f(v['rss_last_mib'], '10.1f')} "
              f"{f(v['rss_max_mib'], '10.1f')} {f(v['slope_mib_per_min'], '14.3f')} "
              f"{f(v['slope_second_half'], '10.3f')} {f(v['vmrss_slope_mib_per_min'], '12.3f')}")
    print(f"load: {counts}; monitor frames {last.get('frames_sampled')}, missed ticks {last.get('missed_ticks')}")
    end_all()
    ok = not dead and counts["transfer_failures"] == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(float(sys.argv[1]), sys.argv[2], float(sys.argv[3]) if len(sys.argv) > 3 else 1000.0))
