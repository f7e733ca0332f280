//! The release gate under replayed production load (thesis 6.4.3): a
//! baseline and a candidate command are run **bare** and **under a replayed
//! load model**, interleaved and repeated, and the candidate's effect on an
//! application metric *x* is reported per condition with a 95 % interval.
//!
//! A change that costs nothing on an idle test node can cost a lot on a busy
//! production node (the thesis' example: +0.75 % RTT bare, +10.8 % under the
//! replicated load). The gate makes the loaded condition part of the test.
//!
//! **What is run.** Each command runs as `sh -c COMMAND` in its own process
//! group, stdin from `/dev/null`, stdout and stderr captured. *x* is the
//! command's wall time in seconds, or the number the one capture group of
//! [`GateOptions::x_regex`] finds in its stdout (the first match). A command
//! that exits non-zero, is killed, or whose stdout the regex does not match
//! ends the gate with an error naming the command, the run and the reason.
//! What is left of the command's process group when it exits (background
//! jobs) is killed.
//!
//! **Order.** Repetition *i* runs both conditions, bare first when *i* is
//! even and loaded first when it is odd, and within a condition the
//! baseline, then the candidate (ABAB over the repetitions). Under load, the
//! model is replayed in this process (the [`crate::workflow::replay`] code
//! path, open loop by default: the knobs the model stores, so the command's
//! own CPU use does not make the controllers back off) from
//! [`GateOptions::settle`] before the command starts until it ends, then
//! stopped and its generators joined before the next run: no load runs
//! between runs, after the gate, or after an error. The caller's
//! [`StopFlag`] (SIGINT/SIGTERM in hwqos-loadgen) kills the running command's
//! process group, stops the load and ends the gate with
//! [`LoadError::Command`].
//!
//! **Statistics.** Runs are independent repetitions, so per condition the
//! effect is Welch's interval on the difference of the means (candidate −
//! baseline), with Welch–Satterthwaite degrees of freedom; the relative effect
//! divides it by the baseline mean (whose own uncertainty is not
//! propagated: with a few percent of noise on the baseline mean the relative
//! interval is that much too narrow). The **regression** is the relative
//! effect in the worse direction ([`Direction`]); the [`Verdict`] is a
//! regression when the whole interval lies on the worse side of 0, an
//! improvement when it lies on the better side, no change otherwise.
//!
//! **Counters.** Each run also records the command's CPU time, page faults
//! and context switches (all its processes that it waited for) from the
//! kernel's accounting that `wait4(2)` returns — the counts the `sw.*`
//! events read, named as they are (`sw.task_clock` in ns, `sw.page_faults`
//! minor + major, `sw.context_switches` voluntary + involuntary) — and, with
//! [`GateOptions::record_dir`], writes one `hwqos.recording/1` JSON-lines
//! file per version and condition (`baseline-loaded.jsonl`, …), one frame per
//! run with scope `system` (the command) and *x* as `app.gate.x`, for
//! `hwqos diff baseline-loaded.jsonl candidate-loaded.jsonl`.

use crate::config::LoadConfig;
use crate::knob::StopFlag;
use crate::model::LoadModel;
use crate::source::MeasureOn;
use crate::synth::ReplayMode;
use crate::workflow::replay::{self, Measuring, ReplayOptions};
use crate::workflow::{Observer, ReplayStart, ReplayedPair};
use crate::LoadError;
use hwqos_core::recording::{CounterClass, RecordedBackend, RecordingHeader, RecordingWriter};
use hwqos_core::{Frame, MetricName, Sample, Scope, Timestamp};
use serde::{Deserialize, Serialize};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// Most bytes of a command's stdout (and stderr) kept; the rest is read and
/// dropped so the command never blocks on a full pipe.
const MAX_OUTPUT: u64 = 16 << 20;

/// Which way of *x* is better.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// Lower is better (a time, a latency): a regression is an increase.
    #[default]
    Lower,
    /// Higher is better (a throughput): a regression is a decrease.
    Higher,
}

impl std::str::FromStr for Direction {
    type Err = LoadError;
    fn from_str(s: &str) -> Result<Direction, LoadError> {
        match s {
            "lower" => Ok(Direction::Lower),
            "higher" => Ok(Direction::Higher),
            _ => Err(LoadError::Invalid(format!(
                "x direction `{s}`: expected `lower` or `higher` (which is better)"
            ))),
        }
    }
}

/// Bare (nothing replayed) or under the replayed load model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Condition {
    /// Nothing replayed.
    Bare,
    /// The load model replayed while the command runs.
    Loaded,
}

impl Condition {
    /// `bare` or `loaded`.
    pub fn name(self) -> &'static str {
        match self {
            Condition::Bare => "bare",
            Condition::Loaded => "loaded",
        }
    }
}

/// The command before or after the change.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Version {
    /// Before the change.
    Baseline,
    /// After the change.
    Candidate,
}

impl Version {
    /// `baseline` or `candidate`.
    pub fn name(self) -> &'static str {
        match self {
            Version::Baseline => "baseline",
            Version::Candidate => "candidate",
        }
    }
}

/// What to run and how.
#[derive(Clone, Debug)]
pub struct GateOptions {
    /// The baseline command (run with `sh -c`).
    pub baseline: String,
    /// The candidate command (run with `sh -c`).
    pub candidate: String,
    /// Repetitions of each (version, condition); at least 2 (an interval
    /// needs a variance).
    pub repetitions: u32,
    /// A regular expression with exactly one capture group that finds *x*
    /// in the command's stdout; `None`: *x* is the wall time in seconds.
    pub x_regex: Option<String>,
    /// Which way of *x* is better.
    pub direction: Direction,
    /// Confidence level of the intervals (0.95).
    pub level: f64,
    /// How long the load runs before a loaded command starts.
    pub settle: Duration,
    /// Hold the model's targets in closed loop measuring this process (the
    /// generators; the command under test is not counted) instead of
    /// applying its knobs fixed.
    pub closed_loop: bool,
    /// Replay a model made on a different CPU model or cache geometry.
    pub force: bool,
    /// Write one recording per version and condition into this directory.
    pub record_dir: Option<PathBuf>,
}

impl Default for GateOptions {
    fn default() -> GateOptions {
        GateOptions {
            baseline: String::new(),
            candidate: String::new(),
            repetitions: 5,
            x_regex: None,
            direction: Direction::Lower,
            level: 0.95,
            settle: Duration::from_secs(1),
            closed_loop: false,
            force: false,
            record_dir: None,
        }
    }
}

/// A command's counts in one run (all its processes that were waited for).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunCounters {
    /// CPU time, user + system, ns (`sw.task_clock`).
    pub task_clock_ns: f64,
    /// Minor + major page faults (`sw.page_faults`).
    pub page_faults: f64,
    /// Voluntary + involuntary context switches (`sw.context_switches`).
    pub context_switches: f64,
}

/// One run of one command.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GateRun {
    /// Position in the order of all runs, from 0.
    pub index: u32,
    /// The repetition, from 0.
    pub repetition: u32,
    /// Bare or loaded.
    pub condition: Condition,
    /// Baseline or candidate.
    pub version: Version,
    /// The metric *x* of this run.
    pub x: f64,
    /// The command's wall time, seconds.
    pub wall_s: f64,
    /// Its counters.
    pub counters: RunCounters,
    /// When it ended.
    pub ended: Timestamp,
}

/// Welch's interval on the difference of two means (`b − a`).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Welch {
    /// `mean(b) − mean(a)`.
    pub difference: f64,
    /// Its standard error, `√(s²a/na + s²b/nb)`.
    pub std_error: f64,
    /// Welch–Satterthwaite degrees of freedom (infinite when both samples
    /// are constant).
    pub dof: f64,
    /// Lower bound of the interval.
    pub low: f64,
    /// Upper bound of the interval.
    pub high: f64,
    /// The confidence level.
    pub level: f64,
}

/// Welch's `level` interval on `mean(b) − mean(a)` (runs are independent
/// repetitions: [`hwqos_core::stats::mean_difference`] with
/// [`Dependence::Independent`](hwqos_core::stats::Dependence::Independent));
/// `None` with fewer than two values in either or a level outside (0, 1).
pub fn welch(a: &[f64], b: &[f64], level: f64) -> Option<Welch> {
    use hwqos_core::stats::{mean_difference, Dependence};
    let d = mean_difference(a, b, level, Dependence::Independent)?;
    Some(Welch {
        difference: d.diff,
        std_error: d.std_error,
        dof: if d.std_error == 0.0 {
            f64::INFINITY
        } else {
            d.dof
        },
        low: d.low(),
        high: d.high(),
        level,
    })
}

/// What the interval says about the candidate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The whole interval lies on the worse side of 0.
    Regression,
    /// The whole interval lies on the better side of 0.
    Improvement,
    /// The interval contains 0.
    NoChange,
}

impl Verdict {
    /// `regression`, `improvement` or `no significant change`.
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Regression => "regression",
            Verdict::Improvement => "improvement",
            Verdict::NoChange => "no significant change",
        }
    }
}

/// One condition's result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConditionReport {
    /// Bare or loaded.
    pub condition: Condition,
    /// Mean *x* of the baseline.
    pub baseline_mean: f64,
    /// Mean *x* of the candidate.
    pub candidate_mean: f64,
    /// Standard deviations of *x* (baseline, candidate).
    pub stddev: (f64, f64),
    /// Runs of each.
    pub runs: usize,
    /// Welch's interval on candidate − baseline, in *x*'s unit.
    pub difference: Welch,
    /// The candidate's relative effect on *x*, in percent of the baseline
    /// mean, `(estimate, low, high)`.
    pub effect_pct: (f64, f64, f64),
    /// The relative effect in the worse direction (positive: worse), in
    /// percent, `(estimate, low, high)`.
    pub regression_pct: (f64, f64, f64),
    /// What the interval says.
    pub verdict: Verdict,
    /// Mean counters per run (baseline, candidate).
    pub counters: (RunCounters, RunCounters),
}

/// The gate's result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GateReport {
    /// What *x* is: `wall time (s)` or `stdout /REGEX/`.
    pub x: String,
    /// Which way is better.
    pub direction: Direction,
    /// The confidence level.
    pub level: f64,
    /// Repetitions per (version, condition).
    pub repetitions: u32,
    /// Bare, then loaded.
    pub conditions: Vec<ConditionReport>,
    /// Every run, in the order they ran.
    pub runs: Vec<GateRun>,
    /// The recordings written (version, condition, path).
    pub recordings: Vec<(Version, Condition, PathBuf)>,
}

impl GateReport {
    /// The report of one condition.
    pub fn condition(&self, c: Condition) -> Option<&ConditionReport> {
        self.conditions.iter().find(|r| r.condition == c)
    }

    /// Whether the loaded condition's regression fails a gate of `pct`
    /// percent: the estimate exceeds `pct` and the verdict is a regression
    /// (the interval excludes 0), so noise alone does not fail it.
    pub fn fails(&self, pct: f64) -> bool {
        self.condition(Condition::Loaded)
            .is_some_and(|r| r.verdict == Verdict::Regression && r.regression_pct.0 > pct)
    }
}

/// How *x* is read.
enum XSource {
    WallTime,
    Regex(regex::Regex),
}

impl XSource {
    fn new(pattern: Option<&str>) -> Result<XSource, LoadError> {
        let Some(p) = pattern else {
            return Ok(XSource::WallTime);
        };
        let re = regex::Regex::new(p)
            .map_err(|e| LoadError::Invalid(format!("--x-regex `{p}`: {e}")))?;
        let groups = re.captures_len() - 1;
        if groups != 1 {
            return Err(LoadError::Invalid(format!(
                "--x-regex `{p}` has {groups} capture groups; it needs exactly one, around the number (e.g. `rtt=([0-9.]+)`)"
            )));
        }
        Ok(XSource::Regex(re))
    }

    fn describe(&self) -> String {
        match self {
            XSource::WallTime => "wall time (s)".into(),
            XSource::Regex(re) => format!("stdout /{}/", re.as_str()),
        }
    }

    fn read(&self, wall_s: f64, stdout: &str) -> Result<f64, String> {
        let XSource::Regex(re) = self else {
            return Ok(wall_s);
        };
        let caps = re.captures(stdout).ok_or_else(|| {
            format!(
                "--x-regex `{}` matched nothing in its stdout ({})",
                re.as_str(),
                excerpt(stdout)
            )
        })?;
        let text = caps.get(1).map_or("", |m| m.as_str());
        text.trim()
            .parse::<f64>()
            .ok()
            .filter(|v| v.is_finite())
            .ok_or_else(|| {
                format!(
                    "--x-regex `{}` captured `{text}`, which is not a number",
                    re.as_str()
                )
            })
    }
}

/// The start of a text for a message.
fn excerpt(text: &str) -> String {
    let t = text.trim();
    if t.is_empty() {
        return "it was empty".into();
    }
    let cut: String = t.chars().take(200).collect();
    if cut.len() < t.len() {
        format!("it began `{cut}…`")
    } else {
        format!("it was `{cut}`")
    }
}

/// How one command ended.
struct Outcome {
    wall_s: f64,
    stdout: String,
    stderr: String,
    status: i32,
    counters: RunCounters,
    stopped: bool,
}

/// Runs `sh -c cmd` in its own process group and waits for it; `stop` kills
/// the group. Whatever of the group is left when it exits is killed.
fn run_command(cmd: &str, stop: &StopFlag) -> Result<Outcome, String> {
    use std::os::unix::process::CommandExt;
    let start = Instant::now();
    let mut command = Command::new("sh");
    command
        .arg("-c")
        .arg(cmd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    // The agent blocks SIGTERM/SIGINT/SIGHUP in every thread (its signal
    // thread takes them) and a blocked mask survives exec: without this a
    // `kill` in the command (or a test framework's timeout) would do nothing.
    hwqos_core::process::clear_signal_mask_on_exec(&mut command);
    let mut child = command
        .spawn()
        .map_err(|e| format!("starting `sh -c`: {e}"))?;
    let pid = child.id() as libc::pid_t;
    let reader = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut kept = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.by_ref().take(MAX_OUTPUT).read_to_end(&mut kept);
                let _ = std::io::copy(&mut p, &mut std::io::sink());
            }
            String::from_utf8_lossy(&kept).into_owned()
        })
    };
    let out = reader(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let err = reader(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    // The watcher kills the group on a stop, but only while the child is
    // not reaped (its PID, the group's ID, cannot be reused until then).
    let reaped = Arc::new(Mutex::new(false));
    let watcher = {
        let reaped = reaped.clone();
        let stop = stop.clone();
        std::thread::spawn(move || loop {
            std::thread::sleep(Duration::from_millis(20));
            let done = reaped.lock().unwrap_or_else(|p| p.into_inner());
            if *done {
                return false;
            }
            if stop.is_stopped() {
                // SAFETY: kill(2) on our child's process group.
                unsafe { libc::kill(-pid, libc::SIGKILL) };
                return true;
            }
        })
    };
    // Wait without reaping, so the wall time ends at the exit.
    loop {
        // SAFETY: a zeroed siginfo_t is a valid out-parameter.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waitid on our own child.
        let r = unsafe {
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOWAIT,
            )
        };
        if r == 0 {
            break;
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(format!("waiting for it: {e}"));
        }
    }
    let wall_s = start.elapsed().as_secs_f64();
    let mut status = 0;
    // SAFETY: a zeroed rusage is a valid out-parameter.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    {
        let mut done = reaped.lock().unwrap_or_else(|p| p.into_inner());
        // SAFETY: wait4 on our own child, which has exited.
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
        *done = true;
        if r != pid {
            return Err(format!("reaping it: {}", std::io::Error::last_os_error()));
        }
        // Background jobs it left behind: the group still exists while they
        // live, so its ID is still theirs.
        // SAFETY: kill(2) on the command's process group.
        unsafe { libc::kill(-pid, libc::SIGKILL) };
    }
    let stopped = watcher.join().unwrap_or(false);
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    let tv = |t: libc::timeval| t.tv_sec as f64 * 1e9 + t.tv_usec as f64 * 1e3;
    Ok(Outcome {
        wall_s,
        stdout,
        stderr,
        status,
        counters: RunCounters {
            task_clock_ns: tv(ru.ru_utime) + tv(ru.ru_stime),
            page_faults: (ru.ru_minflt + ru.ru_majflt) as f64,
            context_switches: (ru.ru_nvcsw + ru.ru_nivcsw) as f64,
        },
        stopped,
    })
}

/// Stops the replay when the caller's flag is set, and says when it started.
struct GateObserver {
    caller: StopFlag,
    load: StopFlag,
    started: Option<mpsc::Sender<()>>,
}

impl Observer for GateObserver {
    fn replay_started(&mut self, _start: &ReplayStart<'_>) {
        if let Some(tx) = self.started.take() {
            let _ = tx.send(());
        }
    }
    fn replay_interval(&mut self, _t_s: f64, _pairs: &[ReplayedPair]) {
        if self.caller.is_stopped() {
            self.load.stop();
        }
    }
}

/// Sleeps `d` in short steps; false if `stop` was set meanwhile.
fn sleep_unless_stopped(d: Duration, stop: &StopFlag) -> bool {
    let end = Instant::now() + d;
    while Instant::now() < end {
        if stop.is_stopped() {
            return false;
        }
        std::thread::sleep((end - Instant::now()).min(Duration::from_millis(20)));
    }
    !stop.is_stopped()
}

/// Runs `f` while `model` is replayed in this process; the load is stopped
/// and its generators joined before this returns, whatever happened.
fn under_load<T>(
    model: &LoadModel,
    opts: &GateOptions,
    cfg: &LoadConfig,
    stop: &StopFlag,
    f: impl FnOnce() -> Result<T, LoadError>,
) -> Result<T, LoadError> {
    let load = StopFlag::new();
    let ropts = ReplayOptions {
        duration: None,
        dynamic: false,
        mode: if opts.closed_loop {
            ReplayMode::ClosedLoop
        } else {
            ReplayMode::OpenLoop
        },
        force: opts.force,
        period: Duration::from_millis(250),
        measure_on: opts
            .closed_loop
            .then(|| MeasureOn::Processes(vec![std::process::id()])),
        measuring: if opts.closed_loop {
            Measuring::Required
        } else {
            Measuring::Never
        },
    };
    std::thread::scope(|s| {
        let (tx, rx) = mpsc::channel();
        let mut observer = GateObserver {
            caller: stop.clone(),
            load: load.clone(),
            started: Some(tx),
        };
        let replaying = std::thread::Builder::new()
            .name("gate-load".into())
            .spawn_scoped(s, {
                let load = load.clone();
                let ropts = &ropts;
                move || replay::replay(model, ropts, cfg, &load, &mut observer)
            })
            .map_err(|e| LoadError::Io("starting the load thread".into(), e))?;
        let joined = |h: std::thread::ScopedJoinHandle<'_, Result<_, LoadError>>| {
            h.join()
                .unwrap_or_else(|_| Err(LoadError::Measure("the load thread panicked".into())))
        };
        if rx.recv().is_err() {
            // The replay ended before it started its loop: its error.
            return match joined(replaying) {
                Err(e) => Err(e),
                Ok(_) => Err(LoadError::Measure(
                    "the load ended before it started".into(),
                )),
            };
        }
        let result = if sleep_unless_stopped(opts.settle, stop) {
            f()
        } else {
            Err(interrupted("while the load settled"))
        };
        let ended_early = replaying.is_finished();
        load.stop();
        let replayed = joined(replaying);
        let value = result?;
        replayed?;
        if ended_early && !stop.is_stopped() {
            return Err(LoadError::Measure(
                "the replayed load ended while the command ran".into(),
            ));
        }
        Ok(value)
    })
}

fn interrupted(when: &str) -> LoadError {
    LoadError::Command(format!(
        "stopped (SIGINT/SIGTERM) {when}; the load is stopped and there is no verdict"
    ))
}

/// Checks what can be checked before anything runs.
fn check(model: &LoadModel, opts: &GateOptions) -> Result<XSource, LoadError> {
    if opts.repetitions < 2 {
        return Err(LoadError::Invalid(format!(
            "-r {}: at least 2 repetitions are needed for an interval",
            opts.repetitions
        )));
    }
    if !(opts.level > 0.0 && opts.level < 1.0) {
        return Err(LoadError::Invalid(format!(
            "confidence level {} outside (0, 1)",
            opts.level
        )));
    }
    for (name, cmd) in [("baseline", &opts.baseline), ("candidate", &opts.candidate)] {
        if cmd.trim().is_empty() {
            return Err(LoadError::Invalid(format!("the {name} command is empty")));
        }
    }
    let x = XSource::new(opts.x_regex.as_deref())?;
    if model.entries.is_empty() {
        return Err(LoadError::Invalid(
            "the model has no entries: nothing to replay".into(),
        ));
    }
    let node = crate::workflow::this_node()?;
    if let Err(e) = model.check_node(&node) {
        if !opts.force {
            return Err(e);
        }
    }
    if let Some(d) = &opts.record_dir {
        std::fs::create_dir_all(d)
            .map_err(|e| LoadError::Io(format!("creating {}", d.display()), e))?;
    }
    Ok(x)
}

/// Runs the gate: every repetition runs baseline and candidate bare and
/// under `model`'s replayed load, in the order the module describes;
/// `progress` sees each run as it ends. The caller's `stop` ends it early
/// (an error; nothing is left running).
pub fn gate(
    model: &LoadModel,
    opts: &GateOptions,
    cfg: &LoadConfig,
    stop: &StopFlag,
    progress: &mut dyn FnMut(&GateRun),
) -> Result<GateReport, LoadError> {
    let x = check(model, opts)?;
    let mut runs: Vec<GateRun> = Vec::new();
    for repetition in 0..opts.repetitions {
        let conditions = if repetition % 2 == 0 {
            [Condition::Bare, Condition::Loaded]
        } else {
            [Condition::Loaded, Condition::Bare]
        };
        for condition in conditions {
            for version in [Version::Baseline, Version::Candidate] {
                let cmd = match version {
                    Version::Baseline => &opts.baseline,
                    Version::Candidate => &opts.candidate,
                };
                let what = format!(
                    "{} run {} ({})",
                    version.name(),
                    repetition + 1,
                    condition.name()
                );
                if stop.is_stopped() {
                    return Err(interrupted(&format!("before the {what}")));
                }
                let once = || -> Result<GateRun, LoadError> {
                    let o = run_command(cmd, stop)
                        .map_err(|e| LoadError::Command(format!("{what}: `{cmd}`: {e}")))?;
                    if o.stopped {
                        return Err(interrupted(&format!("during the {what}")));
                    }
                    if o.status != 0 {
                        let how = if libc::WIFEXITED(o.status) {
                            format!("exited with status {}", libc::WEXITSTATUS(o.status))
                        } else if libc::WIFSIGNALED(o.status) {
                            format!("was killed by signal {}", libc::WTERMSIG(o.status))
                        } else {
                            format!("ended with wait status {}", o.status)
                        };
                        return Err(LoadError::Command(format!(
                            "{what}: `{cmd}` {how}; stderr: {}",
                            excerpt(&o.stderr).trim_start_matches("it was ")
                        )));
                    }
                    let xv = x
                        .read(o.wall_s, &o.stdout)
                        .map_err(|e| LoadError::Command(format!("{what}: `{cmd}`: {e}")))?;
                    Ok(GateRun {
                        index: runs.len() as u32,
                        repetition,
                        condition,
                        version,
                        x: xv,
                        wall_s: o.wall_s,
                        counters: o.counters,
                        ended: Timestamp::now(),
                    })
                };
                let run = match condition {
                    Condition::Bare => once()?,
                    Condition::Loaded => under_load(model, opts, cfg, stop, once)?,
                };
                progress(&run);
                runs.push(run);
            }
        }
    }
    let conditions = [Condition::Bare, Condition::Loaded]
        .into_iter()
        .map(|c| summarize(c, &runs, opts))
        .collect::<Result<Vec<_>, _>>()?;
    let recordings = match &opts.record_dir {
        Some(d) => write_recordings(d, &runs)?,
        None => Vec::new(),
    };
    Ok(GateReport {
        x: x.describe(),
        direction: opts.direction,
        level: opts.level,
        repetitions: opts.repetitions,
        conditions,
        runs,
        recordings,
    })
}

fn mean_counters(runs: &[&GateRun]) -> RunCounters {
    let n = runs.len().max(1) as f64;
    let mut c = RunCounters::default();
    for r in runs {
        c.task_clock_ns += r.counters.task_clock_ns / n;
        c.page_faults += r.counters.page_faults / n;
        c.context_switches += r.counters.context_switches / n;
    }
    c
}

/// One condition's statistics from the runs.
pub fn summarize(
    condition: Condition,
    runs: &[GateRun],
    opts: &GateOptions,
) -> Result<ConditionReport, LoadError> {
    use hwqos_core::stats::{mean, stddev};
    let of = |v: Version| -> Vec<&GateRun> {
        runs.iter()
            .filter(|r| r.condition == condition && r.version == v)
            .collect()
    };
    let (b, c) = (of(Version::Baseline), of(Version::Candidate));
    let xb: Vec<f64> = b.iter().map(|r| r.x).collect();
    let xc: Vec<f64> = c.iter().map(|r| r.x).collect();
    let w = welch(&xb, &xc, opts.level).ok_or_else(|| {
        LoadError::Invalid(format!(
            "{}: {} baseline and {} candidate runs; an interval needs at least 2 of each",
            condition.name(),
            xb.len(),
            xc.len()
        ))
    })?;
    let mb = mean(&xb).unwrap_or(0.0);
    if mb == 0.0 {
        return Err(LoadError::Command(format!(
            "{}: the baseline's mean x is 0, so a relative effect is undefined",
            condition.name()
        )));
    }
    let rel = |d: f64| 100.0 * d / mb.abs();
    let effect = (rel(w.difference), rel(w.low), rel(w.high));
    let regression = match opts.direction {
        Direction::Lower => effect,
        Direction::Higher => (-effect.0, -effect.2, -effect.1),
    };
    let verdict = if regression.1 > 0.0 {
        Verdict::Regression
    } else if regression.2 < 0.0 {
        Verdict::Improvement
    } else {
        Verdict::NoChange
    };
    Ok(ConditionReport {
        condition,
        baseline_mean: mb,
        candidate_mean: mean(&xc).unwrap_or(0.0),
        stddev: (stddev(&xb).unwrap_or(0.0), stddev(&xc).unwrap_or(0.0)),
        runs: xb.len().min(xc.len()),
        difference: w,
        effect_pct: effect,
        regression_pct: regression,
        verdict,
        counters: (mean_counters(&b), mean_counters(&c)),
    })
}

/// Writes `VERSION-CONDITION.jsonl` per version and condition, one frame per
/// run.
fn write_recordings(
    dir: &Path,
    runs: &[GateRun],
) -> Result<Vec<(Version, Condition, PathBuf)>, LoadError> {
    let mut out = Vec::new();
    for version in [Version::Baseline, Version::Candidate] {
        for condition in [Condition::Bare, Condition::Loaded] {
            let mine: Vec<&GateRun> = runs
                .iter()
                .filter(|r| r.version == version && r.condition == condition)
                .collect();
            let path = dir.join(format!("{}-{}.jsonl", version.name(), condition.name()));
            let io = |e: std::io::Error| LoadError::Io(format!("writing {}", path.display()), e);
            let started = mine.first().map_or_else(Timestamp::now, |r| r.ended);
            let mut header = RecordingHeader::new(
                hwqos_core::recording::node_name(),
                started,
                0.0,
                RecordedBackend::Perf,
                CounterClass::Software,
            );
            header.writer = format!(
                "hwqos-loadgen gate {} (counts from wait4 rusage; one frame per run)",
                env!("CARGO_PKG_VERSION")
            );
            let file = std::fs::File::create(&path).map_err(io)?;
            let mut w = RecordingWriter::new(std::io::BufWriter::new(file), &header).map_err(io)?;
            for (seq, r) in mine.iter().enumerate() {
                let g = |name: &'static str, v: f64| {
                    Sample::gauge(r.ended, Scope::System, MetricName::from_static(name), v)
                };
                let frame = Frame {
                    seq: seq as u64,
                    time: r.ended,
                    interval_ns: (r.wall_s * 1e9) as u64,
                    samples: vec![
                        g("sw.task_clock", r.counters.task_clock_ns),
                        g("sw.page_faults", r.counters.page_faults),
                        g("sw.context_switches", r.counters.context_switches),
                        g("app.gate.x", r.x),
                    ],
                    labels: Vec::new(),
                };
                w.write_frame(&frame).map_err(io)?;
            }
            w.finish().map_err(io)?;
            out.push((version, condition, path));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn welch_matches_a_hand_computation() {
        // a = 1..4, b = 2,4,6,8: means 2.5 and 5, variances 5/3 and 20/3,
        // se² = 5/12 + 20/12 = 25/12, dof = (25/12)² / ((5/12)²/3 + (20/12)²/3)
        // = 625 / (425/3) = 75/17 ≈ 4.41176.
        let w = welch(&[1.0, 2.0, 3.0, 4.0], &[2.0, 4.0, 6.0, 8.0], 0.95).unwrap();
        assert_eq!(w.difference, 2.5);
        assert!((w.std_error - (25.0f64 / 12.0).sqrt()).abs() < 1e-12);
        assert!((w.dof - 75.0 / 17.0).abs() < 1e-9, "{}", w.dof);
        // t(0.975, 75/17) lies between t(0.975, 5) = 2.5706 and t(0.975, 4) = 2.7764.
        let t = (w.high - w.difference) / w.std_error;
        assert!(t > 2.5706 && t < 2.7764, "{t}");
        assert!((w.low + w.high - 5.0).abs() < 1e-12);
        // Equal samples: a zero-width interval at the difference.
        let z = welch(&[3.0, 3.0], &[4.5, 4.5], 0.95).unwrap();
        assert_eq!((z.low, z.high, z.difference), (1.5, 1.5, 1.5));
        assert!(welch(&[1.0], &[1.0, 2.0], 0.95).is_none());
    }

    fn run(c: Condition, v: Version, x: f64) -> GateRun {
        GateRun {
            index: 0,
            repetition: 0,
            condition: c,
            version: v,
            x,
            wall_s: x,
            counters: RunCounters::default(),
            ended: Timestamp::default(),
        }
    }

    #[test]
    fn direction_turns_the_effect_into_a_regression() {
        use Condition::Loaded as L;
        let runs = vec![
            run(L, Version::Baseline, 10.0),
            run(L, Version::Baseline, 10.0),
            run(L, Version::Candidate, 12.0),
            run(L, Version::Candidate, 12.0),
        ];
        let mut opts = GateOptions::default();
        let r = summarize(L, &runs, &opts).unwrap();
        assert_eq!(r.effect_pct, (20.0, 20.0, 20.0));
        assert_eq!(r.regression_pct.0, 20.0);
        assert_eq!(r.verdict, Verdict::Regression);
        opts.direction = Direction::Higher;
        let r = summarize(L, &runs, &opts).unwrap();
        assert_eq!(r.regression_pct, (-20.0, -20.0, -20.0));
        assert_eq!(r.verdict, Verdict::Improvement);
        let report = GateReport {
            x: String::new(),
            direction: Direction::Lower,
            level: 0.95,
            repetitions: 2,
            conditions: vec![summarize(L, &runs, &GateOptions::default()).unwrap()],
            runs: Vec::new(),
            recordings: Vec::new(),
        };
        assert!(report.fails(19.9));
        assert!(!report.fails(20.0));
    }

    #[test]
    fn regexes_need_one_group_and_a_number() {
        assert!(XSource::new(Some("rtt=[0-9]+"))
            .err()
            .unwrap()
            .to_string()
            .contains("0 capture groups"));
        assert!(XSource::new(Some("(a)(b)")).is_err());
        let x = XSource::new(Some(r"rtt=([0-9.]+) ms")).unwrap();
        assert_eq!(x.read(9.0, "hello\nrtt=1.25 ms\nrtt=3 ms"), Ok(1.25));
        assert!(x
            .read(9.0, "nothing")
            .unwrap_err()
            .contains("matched nothing"));
        assert_eq!(XSource::WallTime.read(9.0, ""), Ok(9.0));
    }
}
