"""scripts/reliability --rates [SECONDS] [REPETITIONS]: the monitor's achieved
sampling rate, missed ticks and CPU use at 100 Hz to 10 kHz, procfs off and
on (docs/monitor.md, "Sustainable rates"). Per-CPU software counters, no
process targets; each point SECONDS (15) after 1 s of warm-up, frames from
the API's status. Use HWQOS_BIN_DIR=target/release for the shipped build."""

import json
import os
import sys
import tempfile
import time

from common import Monitor, end_all, on_signals

RATES = (100, 1000, 2000, 5000, 10000)


def cpu_seconds(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def main(seconds, reps):
    on_signals()
    print(f"{'rep':>3} {'rate_hz':>7} {'procfs':>6} {'achieved':>9} {'missed %':>8} {'CPU':>6}")
    try:
        for rep in range(reps):
            for procfs in (False, True):
                for rate in RATES:
                    m = Monitor(tempfile.mkdtemp(prefix="hwqos-rates-"), rate_hz=rate, frames=30000,
                                max_mib=256, procfs=procfs)
                    time.sleep(1)
                    s0, c0, t0 = m.status(), cpu_seconds(m.agent.pid), time.monotonic()
                    time.sleep(seconds)
                    s1, c1, t1 = m.status(), cpu_seconds(m.agent.pid), time.monotonic()
                    m.agent.stop()
                    frames = s1["frames_sampled"] - s0["frames_sampled"]
                    missed = s1["missed_ticks"] - s0["missed_ticks"]
                    row = {"rep": rep, "rate_hz": rate, "procfs": procfs, "achieved_hz": frames / (t1 - t0),
                           "missed_pct": 100.0 * missed / max(1, frames + missed), "cpu": (c1 - c0) / (t1 - t0)}
                    print(f"{rep:>3} {rate:>7} {str(procfs):>6} {row['achieved_hz']:>9.1f} "
                          f"{row['missed_pct']:>8.1f} {row['cpu']:>6.3f}", flush=True)
                    print(json.dumps(row), file=sys.stderr)
    finally:
        end_all()
    return 0


if __name__ == "__main__":
    sys.exit(main(float(sys.argv[1]) if len(sys.argv) > 1 else 15.0, int(sys.argv[2]) if len(sys.argv) > 2 else 2))
