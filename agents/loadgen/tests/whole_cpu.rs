//! The default whole-CPU mode as a user checks it (issue 24, section 6):
//! `hwqos-loadgen targets cpu_util@N=T`, `synthesize`, then `replay
//! model.json` — no `--measure-processes` — judged by this test's own reader
//! of `/proc/stat`'s `cpuN` line: the CPU's total within 3 percentage points
//! of the target during synthesize's hold window and during replay, alone
//! and with a periodic background (10 ms period, 10–25 % duty) on the same
//! CPU, three runs each.
//!
//! The judge. `/proc/stat` counts idle time exactly (NO_HZ idle accounting,
//! printed in 10 ms units) but user/system time by sampling at each
//! scheduler tick what runs there (4 ms at HZ=250). Two readings are
//! therefore reported: `wall` = 1 − Δ(idle + iowait) / Δwall (exact up to
//! the 10 ms print unit: ±0.2 pp over the windows here) and `sigma` =
//! Δ(non-idle) / Δ(all fields), what `top` and `mpstat` show, which also
//! carries the tick sampling's statistical error (about ±1.3 pp, one sigma,
//! over 6 s); `wall` must be within 3 pp, `sigma` within 3 pp plus three
//! sigmas of its sampling error.
//!
//! What was achievable. This VM is shared: other engineers' builds run on
//! both CPUs. The test picks the less busy CPU and a target above what
//! already runs there, but a build may still land on that CPU for a while,
//! and a controller cannot bring the total below what the others use. So
//! for every second of a window the achievable total is max(target, others)
//! where others = the CPU's total − the loadgen process's own CPU time
//! (`/proc/PID/stat`), and the judgement is against the mean of that; on a
//! quiet CPU it is the target itself. A window in which the others alone
//! exceeded the target in some second is printed but not judged (the knob
//! had to drop to 0 and come back: the controller's lag, not its accuracy),
//! and neither is a synthesize that could not converge because the others
//! left no room (the total then was theirs, knob 0). Every figure is printed.
//!
//! So that a saturated machine cannot pass the test having judged little,
//! each test needs [`MIN_JUDGED`] judged windows of synthesize and as many
//! of replay: after its three runs it runs more (at most [`MAX_RUNS`]) while
//! it lacks some, and fails naming how many it judged if it still does.
//!
//! No assertion is about time; the windows are long enough for the
//! accuracy judgement (6 s and more).

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_hwqos-loadgen");
/// The two tests share the CPUs (and /proc/stat's view of them).
static SERIAL: Mutex<()> = Mutex::new(());
/// Samples of the hold window of synthesize (250 ms each).
const HOLD: u32 = 28;
/// Seconds of replay.
const REPLAY_S: f64 = 9.0;
/// Judge snapshots every this often.
const SNAP: Duration = Duration::from_millis(500);
const TOLERANCE: f64 = 0.03;
/// USER_HZ: the unit of /proc/stat and /proc/PID/stat.
const USER_HZ: f64 = 100.0;
/// Scheduler ticks per second (the accounting sample rate; CONFIG_HZ here).
const TICK_HZ: f64 = 250.0;
/// Judged windows each test needs, of synthesize and of replay each.
const MIN_JUDGED: usize = 2;
/// Runs a test makes at most (three, then more while windows are missing).
const MAX_RUNS: usize = 6;

/// What a test's runs found.
#[derive(Default)]
struct Tally {
    failures: Vec<String>,
    /// Windows judged, synthesize and replay.
    synthesize: usize,
    replay: usize,
    /// Windows not judged (other tasks took the CPU).
    unjudged: usize,
}

impl Tally {
    fn enough(&self) -> bool {
        self.synthesize >= MIN_JUDGED && self.replay >= MIN_JUDGED
    }

    /// Passes if every judged window was within the limits and enough were
    /// judged.
    fn assert_ok(&self, runs: usize) {
        eprintln!(
            "{runs} runs: judged {} synthesize and {} replay windows, {} not judged (other tasks took the CPU)",
            self.synthesize, self.replay, self.unjudged
        );
        assert!(self.failures.is_empty(), "{}", self.failures.join("\n"));
        assert!(
            self.enough(),
            "only {} synthesize and {} replay windows were judged in {runs} runs (at least {MIN_JUDGED} \
             of each are needed; {} windows were not judged because other tasks alone took more \
             than the target on the CPU): this machine is too busy to check the controller",
            self.synthesize,
            self.replay,
            self.unjudged
        );
    }
}

/// One reading of the judge.
#[derive(Clone, Debug)]
struct Snap {
    t: Instant,
    /// user nice system idle iowait irq softirq steal (USER_HZ ticks).
    cpu: [u64; 8],
    /// utime + stime of the loadgen process (USER_HZ ticks), if alive.
    own: Option<u64>,
}

fn proc_stat_cpu(cpu: u32) -> [u64; 8] {
    let text = std::fs::read_to_string("/proc/stat").unwrap();
    let name = format!("cpu{cpu}");
    let line = text
        .lines()
        .find(|l| l.split_whitespace().next() == Some(&name))
        .unwrap_or_else(|| panic!("no {name} line in /proc/stat"));
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(|x| x.parse().unwrap())
        .collect();
    v.try_into().unwrap()
}

fn proc_ticks(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &text[text.rfind(')')? + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    if f.first() == Some(&"Z") {
        return None;
    }
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

fn snap(cpu: u32, pid: u32) -> Snap {
    let own = proc_ticks(pid);
    let t = Instant::now();
    let cpu = proc_stat_cpu(cpu);
    Snap { t, cpu, own }
}

/// (wall, sigma, ticks) busy shares between two snapshots.
fn shares(a: &Snap, b: &Snap) -> (f64, f64, f64) {
    let d: Vec<f64> = a
        .cpu
        .iter()
        .zip(&b.cpu)
        .map(|(x, y)| (y - x) as f64)
        .collect();
    let secs = (b.t - a.t).as_secs_f64();
    let idle = d[3] + d[4];
    let total: f64 = d.iter().sum();
    let wall = (1.0 - idle / USER_HZ / secs).clamp(0.0, 1.0);
    let sigma = if total > 0.0 { 1.0 - idle / total } else { 0.0 };
    (wall, sigma, secs * TICK_HZ)
}

/// The verdict over `snaps` (a window) for `target`.
struct Verdict {
    wall: f64,
    sigma: f64,
    sigma_err: f64,
    achievable: f64,
    others_max: f64,
    secs: f64,
}

fn judge(snaps: &[Snap], target: f64) -> Verdict {
    assert!(
        snaps.len() >= 3,
        "window too short: {} snapshots",
        snaps.len()
    );
    let (first, last) = (&snaps[0], &snaps[snaps.len() - 1]);
    let (wall, sigma, ticks) = shares(first, last);
    let secs = (last.t - first.t).as_secs_f64();
    // Per second (two snapshots): achievable = max(target, others).
    let mut weighted = 0.0;
    let mut others_max: f64 = 0.0;
    let mut i = 0;
    while i + 1 < snaps.len() {
        let j = (i + 2).min(snaps.len() - 1);
        let (a, b) = (&snaps[i], &snaps[j]);
        let dt = (b.t - a.t).as_secs_f64();
        let (u, _, _) = shares(a, b);
        let own = match (a.own, b.own) {
            (Some(x), Some(y)) => (y - x) as f64 / USER_HZ / dt,
            _ => 0.0,
        };
        let others = (u - own).max(0.0);
        others_max = others_max.max(others);
        weighted += target.max(others) * dt;
        i = j;
    }
    let achievable = weighted / secs;
    Verdict {
        wall,
        sigma,
        sigma_err: (sigma * (1.0 - sigma) / ticks).sqrt(),
        achievable,
        others_max,
        secs,
    }
}

fn nice_config(dir: &Path) -> String {
    let p = dir.join("nice.toml");
    let root = nix::unistd::geteuid().is_root();
    std::fs::write(&p, if root { "nice = -20\n" } else { "" }).unwrap();
    p.display().to_string()
}

/// Runs `child` to its end, taking snapshots of `cpu` and of the child.
fn watch(mut child: Child, cpu: u32) -> (Vec<Snap>, Instant, std::process::Output) {
    let pid = child.id();
    let mut snaps = vec![snap(cpu, pid)];
    let end = loop {
        std::thread::sleep(SNAP);
        let s = snap(cpu, pid);
        if child.try_wait().unwrap().is_some() || s.own.is_none() {
            break s.t;
        }
        snaps.push(s);
    };
    let out = child.wait_with_output().unwrap();
    (snaps, end, out)
}

fn window(snaps: &[Snap], from: Instant, to: Instant) -> Vec<Snap> {
    snaps
        .iter()
        .filter(|s| s.t >= from && s.t <= to)
        .cloned()
        .collect()
}

/// The less busy CPU and its busy share over one second, waiting up to
/// 15 s for one that is at most half busy.
fn quietest_cpu() -> (u32, f64) {
    let online = hwqos_topology::Topology::this_node().unwrap().online_cpus();
    let mut best = (0, 1.0);
    for _ in 0..15 {
        let before: Vec<Snap> = online.iter().map(|c| snap(*c, 0)).collect();
        std::thread::sleep(Duration::from_secs(1));
        best = online
            .iter()
            .zip(&before)
            .map(|(c, b)| (*c, shares(b, &snap(*c, 0)).0))
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .unwrap();
        if best.1 <= 0.5 {
            break;
        }
    }
    best
}

fn background(cfg: &str, cpu: u32, duty: f64) -> Child {
    // The knob's generator: busy `duty` of every 10 ms on average.
    let child = Command::new(BIN)
        .args(["--config", cfg, "generate", "--knob"])
        .arg(format!("cpu_util@{cpu}={duty}"))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(800));
    child
}

fn check(what: &str, v: &Verdict, target: f64, tally: &mut Tally) {
    let e_wall = v.wall - v.achievable;
    let e_sigma = v.sigma - v.achievable;
    eprintln!(
        "  {what:<10} target {target:.3} achievable {:.3} (others up to {:.3}) | /proc/stat wall {:.4} ({:+.2} pp) sigma {:.4} ({:+.2} pp, sampling ±{:.2}) over {:.1} s",
        v.achievable,
        v.others_max,
        v.wall,
        e_wall * 100.0,
        v.sigma,
        e_sigma * 100.0,
        v.sigma_err * 100.0,
        v.secs
    );
    // Others alone above the target at some second of the window: the knob
    // had to go to 0 and come back, and the controller's lag (a second or
    // two) is not what is judged here. Printed, counted, not judged.
    if v.others_max >= target {
        eprintln!("  {what}: not judged (other tasks alone exceeded the target in this window)");
        tally.unjudged += 1;
        return;
    }
    match what {
        "synthesize" => tally.synthesize += 1,
        _ => tally.replay += 1,
    }
    if e_wall.abs() > TOLERANCE {
        tally.failures.push(format!(
            "{what}: /proc/stat busy share {:.4} (1 − idle/wall) vs achievable {:.4} (target {target})",
            v.wall, v.achievable
        ));
    }
    if e_sigma.abs() > TOLERANCE + 3.0 * v.sigma_err {
        tally.failures.push(format!(
            "{what}: /proc/stat busy share {:.4} (non-idle/all) vs achievable {:.4} (target {target})",
            v.sigma, v.achievable
        ));
    }
}

/// One run: targets → synthesize → replay on the quietest CPU, judged.
fn run_once(run: usize, duty: Option<f64>, tally: &mut Tally) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = nice_config(dir.path());
    let (cpu, busy) = quietest_cpu();
    let mut bg = duty.map(|d| background(&cfg, cpu, d));
    // Above what runs there already (a controller only adds load).
    let target = ((busy + duty.unwrap_or(0.0) + 0.25) * 100.0).round() / 100.0;
    let target = target.clamp(0.45, 0.85);
    eprintln!(
        "run {run}: CPU {cpu} (busy {busy:.3} before), background {}, target {target}",
        duty.map_or("none".into(), |d| format!("{d} duty, 10 ms period"))
    );
    let targets = dir.path().join("t.json");
    let model = dir.path().join("m.json");
    let o = Command::new(BIN)
        .args(["targets", &format!("cpu_util@{cpu}={target}"), "-o"])
        .arg(&targets)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));

    let child = Command::new(BIN)
        .args(["--config", &cfg, "synthesize"])
        .arg(&targets)
        .arg("-o")
        .arg(&model)
        .args(["--hold", &HOLD.to_string(), "--timeout", "25"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (snaps, end, out) = watch(child, cpu);
    if !out.status.success() {
        // Not converged: right only if the others on the CPU left no room
        // (the knob at 0, the total theirs); judged over the last 6 s.
        let w = window(&snaps, end - Duration::from_secs(6), end);
        let v = judge(&w, target);
        let msg = String::from_utf8_lossy(&out.stderr).trim().to_string();
        if v.achievable - target > TOLERANCE && (v.wall - v.achievable).abs() <= TOLERANCE {
            eprintln!(
                "  not judged: other tasks on CPU {cpu} used up to {:.3} (achievable {:.3}, total {:.3}); synthesize said: {msg}",
                v.others_max, v.achievable, v.wall
            );
            tally.unjudged += 2; // synthesize and replay
        } else {
            tally.synthesize += 1;
            tally.failures.push(format!(
                "run {run} synthesize on CPU {cpu} (target {target}, achievable {:.3}, total {:.3}): {msg}",
                v.achievable, v.wall
            ));
        }
    } else {
        eprint!("  {}", String::from_utf8_lossy(&out.stdout));
        // The hold window: its last HOLD samples, less half a second at each end.
        let hold = Duration::from_secs_f64(HOLD as f64 * 0.25);
        let w = window(
            &snaps,
            end - hold + Duration::from_millis(500),
            end - Duration::from_millis(500),
        );
        check("synthesize", &judge(&w, target), target, tally);

        let start = Instant::now();
        let child = Command::new(BIN)
            .args(["--config", &cfg, "replay"])
            .arg(&model)
            .args(["--duration", &REPLAY_S.to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (snaps, end, out) = watch(child, cpu);
        assert!(
            out.status.success(),
            "replay: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let w = window(
            &snaps,
            start + Duration::from_millis(2500),
            end - Duration::from_millis(500),
        );
        check("replay", &judge(&w, target), target, tally);
    }
    if let Some(b) = bg.as_mut() {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(b.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        assert!(b.wait().unwrap().success(), "background failed");
    }
}

#[test]
fn whole_cpu_total_within_3_pp_alone() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut tally = Tally::default();
    let mut runs = 0;
    while runs < 3 || (!tally.enough() && runs < MAX_RUNS) {
        runs += 1;
        run_once(runs, None, &mut tally);
    }
    tally.assert_ok(runs);
}

#[test]
fn whole_cpu_total_within_3_pp_with_a_periodic_background() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let duties = [0.10, 0.18, 0.25];
    let mut tally = Tally::default();
    let mut runs = 0;
    while runs < 3 || (!tally.enough() && runs < MAX_RUNS) {
        runs += 1;
        run_once(runs, Some(duties[(runs - 1) % duties.len()]), &mut tally);
    }
    tally.assert_ok(runs);
}
