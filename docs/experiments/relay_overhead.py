#!/usr/bin/env python3
"""Issue 22, item 6: the adaptive relay's own cost on a fast link.

An application writes 16 KiB messages through a compress/decompress relay
pair on loopback to an echo server and reads each back (the criterion bench
`compress_relay`'s set-up, as separate processes so each relay's CPU time
can be read). Policies run interleaved, in turn within each repetition, the
order rotated every repetition; per policy and repetition:

- relay CPU per round trip: both relays' CPU time (all threads, the
  scheduler's run time from /proc/PID/task/*/schedstat) over the measured
  round trips, in microseconds;
- wall time per round trip (includes this Python client, the same for all);
- from each relay's /metrics: messages per codec, samples, the samples' CPU
  time, probes — the adaptive policy's own work, counted by the relay.

Prints one line per run and a table of medians with each policy's ratio
to the first (paired per repetition: min, median, max). Needs the release
relay (cargo build --release -p hwqos-relay); no root needed.

  docs/experiments/relay_overhead.py [--reps 9] [--round-trips 20000]
      [--policies one:none,adaptive] [--relay target/release/hwqos-relay]
      [--json FILE]
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

MESSAGE = 16 * 1024


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def echo_server(port):
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", port))
    srv.listen(16)

    def serve(conn):
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with conn:
            while True:
                data = conn.recv(1 << 16)
                if not data:
                    return
                conn.sendall(data)

    def accept():
        while True:
            conn, _ = srv.accept()
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()


def cpu_ns(pid):
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass
    return total


def scrape(port):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out = {"messages": {}}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name, value = line.rsplit(" ", 1)
        if name.startswith("hwqos_relay_messages{"):
            codec = name.split('codec="')[1].split('"')[0]
            out["messages"][codec] = int(float(value))
        for key in ("samples", "sample_seconds", "probes"):
            if name == f"hwqos_relay_{key}":
                out[key] = float(value)
    return out


def start_relay(binary, workdir, name, mode, listen, connect, policy, metrics_port):
    path = os.path.join(workdir, f"{name}.toml")
    with open(path, "w") as f:
        f.write(
            f'mode = "{mode}"\nlisten = "127.0.0.1:{listen}"\nconnect = "127.0.0.1:{connect}"\n'
            f'policy = "{policy}"\ncpu_target = 0.0\ndrain_timeout_ms = 100\n'
            f'[metrics]\nlisten = "127.0.0.1:{metrics_port}"\n'
        )
    log = open(os.path.join(workdir, f"{name}.log"), "w")
    return subprocess.Popen([binary, "--config", path], stdout=log, stderr=log)


def wait_port(port, proc):
    for _ in range(200):
        if proc.poll() is not None:
            sys.exit(f"relay exited with {proc.returncode} before listening on {port}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
            return
        except OSError:
            time.sleep(0.02)
    sys.exit(f"relay did not listen on {port}")


def round_trips(port, n, payload):
    c = socket.create_connection(("127.0.0.1", port))
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf = bytearray(MESSAGE)
    view = memoryview(buf)
    for _ in range(n):
        c.sendall(payload)
        got = 0
        while got < MESSAGE:
            k = c.recv_into(view[got:])
            if k == 0:
                sys.exit("relay closed the connection")
            got += k
    if bytes(buf) != payload:
        sys.exit("echo differs from what was sent")
    return c


def one_run(binary, policy, n, warm, payload):
    with tempfile.TemporaryDirectory() as workdir:
        echo, far_port, near_port, far_m, near_m = (free_port() for _ in range(5))
        echo_server(echo)
        far = start_relay(binary, workdir, "far", "decompress", far_port, echo, policy, far_m)
        near = start_relay(binary, workdir, "near", "compress", near_port, far_port, policy, near_m)
        try:
            wait_port(far_port, far)
            wait_port(near_port, near)
            # Warm-up on the same connection: the adaptive policy learns
            # during its first rounds; the figure is its steady state.
            conn = round_trips(near_port, warm, payload)
            cpu0 = cpu_ns(near.pid) + cpu_ns(far.pid)
            m0 = [scrape(near_m), scrape(far_m)]
            t0 = time.perf_counter_ns()
            buf = bytearray(MESSAGE)
            view = memoryview(buf)
            for _ in range(n):
                conn.sendall(payload)
                got = 0
                while got < MESSAGE:
                    got += conn.recv_into(view[got:])
            wall = time.perf_counter_ns() - t0
            cpu = cpu_ns(near.pid) + cpu_ns(far.pid) - cpu0
            m1 = [scrape(near_m), scrape(far_m)]
            conn.close()
        finally:
            for p in (near, far):
                p.terminate()
            for p in (near, far):
                p.wait(timeout=10)

    def delta(key):
        return sum(b.get(key, 0.0) - a.get(key, 0.0) for a, b in zip(m0, m1))

    codecs = {}
    for a, b in zip(m0, m1):
        for codec, count in b["messages"].items():
            codecs[codec] = codecs.get(codec, 0) + count - a["messages"].get(codec, 0)
    return {
        "policy": policy,
        "round_trips": n,
        "cpu_us_per_rt": cpu / 1e3 / n,
        "wall_us_per_rt": wall / 1e3 / n,
        "samples": delta("samples"),
        "sample_us_per_rt": delta("sample_seconds") * 1e6 / n,
        "probes": delta("probes"),
        "messages": codecs,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--round-trips", type=int, default=20000)
    ap.add_argument("--warm-up", type=int, default=3000)
    ap.add_argument("--policies", default="one:none,adaptive")
    ap.add_argument("--relay", default="target/release/hwqos-relay")
    ap.add_argument("--json")
    args = ap.parse_args()
    policies = args.policies.split(",")
    if not os.access(args.relay, os.X_OK):
        sys.exit(f"{args.relay}: not executable (cargo build --release -p hwqos-relay)")
    # The criterion bench's message: realistic text, 16 KiB.
    with open("/usr/share/common-licenses/GPL-3", "rb") as f:
        text = f.read()
    payload = (text * (MESSAGE // len(text) + 1))[:MESSAGE]
    runs = []
    for rep in range(args.reps):
        order = policies[rep % len(policies):] + policies[: rep % len(policies)]
        for policy in order:
            r = one_run(args.relay, policy, args.round_trips, args.warm_up, payload)
            r["rep"] = rep
            runs.append(r)
            print(
                f"rep {rep} {policy:12} cpu {r['cpu_us_per_rt']:7.2f} us/rt  wall {r['wall_us_per_rt']:7.2f} us/rt"
                f"  samples {r['samples']:.0f} ({r['sample_us_per_rt']:.3f} us/rt)  probes {r['probes']:.0f}"
                f"  messages {r['messages']}",
                flush=True,
            )
    base = policies[0]
    print()
    print(f"| policy | relay CPU per round trip, µs (median) | ÷ {base}: median [min–max] | wall per round trip, µs | ÷ {base} | samples' CPU per round trip, µs | probes per 1,000 messages |")
    print("|---|---:|---|---:|---|---:|---:|")
    for policy in policies:
        mine = [r for r in runs if r["policy"] == policy]
        cpu_ratios, wall_ratios = [], []
        for r in mine:
            b = next(x for x in runs if x["policy"] == base and x["rep"] == r["rep"])
            cpu_ratios.append(r["cpu_us_per_rt"] / b["cpu_us_per_rt"])
            wall_ratios.append(r["wall_us_per_rt"] / b["wall_us_per_rt"])

        def spread(v):
            return f"{statistics.median(v):.4f} [{min(v):.4f}–{max(v):.4f}]"

        msgs = statistics.median(2 * r["round_trips"] for r in mine)
        print(
            f"| `{policy}` | {statistics.median(r['cpu_us_per_rt'] for r in mine):.2f} | {spread(cpu_ratios)} "
            f"| {statistics.median(r['wall_us_per_rt'] for r in mine):.2f} | {spread(wall_ratios)} "
            f"| {statistics.median(r['sample_us_per_rt'] for r in mine):.3f} "
            f"| {statistics.median(r['probes'] for r in mine) * 1000 / msgs:.2f} |"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "runs": runs}, f, indent=1)


if __name__ == "__main__":
    main()
