"""Which windows of a monitor recording are full observations of a scope:
the rule of `hwqos_sched::predict::full_windows` (docs/sra.md, Prediction),
written again here so that predict.sh and predict_pmu_guest.sh check
`hwqos-sra predict` against an independent implementation.

1. The nominal interval is the median of the frames' positive interval_ns;
   a frame off it by more than 10 % is not a full observation (any scope).
2. The scope's counter samples (with a `counter` reading) ran in a window
   when their time_enabled > 0. If any frame follows the last window in
   which they ran, the process exited in that window: it and every later
   frame are left out.
"""
import json


def frames(path):
    """The frames of a JSON-lines recording (the header line skipped)."""
    with open(path) as f:
        return [json.loads(l) for i, l in enumerate(f) if i > 0 and l.strip()]


def scope_text(scope):
    kind = scope.get("kind")
    return f"pid:{scope['pid']}" if kind == "process" else kind


def full(frames_, scope):
    """One bool per frame: True where the frame is a full observation of scope."""
    ivs = sorted(f["interval_ns"] for f in frames_ if f["interval_ns"] > 0)
    nominal = ivs[len(ivs) // 2] if ivs else 0
    last_ran = None
    for i, f in enumerate(frames_):
        if any(s.get("counter") and s["counter"]["time_enabled"] > 0 and scope_text(s["scope"]) == scope
               for s in f["samples"]):
            last_ran = i
    exit_at = last_ran if last_ran is not None and last_ran + 1 < len(frames_) else None
    out = []
    for i, f in enumerate(frames_):
        if exit_at is not None and i >= exit_at:
            out.append(False)
        else:
            out.append(not (nominal and abs(f["interval_ns"] - nominal) > 0.1 * nominal))
    return out


def values(frames_, scope, metric, full_only=True):
    """metric's values of scope, in its full windows (every window when not full_only)."""
    keep = full(frames_, scope) if full_only else [True] * len(frames_)
    return [s["value"] for f, k in zip(frames_, keep) if k for s in f["samples"]
            if s["metric"] == metric and scope_text(s["scope"]) == scope]


def main_scope(frames_, metric):
    """The process scope with the most samples of metric."""
    counts = {}
    for f in frames_:
        for s in f["samples"]:
            if s["metric"] == metric and s["scope"].get("kind") == "process":
                k = scope_text(s["scope"])
                counts[k] = counts.get(k, 0) + 1
    return max(counts, key=counts.get) if counts else None
