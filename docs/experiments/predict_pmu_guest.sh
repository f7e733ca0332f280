#!/usr/bin/env bash
# Performance prediction for a change (docs/experiments/predict.md, "On the
# emulated PMU"): predict.sh's recipe in the qemu aarch64 guest of
# scripts/pmu-guest (-cpu max -icount shift=0 -smp 1, Armv8 PMUv3), with the
# victim's hardware counters (instructions:u, cycles:u) recorded next to its
# software events, so r-hat may be a hardware counter.
#
# The guest has busybox sh and no python: the victim is predict_victim.sh (a
# paced request loop of ITERS shell-loop iterations every PERIOD_US, x = its
# mean request latency per 100 ms, app.latency_us through hwqos-monitor's
# tail_file source); tenants are `hwqos-sra leech cpu --duty D`. One vCPU,
# so everything shares CPU 0 (predict.sh pins everything on CPU 1 of two).
# The request is longer than predict.sh's (1300 iterations, about 20 ms,
# every 50 ms): with 5 ms every 20 ms the guest's kernel (6.1, CFS) ran each
# request nearly unpreempted after its sleep and the tenant hardly slowed
# the victim (predict.md).
# Runs, as in predict.sh, shorter (the guest is slow):
#   production  victim + the production tenant (PROD_DUTIES, STEP_S each)
#   bare_base   victim alone;  bare_test  victim + the new tenant (NEW_DUTY)
#   test        victim + new tenant + the duties in another order (TEST_DUTIES)
#   actual      victim + new tenant + the production tenant's schedule
# The guest prints the monitor's recordings; `hwqos-sra predict` runs here
# (HWQOS_SRA, default target/debug/hwqos-sra, built if missing) and draws
# predict.svg with --plot.
#
# Under -icount shift=0 the guest clock advances 1 ns per instruction the
# vCPU executes (any task's, the kernel's) and in real time while it idles:
# the victim's latency is the instructions retired on the CPU between a
# request's start and end, its own and its co-runners'.
#
#   docs/experiments/predict_pmu_guest.sh        # 4-5 minutes of host time
#   REPORT=1 OUT=DIR docs/experiments/predict_pmu_guest.sh
#        (no guest: the prediction and the summary again on the recordings
#        and guest.log a run left in DIR)
# Output: OUT (default a new temporary directory): the recordings,
# predict.txt, predict.json, predict.svg, summary.txt, guest.log.
# Every mean is over the windows that are full observations of the victim
# (predict_windows.py, the rule of hwqos-sra predict).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
PROD_DUTIES=${PROD_DUTIES:-"0 0.4 0.8 0.2 0.6 0.1 0.5 0.3 0.7 0"}
TEST_DUTIES=${TEST_DUTIES:-"0.7 0.1 0.5 0 0.8 0.3 0 0.6 0.2 0.4"}
STEP_S=${STEP_S:-1}
NEW_DUTY=${NEW_DUTY:-0.2}
BARE_S=${BARE_S:-5}
PERIOD_US=${PERIOD_US:-50000}
ITERS=${ITERS:-1300}
PMU_GUEST="${PMU_GUEST:-$root/scripts/pmu-guest}"
HWQOS_SRA="${HWQOS_SRA:-$root/target/debug/hwqos-sra}"
[ -x "$HWQOS_SRA" ] || (cd "$root" && cargo build -q -p hwqos-sra)
OUT="${OUT:-$(mktemp -d /tmp/predict_pmu_guest.XXXXXX)}"
mkdir -p "$OUT"
tmp=$(mktemp -d /tmp/predict_pmu_guest_cmd.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
nsteps=$(wc -w <<<"$PROD_DUTIES")
PROD_S=$(awk -v n="$nsteps" -v s="$STEP_S" 'BEGIN { print n * s }')

cat >"$tmp/predict-guest.sh" <<EOF
echo "guest: \$(uname -r), \$(nproc) CPU"
leech() { hwqos-sra leech cpu --duty "\$1" --duration-s "\$2" >/dev/null 2>&1; }
schedule() { for d in \$1; do leech "\$d" $STEP_S; done; }
run() {
    name=\$1 secs=\$2; shift 2
    d=/tmp/p/\$name; mkdir -p \$d/out; : >\$d/lat.log
    sh /work/predict_victim.sh \$d/lat.log \$secs $PERIOD_US $ITERS & v=\$!
    cat >\$d/monitor.toml <<T
rate_hz = 10
per_cpu = false
procfs = false
event_sets = [["instructions:u", "cycles:u", "sw.context_switches", "sw.task_clock", "sw.page_faults"]]
[[target]]
select = "pid:\$v"
[output]
dir = "\$d/out"
formats = ["jsonl"]
[api]
enabled = false
[metrics]
enabled = false
[[app]]
type = "tail_file"
path = "\$d/lat.log"
metric = "app.latency_us"
scope = "pid:\$v"
T
    hwqos-monitor --config \$d/monitor.toml 2>\$d/monitor.log & m=\$!
    co=""
    for c in "\$@"; do eval "\$c" & co="\$co \$!"; done
    wait \$v
    for c in \$co; do kill \$c 2>/dev/null; wait \$c 2>/dev/null; done
    sleep 0.3
    kill -TERM \$m; wait \$m
    echo "\$name: \$(grep -c . \$d/lat.log) x values"
    echo "@@rec \$name"; cat \$(ls \$d/out/*.jsonl | head -1); echo "@@end"
}
run production $PROD_S "schedule '$PROD_DUTIES'"
run bare_base $BARE_S
run bare_test $BARE_S "leech $NEW_DUTY $BARE_S"
run test $PROD_S "leech $NEW_DUTY $PROD_S" "schedule '$TEST_DUTIES'"
run actual $PROD_S "leech $NEW_DUTY $PROD_S" "schedule '$PROD_DUTIES'"
echo "@@done"
EOF
start=$(date -u +%Y-%m-%dT%H:%M:%SZ)
if [ -z "${REPORT:-}" ]; then
"$PMU_GUEST" --timeout 3000 --add "$tmp/predict-guest.sh" --add "$root/docs/experiments/predict_victim.sh" \
    -- sh predict-guest.sh >"$OUT/guest.log" 2>&1 || { tail -30 "$OUT/guest.log"; exit 1; }
for n in production bare_base bare_test test actual; do
    sed -n "/^@@rec $n\$/,/^@@end/p" "$OUT/guest.log" | sed '1d;$d' >"$OUT/$n.jsonl"
done
{
    echo "date: $start; host: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
    echo "guest: $(grep 'pmu-guest: guest ran' "$OUT/guest.log")"
    echo "counters: emulated PMU (Armv8 PMUv3 under qemu -icount shift=0: instructions:u, cycles:u) and software events of the victim"
    echo "victim: request of $ITERS shell-loop iterations every $PERIOD_US us; production duties: $PROD_DUTIES ($STEP_S s each); test: $TEST_DUTIES; new tenant duty $NEW_DUTY"
    grep -E '^[a-z_]+: [0-9]+ x values' "$OUT/guest.log"
} >"$OUT/machine.txt"
fi
P=("$HWQOS_SRA" predict "$OUT/production.jsonl" --test "$OUT/test.jsonl" --actual "$OUT/actual.jsonl" --x app.latency_us)
"${P[@]}" --plot "$OUT/predict.svg" >"$OUT/predict.txt" 2>&1 || { cat "$OUT/predict.txt"; exit 1; }
"${P[@]}" --json >"$OUT/predict.json" 2>/dev/null
python3 - "$OUT" "$root/docs/experiments" <<'PY' | tee "$OUT/summary.txt"
import json, sys, statistics as st
out, here = sys.argv[1:3]
sys.path.insert(0, here)
import predict_windows as pw  # the full-window rule, written independently of hwqos-sra
runs = ("production", "bare_base", "bare_test", "test", "actual")
recs = {n: pw.frames(f"{out}/{n}.jsonl") for n in runs}
def series(name, metric):
    fr = recs[name]
    scope = pw.main_scope(fr, metric)
    return pw.values(fr, scope, metric) if scope else []
xs = {n: series(n, "app.latency_us") for n in runs}
p = json.load(open(f"{out}/predict.json"))
prod, actual = st.mean(xs["production"]), st.mean(xs["actual"])
true = actual / prod - 1
print(open(f"{out}/machine.txt").read().rstrip())
print("mean x (latency, us): " + ", ".join(f"{k} {st.mean(v):.0f} (n {len(v)})" for k, v in xs.items()))
for m in ("hw.instructions", "hw.cycles", "sw.context_switches", "sw.task_clock"):
    print(f"victim's mean {m} per 100 ms: " + ", ".join(f"{k} {st.mean(series(k, m)):.4g}" for k in runs if series(k, m)))
print(f"actual change: {true * 100:+.1f} %")
rows = [("bare test (naive)", st.mean(xs["bare_test"]) / st.mean(xs["bare_base"]) - 1),
        ("loaded test, x measured", st.mean(xs["test"]) / prod - 1),
        ("hwqos-sra predict", p["x_predicted"] / prod - 1)]
for n, e in rows:
    print(f"{n}: {e * 100:+.1f} % ({(e - true) * 100:+.1f} pp)")
lo, hi = p["low"] / prod - 1, p["high"] / prod - 1
f = p["fit"]
print(f"interval [{lo * 100:+.1f} %, {hi * 100:+.1f} %], actual inside: {p['actual']['inside']}; extrapolation: {p['extrapolation'] is not None}")
print(f"fit: {f['resource']}: x = {f['a']:.1f} + {f['b']:.4g} r, R2 {f['r_squared']:.3f}, n {f['n']}, n_eff {f['n_eff']:.1f}, r range [{f['r_min']:.4g}, {f['r_max']:.4g}], r' {p['test']['mean']:.4g}")
r_test = series("test", f["resource"])
ok = abs(st.mean(r_test) - p["test"]["mean"]) <= 1e-9 * abs(p["test"]["mean"]) and \
     abs(f["a"] + f["b"] * p["test"]["mean"] - p["x_predicted"]) <= 1e-9 * abs(p["x_predicted"])
print(f"oracle checks (r' = mean of the test run's full windows; x-hat = a + b r'): {'ok' if ok else 'FAILED'}")
PY
cat "$OUT/predict.txt"
echo "results in $OUT"
