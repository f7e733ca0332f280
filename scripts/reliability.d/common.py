"""Shared plumbing of scripts/reliability: agent processes on loopback with
temporary configurations, their memory from /proc, an echo backend, the
relay's link-side protocol (pre-shared key, hello, frames), HTTP scrapes and
the monitor's API. Standard library only. Every wait is bounded."""

import hashlib
import hmac
import json
import os
import random
import signal
import socket
import struct
import subprocess
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("HWQOS_BIN_DIR", ROOT / "target" / "debug"))
LOOPBACK = "127.0.0.1"

# Every process this driver started, so that it can end them (by pid) at exit.
_STARTED = []
_STARTED_LOCK = threading.Lock()


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def wait_until(cond, timeout, step=0.05):
    """Polls `cond` until it is true or `timeout` seconds passed; its truth."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if cond():
                return True
        except Exception:  # a condition that cannot be evaluated yet is false
            pass
        if time.monotonic() >= deadline:
            return False
        time.sleep(step)


def free_port():
    s = socket.socket()
    s.bind((LOOPBACK, 0))
    port = s.getsockname()[1]
    s.close()
    return port


def proc_status(pid):
    """VmRSS and VmHWM of a process in MiB (None when it is gone)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    out = {}
    for line in text.splitlines():
        if line.startswith(("VmRSS:", "VmHWM:", "RssAnon:")):
            k, v = line.split(":", 1)
            out[k] = int(v.split()[0]) / 1024.0
    return out


def rss(pid):
    st = proc_status(pid)
    return st["VmRSS"] if st else None


def rss_anon(pid):
    """Anonymous resident memory (heap, stacks): what a leak grows. VmRSS also
    counts file-backed pages (the binary's text), which the kernel drops and
    reloads under memory pressure from other processes."""
    st = proc_status(pid)
    return st["RssAnon"] if st else None


def hwm(pid):
    st = proc_status(pid)
    return st["VmHWM"] if st else None


def proc_state(pid):
    try:
        s = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return s[s.rfind(")") + 2]


def stat_field(pid, n):
    try:
        s = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return s[s.rfind(")") + 2:].split()[n]


def minor_faults(pid):
    v = stat_field(pid, 7)
    return int(v) if v else 0


def children(pid):
    out = []
    for e in os.listdir("/proc"):
        if e.isdigit() and stat_field(int(e), 1) == str(pid):
            out.append(int(e))
    return out


def cmdline(pid):
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


class Agent:
    """One agent process with its log file (stdout and stderr)."""

    def __init__(self, name, argv, logdir, nice=0):
        self.name = name
        self.argv = [str(a) for a in argv]
        self.logpath = Path(logdir) / f"{name}.log"
        self.nice = nice
        self.p = None
        self.start()

    def start(self):
        f = open(self.logpath, "ab")
        pre = (lambda: os.nice(self.nice)) if self.nice else None
        self.p = subprocess.Popen(self.argv, stdout=f, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, preexec_fn=pre)
        f.close()
        with _STARTED_LOCK:
            _STARTED.append(self.p)
        return self

    @property
    def pid(self):
        return self.p.pid

    def alive(self):
        return self.p is not None and self.p.poll() is None

    def kill9(self):
        if self.alive():
            os.kill(self.p.pid, signal.SIGKILL)
        try:
            self.p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def stop(self, timeout=10):
        if not self.alive():
            return self.p.returncode
        os.kill(self.p.pid, signal.SIGTERM)
        try:
            return self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill9()
            return None

    def log_text(self):
        try:
            return self.logpath.read_text(errors="replace")
        except OSError:
            return ""

    def rss(self):
        return rss(self.p.pid) if self.alive() else None

    def hwm(self):
        return hwm(self.p.pid) if self.alive() else None


def on_signals():
    """SIGTERM/SIGINT end this driver's agents, then the driver (exit 143)."""
    def handler(signum, _frame):
        end_all()
        os._exit(128 + signum)
    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def end_all():
    """Ends every process this driver started that still runs (by pid)."""
    with _STARTED_LOCK:
        procs = list(_STARTED)
    for p in procs:
        if p.poll() is None:
            try:
                p.terminate()
            except OSError:
                pass
    deadline = time.monotonic() + 5
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            try:
                p.kill()
                p.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                pass


def run(argv, timeout=30, stdin=None, limit_as=None, peak=None):
    """Runs a command to completion (SIGKILLed after `timeout` s; address
    space capped at `limit_as` bytes); (exit code or "timeout", its output).
    `peak`, a list, gets the command's peak RSS in MiB (from wait4)."""
    import tempfile as _tf

    def cap():
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (limit_as, limit_as))

    with _tf.TemporaryFile() as out:
        p = subprocess.Popen([str(a) for a in argv], stdout=out, stderr=subprocess.STDOUT,
                             stdin=stdin if stdin is not None else subprocess.DEVNULL,
                             preexec_fn=cap if limit_as else None)
        timed_out = []

        def kill():
            timed_out.append(True)
            try:
                os.kill(p.pid, signal.SIGKILL)
            except OSError:
                pass

        timer = threading.Timer(timeout, kill)
        timer.start()
        try:
            _, status, usage = os.wait4(p.pid, 0)
        finally:
            timer.cancel()
        p.returncode = os.waitstatus_to_exitcode(status)
        if peak is not None:
            peak.append(usage.ru_maxrss / 1024.0)
        out.seek(0)
        text = out.read().decode(errors="replace")
    return ("timeout" if timed_out else p.returncode), text


# ---------------------------------------------------------------- TOML

def toml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    return json.dumps(str(v))


def write_toml(path, top, tables=None):
    """`top`: key → value; `tables`: [(header, {key: value})] in order
    (a header like "[[target]]" repeats)."""
    lines = [f"{k} = {toml_value(v)}" for k, v in top.items()]
    for header, kv in tables or []:
        lines.append("")
        lines.append(header)
        lines += [f"{k} = {toml_value(v)}" for k, v in kv.items()]
    Path(path).write_text("\n".join(lines) + "\n")
    return path


# ---------------------------------------------------------------- HTTP

def http_get(port, path="/metrics", timeout=20.0):
    """(status code or None, body) of one GET on loopback."""
    try:
        s = socket.create_connection((LOOPBACK, port), timeout=timeout)
    except OSError as e:
        return None, str(e)
    try:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n".encode())
        chunks = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            b = s.recv(65536)
            if not b:
                break
            chunks.append(b)
        data = b"".join(chunks)
    except OSError as e:
        return None, str(e)
    finally:
        s.close()
    head, _, body = data.partition(b"\r\n\r\n")
    try:
        code = int(head.split(b" ", 2)[1])
    except (IndexError, ValueError):
        return None, data[:200].decode(errors="replace")
    if b"transfer-encoding: chunked" in head.lower():
        body = dechunk(body)
    return code, body.decode(errors="replace")


def dechunk(b):
    out = bytearray()
    while b:
        line, _, rest = b.partition(b"\r\n")
        try:
            n = int(line.split(b";")[0], 16)
        except ValueError:
            break
        if n == 0:
            break
        out += rest[:n]
        b = rest[n + 2:]
    return bytes(out)


def metric(text, name, labels=None):
    """The value of `name` (with `labels` contained in its label set)."""
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        if line.startswith(name + " ") or line.startswith(name + "{"):
            if labels and labels not in line:
                continue
            try:
                return float(line.rsplit(" ", 1)[1])
            except ValueError:
                return None
    return None


# ---------------------------------------------------------------- echo backend

class Backend:
    """An echo server on loopback that counts its connections and the bytes
    it received; tolerates resets."""

    def __init__(self):
        self.sock = socket.create_server((LOOPBACK, 0), backlog=1024)
        self.port = self.sock.getsockname()[1]
        self.lock = threading.Lock()
        self.open = 0
        self.max_open = 0
        self.accepted = 0
        self.bytes_in = 0
        self.stopping = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.stopping:
            try:
                c, _ = self.sock.accept()
            except OSError:
                if self.stopping:
                    return
                continue
            with self.lock:
                self.open += 1
                self.accepted += 1
                self.max_open = max(self.max_open, self.open)
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c):
        try:
            c.settimeout(600)
            while True:
                b = c.recv(65536)
                if not b:
                    c.shutdown(socket.SHUT_WR)
                    break
                with self.lock:
                    self.bytes_in += len(b)
                c.sendall(b)
        except OSError:
            pass
        finally:
            c.close()
            with self.lock:
                self.open -= 1

    def snapshot(self):
        with self.lock:
            return {"open": self.open, "accepted": self.accepted, "bytes_in": self.bytes_in,
                    "max_open": self.max_open}

    def reset_max(self):
        with self.lock:
            self.max_open = self.open


def payload(n, seed):
    """Half incompressible, half text-like bytes (codecs have work to do)."""
    rnd = random.Random(seed)
    words = [b"frame", b"counter", b"sample", b"node", b"relay", b"0123456789", b"\n"]
    out = bytearray()
    while len(out) < n:
        if rnd.random() < 0.5:
            out += rnd.randbytes(4096)
        else:
            out += b" ".join(rnd.choice(words) for _ in range(700))
    return bytes(out[:n])


def transfer(port, n, seed=1, timeout=60.0):
    """One connection through the relay pair: `n` bytes written while the
    echo is read back, then a half-close. (ok, detail)."""
    data = payload(n, seed)
    try:
        s = socket.create_connection((LOOPBACK, port), timeout=timeout)
    except OSError as e:
        return False, f"connect: {e}"
    err = []

    def writer():
        try:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
        except OSError as e:
            err.append(e)

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    got = bytearray()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            b = s.recv(1 << 16)
            if not b:
                break
            got += b
    except OSError as e:
        err.append(e)
    finally:
        t.join(timeout=5)
        s.close()
    if err:
        return False, f"{err[0]} after {len(got)} of {n} bytes"
    if len(got) != n:
        return False, f"echo of {len(got)} bytes for {n}"
    if hashlib.sha256(got).digest() != hashlib.sha256(data).digest():
        return False, "echo differs"
    return True, f"{n} B byte for byte"


# ---------------------------------------------------------------- relay link side

PSK_MAGIC = b"hwqos-relay-psk1"
CODECS = {1: "lz4", 2: "snappy", 3: "zstd-1", 4: "zstd-3", 5: "zstd-9", 6: "lzma-0",
          7: "lzma-6", 8: "bzip2-1", 9: "bzip2-9", 10: "deflate"}


def make_key(path):
    import base64
    Path(path).write_bytes(base64.b64encode(os.urandom(32)) + b"\n")
    os.chmod(path, 0o600)
    return Path(path).read_bytes().strip()


def frame(kind, codec, body, ulen=None, flags=0, version=2):
    return struct.pack("<2sBBBBII", b"HQ", version, kind, codec, flags,
                       len(body) if ulen is None else ulen, len(body)) + body


def hello_body(max_message=1 << 20, codecs=range(11)):
    ids = bytes(codecs)
    return struct.pack("<IBB", max_message, 0, len(ids)) + ids


def recv_exact(s, n):
    buf = bytearray()
    while len(buf) < n:
        b = s.recv(n - len(buf))
        if not b:
            raise ConnectionError(f"closed after {len(buf)} of {n} bytes")
        buf += b
    return bytes(buf)


def psk_handshake(s, key):
    nonce_c = os.urandom(32)
    s.sendall(PSK_MAGIC + nonce_c)
    peer = recv_exact(s, 48)
    if peer[:16] != PSK_MAGIC:
        raise ConnectionError("no psk greeting")
    nonce_a = peer[16:]
    s.sendall(hmac.new(key, b"hwqos-relay psk1 connector" + nonce_c + nonce_a, hashlib.sha256).digest())
    tag = recv_exact(s, 32)
    want = hmac.new(key, b"hwqos-relay psk1 acceptor" + nonce_c + nonce_a, hashlib.sha256).digest()
    if not hmac.compare_digest(tag, want):
        raise ConnectionError("acceptor's tag does not match")


class LinkPeer:
    """A rogue peer relay on the link side: key, hello, then whatever frames
    the attack sends. A thread drains what the relay sends back and notes
    when the relay closed the connection."""

    def __init__(self, port, key=None, hello=True, timeout=5.0):
        self.s = socket.create_connection((LOOPBACK, port), timeout=timeout)
        self.closed = threading.Event()
        self.received = 0
        if key is not None:
            psk_handshake(self.s, key)
        if hello:
            self.s.sendall(frame(1, 0, hello_body()))
            head = recv_exact(self.s, 14)
            plen = struct.unpack("<I", head[10:14])[0]
            recv_exact(self.s, plen)
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self):
        self.s.settimeout(None)
        try:
            while True:
                b = self.s.recv(1 << 16)
                if not b:
                    break
                self.received += len(b)
        except OSError:
            pass
        self.closed.set()

    def send(self, b, timeout=2.0):
        """True when sent; False when the relay stopped reading (timeout) or closed."""
        self.s.settimeout(timeout)
        try:
            self.s.sendall(b)
            return True
        except OSError:
            return False

    def close(self):
        try:
            self.s.close()
        except OSError:
            pass


# ---------------------------------------------------------------- bombs

def _lz4_zeros(n):
    """LZ4 block of `n` zero bytes: one literal, one match at offset 1, five
    closing literals (the format's rule)."""
    mlen = n - 6
    extra = mlen - 4
    out = bytearray([0x10 | min(extra, 15), 0, 1, 0])
    if extra >= 15:
        rest = extra - 15
        out += b"\xff" * (rest // 255) + bytes([rest % 255])
    out += bytes([0x50]) + b"\0" * 5
    return bytes(out)


def _varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _snappy_zeros(n, declared=None):
    out = bytearray(_varint(n if declared is None else declared))
    out += b"\x00\x00"  # literal of one zero byte
    left = n - 1
    while left > 0:
        k = min(64, left)
        out += bytes([((k - 1) << 2) | 2, 1, 0])
        left -= k
    return bytes(out)


def _zstd_zeros(n, fcs=None):
    out = bytearray(b"\x28\xb5\x2f\xfd")
    out += bytes([0xA0]) + struct.pack("<I", n if fcs is None else fcs)  # single segment, 4-byte FCS
    left = n
    while left > 0:
        k = min(1 << 17, left)
        last = 1 if k == left else 0
        h = (k << 3) | (1 << 1) | last  # RLE block
        out += struct.pack("<I", h)[:3] + b"\0"
        left -= k
    return bytes(out)


def bomb(codec, n, declared=None):
    """A payload of codec `codec` that decompresses to `n` zero bytes (for
    snappy and zstd, `declared` is the length the codec's own header claims)."""
    import bz2
    import lzma
    import zlib
    if codec == 1:
        return _lz4_zeros(n)
    if codec == 2:
        return _snappy_zeros(n, declared)
    if codec in (3, 4, 5):
        return _zstd_zeros(n, declared)
    zeros = bytes(n)
    if codec in (6, 7):
        return lzma.compress(zeros, format=lzma.FORMAT_RAW, filters=[
            {"id": lzma.FILTER_LZMA2, "preset": 0 if codec == 6 else 6, "dict_size": 1 << 20}])
    if codec in (8, 9):
        return bz2.compress(zeros, 1 if codec == 8 else 9)
    if codec == 10:
        c = zlib.compressobj(6, zlib.DEFLATED, -15)
        return c.compress(zeros) + c.flush()
    raise ValueError(codec)


# ---------------------------------------------------------------- monitor API

class Api:
    """A client of the monitor's JSON-lines API on its Unix socket."""

    def __init__(self, path, timeout=10.0):
        self.s = socket.socket(socket.AF_UNIX)
        self.s.settimeout(timeout)
        self.s.connect(str(path))
        self.f = self.s.makefile("rb")
        self.hello = json.loads(self.f.readline())

    def request(self, obj):
        self.s.sendall((json.dumps(obj) + "\n").encode())
        return json.loads(self.f.readline())

    def close(self):
        try:
            self.f.close()
            self.s.close()
        except OSError:
            pass


def api_status(path, timeout=10.0):
    a = Api(path, timeout)
    try:
        return a.request({"op": "status"})
    finally:
        a.close()


# ---------------------------------------------------------------- agent set-ups

class RelayPair:
    """backend ← far relay (decompress, keyed link side) ← near relay
    (compress, plain side) ← clients; all on loopback."""

    def __init__(self, work, backend, near_extra=None, far_extra=None, nice=0):
        self.work = Path(work)
        self.backend = backend
        self.keyfile = self.work / "relay.key"
        self.key = make_key(self.keyfile)
        self.far_port, self.near_port = free_port(), free_port()
        self.far_metrics, self.near_metrics = free_port(), free_port()
        common = {"psk_file": str(self.keyfile), "drain_timeout_ms": 200,
                  "handshake_timeout_ms": 1000, "idle_timeout_ms": 5000, "max_connections": 64}
        far = {"mode": "decompress", "listen": f"{LOOPBACK}:{self.far_port}",
               "connect": f"{LOOPBACK}:{backend.port}", **common,
               "peer_expansion_bytes_per_s": 1 << 20, **(far_extra or {})}
        near = {"mode": "compress", "listen": f"{LOOPBACK}:{self.near_port}",
                "connect": f"{LOOPBACK}:{self.far_port}", **common, **(near_extra or {})}
        self.far_cfg = write_toml(self.work / "far.toml", far,
                                  [("[metrics]", {"listen": f"{LOOPBACK}:{self.far_metrics}"})])
        self.near_cfg = write_toml(self.work / "near.toml", near,
                                   [("[metrics]", {"listen": f"{LOOPBACK}:{self.near_metrics}"})])
        self.far = Agent("relay-far", [BIN / "hwqos-relay", "--config", self.far_cfg], self.work, nice)
        self.near = Agent("relay-near", [BIN / "hwqos-relay", "--config", self.near_cfg], self.work, nice)
        self.wait_ready()

    def wait_ready(self, timeout=30):
        ok = wait_until(lambda: http_get(self.far_metrics, timeout=2)[0] == 200
                        and http_get(self.near_metrics, timeout=2)[0] == 200, timeout, 0.1)
        if not ok:
            raise RuntimeError("relays did not start: " + self.far.log_text()[-500:] + self.near.log_text()[-500:])

    def restart_dead(self):
        for a in (self.far, self.near):
            if not a.alive():
                a.start()
        self.wait_ready()

    def gauges(self):
        out = []
        for port in (self.near_metrics, self.far_metrics):
            code, body = http_get(port, timeout=5)
            out.append(metric(body, "hwqos_relay_connections") if code == 200 else None)
        return out


MONITOR_EVENTS = [["sw.task_clock", "sw.page_faults", "sw.context_switches", "sw.cpu_migrations"]]
CHURN_MARK = "hwqos-rel-churn"


class Monitor:
    def __init__(self, work, rate_hz=200, frames=3000, max_mib=64, window_timeout_s=20.0,
                 nice=0, extra_api=None, procfs=True):
        self.work = Path(work)
        self.out = self.work / "monitor-out"
        self.socket = self.work / "monitor.sock"
        self.metrics_port = free_port()
        self.frames = frames
        self.cfg = write_toml(self.work / "monitor.toml", {
            "rate_hz": rate_hz, "per_cpu": True, "event_sets": MONITOR_EVENTS,
            "procfs": procfs, "rescan_every": 10,
        }, [
            ("[[target]]", {"select": f"regex:{CHURN_MARK}"}),
            ("[database]", {"frames": frames, "max_mib": max_mib}),
            ("[output]", {"dir": str(self.out), "formats": ["jsonl", "csv"], "flush_on_exit": False}),
            ("[api]", {"enabled": True, "socket": str(self.socket), "max_windows": 4,
                       "window_timeout_s": window_timeout_s, **(extra_api or {})}),
            ("[metrics]", {"enabled": True, "listen": f"{LOOPBACK}:{self.metrics_port}"}),
        ])
        self.agent = Agent("monitor", [BIN / "hwqos-monitor", "--config", self.cfg], self.work, nice)
        self.wait_ready()

    def wait_ready(self, timeout=30):
        if not wait_until(lambda: api_status(self.socket, 2)["type"] == "status", timeout, 0.1):
            raise RuntimeError("monitor did not start: " + self.agent.log_text()[-800:])

    def restart(self):
        if not self.agent.alive():
            self.agent.start()
        self.wait_ready()

    def status(self, timeout=10):
        return api_status(self.socket, timeout)


class Sra:
    """A faulting leech held to `quota` page faults per `period_us` by
    `hwqos-sra apply` (direct route, SIGSTOP), with its guardian."""

    def __init__(self, work, quota=20, period_us=200000, nice=0):
        self.work = Path(work)
        self.victim = Agent("sra-victim", [BIN / "hwqos-sra", "leech", "faults", "--working-set", "1048576"],
                            self.work)
        if not wait_until(lambda: minor_faults(self.victim.pid) > 1000, 20):
            raise RuntimeError("the leech does not fault")
        self.contract = self.work / "contract.json"
        self.contract.write_text(json.dumps({"schema": "hwqos.contract/1", "entries": [{
            "name": "victim", "process": f"pid:{self.victim.pid}", "period_us": period_us,
            "quotas": {"sw.page_faults": quota}}]}))
        self.metrics_port = free_port()
        self.agent = Agent("sra", [BIN / "hwqos-sra", "apply", self.contract, "--state-dir",
                                   self.work / "sra-state", "--metrics-listen",
                                   f"{LOOPBACK}:{self.metrics_port}"], self.work, nice)
        self.wait_ready()

    def guardians(self):
        return [c for c in children(self.agent.pid) if "__guardian" in cmdline(c)]

    def wait_ready(self, timeout=30):
        if not wait_until(lambda: len(self.guardians()) == 1 and proc_state(self.victim.pid) == "T", timeout, 0.01):
            raise RuntimeError("sra did not throttle: " + self.agent.log_text()[-800:])

    def restart(self):
        if not self.agent.alive():
            self.agent.start()
        self.wait_ready()


class Loadgen:
    def __init__(self, work, knob="cpu_util@0=0.1", nice=0):
        self.work = Path(work)
        self.io = self.work / "loadgen-io"
        self.io.mkdir(exist_ok=True)
        self.cfg = write_toml(self.work / "loadgen.toml", {}, [
            ("[io]", {"dir": str(self.io)}),
            ("[metrics]", {"enabled": False, "listen": f"{LOOPBACK}:0"}),
        ])
        self.agent = Agent("loadgen", [BIN / "hwqos-loadgen", "--config", self.cfg, "generate", "--knob", knob],
                           self.work, nice)

    def restart(self):
        if not self.agent.alive():
            self.agent.start()
