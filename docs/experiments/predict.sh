#!/usr/bin/env bash
# Performance prediction for a change (issue 20, item 3; thesis 6.4.4),
# on this machine's software events (no PMU here). See predict.md.
#
# The victim: a paced request loop (docs/experiments/predict_victim.py,
# a request of fixed CPU work every 20 ms) whose x is its mean request
# latency per 100 ms (app.latency_us, via hwqos-monitor's tail_file source);
# its resources are the software events hwqos-monitor counts for it.
# Everything runs on CPU 1.
#
#   production  victim + the production tenant: a CPU leech whose duty
#               steps through 0..0.8 (PROD_DUTIES, STEP_S seconds each)
#   change      a new tenant on the victim's CPU: a second CPU leech at
#               duty NEW_DUTY
#   bare base   victim alone                        (naive estimate: bare
#   bare test   victim + the new tenant              test / bare base - 1)
#   test        victim + the new tenant + production load replayed from a
#               load model: the same duties in another order (TEST_DUTIES;
#               the model keeps the distribution, not the trace): r' for
#               the prediction
#   actual      victim + the new tenant + the production tenant's schedule:
#               the change made real
#
# hwqos-sra predict fits x = a + b r-hat in production, takes r-hat's mean in
# the test run and checks the prediction against the actual run.
# Needs root (monitor). Writes docs/experiments/results/predict.{txt,json,svg}.
# Usage: docs/experiments/predict.sh        (about 3 minutes)
#        REPORT=/tmp/predict.XXXXXX OUT=DIR docs/experiments/predict.sh
#        (no runs: the prediction and the report again on the recordings a
#        run kept, written to OUT; no root needed)
# Every mean (x per run, r') is over the windows that are full observations
# of the victim (predict_windows.py, the rule of hwqos-sra predict): not the
# window the victim exited in, nor the zeros after it, nor off-interval ticks.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
PROD_DUTIES=${PROD_DUTIES:-"0 0.4 0.8 0.2 0.6 0.1 0.5 0.3 0.7 0"}
STEP_S=${STEP_S:-4}
TEST_DUTIES=${TEST_DUTIES:-"0.7 0.1 0.5 0 0.8 0.3 0 0.6 0.2 0.4"}
NEW_DUTY=${NEW_DUTY:-0.2}
BARE_S=${BARE_S:-20}
PERIOD_MS=${PERIOD_MS:-20}
ITERS=${ITERS:-40000}
CPU=${CPU:-1}
BIN=${BIN:-}
if [ -z "$BIN" ]; then
    cargo build --release -q -p hwqos-sra -p hwqos-monitor
    BIN=$root/target/release
fi
OUT=${OUT:-docs/experiments/results}
mkdir -p "$OUT"
REPORT=${REPORT:-}
if [ -n "$REPORT" ]; then TMP=$REPORT; else TMP=$(mktemp -d /tmp/predict.XXXXXX); fi
pids=()
CG=/sys/fs/cgroup/cpu/hwqos-predict
shares="none (no cgroup: other work on the node counts)"
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    if [ -d "$CG" ]; then echo $$ > /sys/fs/cgroup/cpu/cgroup.procs; rmdir "$CG" 2>/dev/null || true; fi
}
trap cleanup EXIT
# As gate_under_load.sh: on a shared machine, a heavy cpu cgroup keeps other
# sessions' builds from being the co-runner.
if [ -z "$REPORT" ] && [ "$(id -u)" = 0 ] && [ -w /sys/fs/cgroup/cpu/cgroup.procs ]; then
    mkdir -p "$CG"
    echo 262144 > "$CG/cpu.shares"
    echo $$ > "$CG/cgroup.procs"
    shares="cgroup $CG, cpu.shares $(cat "$CG/cpu.shares")"
fi
nsteps=$(wc -w <<< "$PROD_DUTIES")
PROD_S=$((nsteps * STEP_S))
MEAN_DUTY=$(python3 -c "import sys; d=[float(x) for x in sys.argv[1:]]; print(round(sum(d)/len(d), 3))" $PROD_DUTIES)

leech() { # duty seconds
    "$BIN/hwqos-sra" leech cpu --cpu "$CPU" --duty "$1" --duration-s "$2" > /dev/null 2>&1
}
schedule() { for d in ${1:-$PROD_DUTIES}; do leech "$d" "$STEP_S"; done; }

# run NAME SECONDS [co-runner commands...]: the victim under hwqos-monitor
# for SECONDS, with each co-runner (a shell function call) in the background.
run() {
    local name=$1 secs=$2; shift 2
    local d=$TMP/$name
    mkdir -p "$d/out"
    taskset -c "$CPU" python3 docs/experiments/predict_victim.py "$d/lat.log" "$secs" "$PERIOD_MS" "$ITERS" &
    local v=$!; pids+=("$v")
    cat > "$d/monitor.toml" <<T
rate_hz = 10
per_cpu = false
procfs = false
event_sets = [["sw.context_switches", "sw.task_clock", "sw.cpu_migrations", "sw.page_faults"]]
[[target]]
select = "pid:$v"
[output]
dir = "$d/out"
formats = ["jsonl"]
[api]
enabled = false
[metrics]
enabled = false
[[app]]
type = "tail_file"
path = "$d/lat.log"
metric = "app.latency_us"
scope = "pid:$v"
T
    "$BIN/hwqos-monitor" --config "$d/monitor.toml" 2> "$d/monitor.log" &
    local m=$!; pids+=("$m")
    local co=()
    for c in "$@"; do eval "$c" & co+=("$!"); pids+=("$!"); done
    wait "$v"
    for c in "${co[@]}"; do kill "$c" 2>/dev/null || true; wait "$c" 2>/dev/null || true; done
    sleep 0.3
    kill -TERM "$m"; wait "$m" || true
    ln -sf "$(ls "$d"/out/*.jsonl | head -1)" "$TMP/$name.jsonl"
    echo "$name: $(grep -c . "$d/lat.log") x values" >&2
}

if [ -z "$REPORT" ]; then
{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) CPUs, kernel $(uname -r)"
    echo "counters: software events only (no hardware PMU on this machine)"
    echo "loadavg before: $(cat /proc/loadavg)"
    echo "cpu share of this run: $shares"
    echo "victim: request of $ITERS loop iterations every $PERIOD_MS ms on CPU $CPU"
    echo "production tenant duties: $PROD_DUTIES ($STEP_S s each, mean $MEAN_DUTY); replayed in the test run as: $TEST_DUTIES; new tenant duty $NEW_DUTY"
} > "$TMP/machine.txt"

run production "$PROD_S" schedule
run bare_base "$BARE_S"
run bare_test "$BARE_S" "leech $NEW_DUTY $BARE_S"
run test "$PROD_S" "leech $NEW_DUTY $PROD_S" "schedule '$TEST_DUTIES'"
run actual "$PROD_S" "leech $NEW_DUTY $PROD_S" schedule
fi

echo "recordings kept in $TMP" >&2
P="$BIN/hwqos-sra predict $TMP/production.jsonl --test $TMP/test.jsonl --actual $TMP/actual.jsonl --x app.latency_us"
$P > "$TMP/predict.txt" 2>&1 || { cat "$TMP/predict.txt"; exit 1; }
$P --json --plot "$OUT/predict.svg" > "$TMP/predict.json"
python3 - "$TMP" "$OUT" "$root/docs/experiments" <<'PY'
import json, sys, statistics as st
tmp, out, here = sys.argv[1:4]
sys.path.insert(0, here)
import predict_windows as pw  # the full-window rule, written independently of hwqos-sra
recs = {n: pw.frames(f"{tmp}/{n}.jsonl") for n in ("production", "bare_base", "bare_test", "test", "actual")}
def x_of(name):
    fr = recs[name]
    return pw.values(fr, pw.main_scope(fr, "app.latency_us"), "app.latency_us")
xs = {n: x_of(n) for n in ("production", "bare_base", "bare_test", "test", "actual")}
p = json.load(open(f"{tmp}/predict.json"))
prod, actual = st.mean(xs["production"]), st.mean(xs["actual"])
true = actual / prod - 1
rows = [
    ("bare test (naive)", st.mean(xs["bare_test"]) / st.mean(xs["bare_base"]) - 1),
    ("loaded test, x measured directly", st.mean(xs["test"]) / prod - 1),
    ("hwqos-sra predict (x = a + b r-hat, r' from the loaded test)", p["x_predicted"] / prod - 1),
]
lines = open(f"{tmp}/machine.txt").read().splitlines()
lines.append("mean x (latency, us): " + ", ".join(f"{k} {st.mean(v):.0f} (n {len(v)})" for k, v in xs.items()))
lines.append(f"actual change (real run vs production): {true * 100:+.1f} %")
lines.append("| estimate | predicted change | error vs actual change |")
lines.append("|---|---|---|")
for name, est in rows:
    lines.append(f"| {name} | {est * 100:+.1f} % | {(est - true) * 100:+.1f} pp |")
# Oracles: r' and the actual mean x recomputed from the recordings (full
# windows, predict_windows.py), x-hat from a and b.
f = p["fit"]
r_test = pw.values(recs["test"], p["test"]["scope"].split()[-1], f["resource"])
x_act = pw.values(recs["actual"], p["actual"]["x"]["scope"].split()[-1], "app.latency_us")
checks = [
    ("r' = mean of the test run's full windows", abs(st.mean(r_test) - p["test"]["mean"]) <= 1e-9 * abs(p["test"]["mean"])),
    ("actual x = mean of the actual run's full windows", abs(st.mean(x_act) - p["actual"]["x"]["mean"]) <= 1e-9 * abs(st.mean(x_act))),
    ("x-hat = a + b r'", abs(f["a"] + f["b"] * p["test"]["mean"] - p["x_predicted"]) <= 1e-9 * abs(p["x_predicted"])),
    ("interval contains x-hat", p["low"] < p["x_predicted"] < p["high"]),
]
lo, hi = p["low"] / prod - 1, p["high"] / prod - 1
lines.append(f"prediction interval (95 %): [{lo * 100:+.1f} %, {hi * 100:+.1f} %]; actual inside: {p['actual']['inside']}; relative error of x-hat {p['actual']['error_relative'] * 100:+.1f} %")
lines.append("oracle checks: " + "; ".join(f"{n}: {'ok' if ok else 'FAILED'}" for n, ok in checks))
lines.append("hwqos-sra predict:")
lines += ["  " + l for l in open(f"{tmp}/predict.txt").read().splitlines()]
open(f"{out}/predict.txt", "w").write("\n".join(lines) + "\n")
json.dump({"x_means": {k: st.mean(v) for k, v in xs.items()}, "actual_change": true,
           "estimates": {n: e for n, e in rows}, "predict": p}, open(f"{out}/predict.json", "w"), indent=1)
print("\n".join(lines))
sys.exit(0 if all(ok for _, ok in checks) else 1)
PY
