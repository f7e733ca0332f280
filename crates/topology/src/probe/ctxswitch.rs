//! Context-switch cost by pipe ping-pong (lmbench's lat_ctx idea): two tasks
//! pinned to the SAME CPU pass one byte back and forth, so every round trip
//! is two switches. Measured between two threads and between two processes.
//!
//! The time per round trip includes two pipe writes and two reads; their cost
//! without a switch (one task writing and reading its own pipe) is measured
//! separately and subtracted: `switch_ns = (round_trip − pipe_pair) / 2`.
//!
//! The number of switches is cross-checked with the kernel's
//! `sw.context_switches` software counter (perf_event) on both tasks: it must
//! be 2 per round trip, plus the rare preemption by other work on that CPU.

use super::{pin, ProbeError, ProbeOptions};
use hwqos_core::metric::names;
use hwqos_core::stats::{summarize, Summary};
use hwqos_core::time::monotonic_ns;
use hwqos_pmu::backend::perf::PerfBackend;
use hwqos_pmu::backend::{CountTarget, CounterBackend, GroupId};
use serde::{Deserialize, Serialize};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

/// One ping-pong measurement.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PingPong {
    /// ns per round trip (two switches, two pipe write/read pairs).
    pub round_trip_ns: Summary,
    /// ns per switch with the pipe cost subtracted.
    pub switch_ns: Summary,
    /// Round trips while the counter was enabled.
    pub rounds: u64,
    /// `sw.context_switches` of both tasks over those rounds.
    pub counted_switches: Option<u64>,
    /// Why the counter is missing, if it is.
    pub counter_error: Option<String>,
}

impl PingPong {
    /// Counted switches per round trip (2 expected).
    pub fn switches_per_round(&self) -> Option<f64> {
        self.counted_switches
            .map(|c| c as f64 / self.rounds.max(1) as f64)
    }
}

/// What the [`ctxswitch`](self) probe measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CtxSwitchResult {
    /// ns per write+read of one byte on a pipe, same task (no switch).
    pub pipe_pair_ns: Summary,
    /// Ping-pong between two threads of this process.
    pub threads: PingPong,
    /// Ping-pong between this process and a forked child.
    pub processes: PingPong,
}

fn pipe() -> Result<(OwnedFd, OwnedFd), ProbeError> {
    nix::unistd::pipe().map_err(|e| ProbeError::io("pipe", std::io::Error::from(e)))
}

/// Writes one byte; retries on EINTR.
fn put(fd: RawFd, byte: u8) -> bool {
    loop {
        // SAFETY: writing one byte from a valid stack buffer.
        let rc = unsafe { libc::write(fd, (&byte as *const u8).cast(), 1) };
        if rc == 1 {
            return true;
        }
        if rc < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        return false;
    }
}

/// Reads one byte; `None` on EOF or error.
fn get(fd: RawFd) -> Option<u8> {
    let mut byte = 0u8;
    loop {
        // SAFETY: reading one byte into a valid stack buffer.
        let rc = unsafe { libc::read(fd, (&mut byte as *mut u8).cast(), 1) };
        if rc == 1 {
            return Some(byte);
        }
        if rc < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        return None;
    }
}

/// The echo side: returns every byte until it reads 0 or EOF.
fn echo(from: RawFd, to: RawFd) {
    while let Some(b) = get(from) {
        if b == 0 || !put(to, b) {
            return;
        }
    }
}

/// `sw.context_switches` counters on a set of tasks.
pub struct SwitchCounter {
    backend: PerfBackend,
    groups: Vec<GroupId>,
}

impl SwitchCounter {
    /// Opens (disabled) one counter per task.
    pub fn open(tids: &[u32]) -> Result<SwitchCounter, String> {
        let event = hwqos_pmu::catalog::Catalog::for_this_node()
            .resolve(names::SW_CONTEXT_SWITCHES)
            .map_err(|e| e.to_string())?;
        let mut backend = PerfBackend::new();
        let mut groups = Vec::new();
        for &tid in tids {
            let target = CountTarget::Task {
                tid,
                inherit: false,
            };
            groups.push(
                backend
                    .open_group(&target, std::slice::from_ref(&event))
                    .map_err(|e| e.to_string())?,
            );
        }
        Ok(SwitchCounter { backend, groups })
    }

    /// Starts counting on every task.
    pub fn enable(&mut self) -> Result<(), String> {
        for g in &self.groups {
            self.backend.enable(*g).map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// Stops counting on every task.
    pub fn disable(&mut self) -> Result<(), String> {
        for g in &self.groups {
            self.backend.disable(*g).map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// The sum over all tasks.
    pub fn total(&mut self) -> Result<u64, String> {
        let mut sum = 0;
        for g in &self.groups {
            let r = self.backend.read(*g).map_err(|e| e.to_string())?;
            sum += r.values.first().copied().unwrap_or(0);
        }
        Ok(sum)
    }
}

impl Drop for SwitchCounter {
    fn drop(&mut self) {
        for g in self.groups.drain(..) {
            self.backend.close(g);
        }
    }
}

/// Runs `batches` batches of `rounds` round trips over the pipes, with the
/// partner task `partner` counted too. Returns the per-round-trip times (ns)
/// and the counted switches.
fn drive(
    to_partner: RawFd,
    from_partner: RawFd,
    partner: u32,
    batches: usize,
    rounds: u64,
    overhead_ns: f64,
) -> Result<(Vec<f64>, Result<u64, String>), ProbeError> {
    let round = || -> Result<(), ProbeError> {
        if !put(to_partner, 1) || get(from_partner) != Some(1) {
            return Err(ProbeError::Other("ping-pong partner vanished".into()));
        }
        Ok(())
    };
    for _ in 0..rounds.min(200) {
        round()?;
    }
    let me = nix::unistd::gettid().as_raw() as u32;
    let mut counter = SwitchCounter::open(&[me, partner]);
    if let Ok(c) = &mut counter {
        if let Err(e) = c.enable() {
            counter = Err(e);
        }
    }
    let mut per_round = Vec::with_capacity(batches);
    for _ in 0..batches {
        let t0 = monotonic_ns();
        for _ in 0..rounds {
            round()?;
        }
        let t1 = monotonic_ns();
        per_round.push(((t1 - t0) as f64 - overhead_ns).max(0.0) / rounds as f64);
    }
    let counted = counter.and_then(|mut c| {
        c.disable()?;
        c.total()
    });
    Ok((per_round, counted))
}

fn pingpong(
    per_round: Vec<f64>,
    counted: Result<u64, String>,
    rounds: u64,
    pipe_pair_ns: f64,
) -> Result<PingPong, ProbeError> {
    let switch: Vec<f64> = per_round
        .iter()
        .map(|rt| ((rt - 2.0 * pipe_pair_ns) / 2.0).max(0.0))
        .collect();
    let none = || ProbeError::Other("no ping-pong samples".into());
    Ok(PingPong {
        round_trip_ns: summarize(&per_round).ok_or_else(none)?,
        switch_ns: summarize(&switch).ok_or_else(none)?,
        rounds,
        counted_switches: counted.as_ref().ok().copied(),
        counter_error: counted.err(),
    })
}

/// Ping-pong between this thread and a new thread, both on `cpu`.
pub fn threads(
    cpu: u32,
    batches: usize,
    rounds: u64,
    overhead_ns: f64,
) -> Result<(Vec<f64>, Result<u64, String>), ProbeError> {
    let (a_read, a_write) = pipe()?;
    let (b_read, b_write) = pipe()?;
    let (tx, rx) = std::sync::mpsc::channel();
    let partner = std::thread::spawn(move || {
        let pinned = super::Pinned::to(cpu);
        let _ = tx.send(
            pinned
                .as_ref()
                .ok()
                .map(|_| nix::unistd::gettid().as_raw() as u32),
        );
        if pinned.is_ok() {
            echo(a_read.as_raw_fd(), b_write.as_raw_fd());
        }
        // The pipe ends close here, which ends the driver's reads.
    });
    let tid =
        rx.recv().ok().flatten().ok_or_else(|| {
            ProbeError::Other(format!("cannot pin the partner thread to CPU {cpu}"))
        })?;
    let result = drive(
        a_write.as_raw_fd(),
        b_read.as_raw_fd(),
        tid,
        batches,
        rounds,
        overhead_ns,
    );
    put(a_write.as_raw_fd(), 0);
    drop(a_write);
    let _ = partner.join();
    result
}

/// Ping-pong between this thread and a forked child process, both on the
/// CPU this thread is pinned to (the child inherits the affinity).
pub fn processes(
    batches: usize,
    rounds: u64,
    overhead_ns: f64,
) -> Result<(Vec<f64>, Result<u64, String>), ProbeError> {
    let (a_read, a_write) = pipe()?;
    let (b_read, b_write) = pipe()?;
    // SAFETY: the child only calls read, write and _exit (async-signal-safe).
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(ProbeError::io("fork", std::io::Error::last_os_error()));
    }
    if pid == 0 {
        // SAFETY: closing the parent's ends in the child, so it sees EOF if
        // the parent dies.
        unsafe {
            libc::close(a_write.as_raw_fd());
            libc::close(b_read.as_raw_fd());
        }
        echo(a_read.as_raw_fd(), b_write.as_raw_fd());
        // SAFETY: leaving the child without running the parent's destructors.
        unsafe { libc::_exit(0) };
    }
    drop(a_read);
    drop(b_write);
    let result = drive(
        a_write.as_raw_fd(),
        b_read.as_raw_fd(),
        pid as u32,
        batches,
        rounds,
        overhead_ns,
    );
    put(a_write.as_raw_fd(), 0);
    drop(a_write);
    let mut status = 0;
    // SAFETY: reaping our own child.
    while unsafe { libc::waitpid(pid, &mut status, 0) } < 0
        && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR)
    {}
    result
}

/// ns per one-byte write + read on a pipe by the same task.
fn pipe_pair_ns(repeats: usize, ops: u64, overhead_ns: f64) -> Result<Summary, ProbeError> {
    let (r, w) = pipe()?;
    let (r, w) = (r.as_raw_fd(), w.as_raw_fd());
    super::per_op_ns(repeats, ops, overhead_ns, super::Solo::No, || {
        put(w, 1);
        get(r);
    })
    .ok_or_else(|| ProbeError::Other("no pipe samples".into()))
}

/// Runs the context-switch probe: both tasks pinned to the CPU `options`
/// selects. The switch counter is optional (its absence is recorded in
/// [`PingPong::counter_error`]); errors when pinning, pipes or fork fail.
pub fn run(options: &ProbeOptions) -> Result<CtxSwitchResult, ProbeError> {
    let (_pin, cpu) = pin(options)?;
    let repeats = options.repeats();
    let rounds = options.scaled(2_000);
    let overhead = super::timing_overhead_ns();
    let pipe_pair = pipe_pair_ns(repeats, options.scaled(20_000), overhead)?;
    let (rt, counted) = threads(cpu, repeats, rounds, overhead)?;
    let threads = pingpong(rt, counted, rounds * repeats as u64, pipe_pair.median)?;
    let (rt, counted) = processes(repeats, rounds, overhead)?;
    let processes = pingpong(rt, counted, rounds * repeats as u64, pipe_pair.median)?;
    Ok(CtxSwitchResult {
        pipe_pair_ns: pipe_pair,
        threads,
        processes,
    })
}

fn merge_pingpong(parts: &[&PingPong]) -> Option<PingPong> {
    let counted: Option<Vec<u64>> = parts.iter().map(|p| p.counted_switches).collect();
    Some(PingPong {
        round_trip_ns: super::merge_cost(parts, |p| &p.round_trip_ns)?,
        switch_ns: super::merge_cost(parts, |p| &p.switch_ns)?,
        rounds: parts.iter().map(|p| p.rounds).sum(),
        counted_switches: counted.map(|c| c.iter().sum()),
        counter_error: parts.iter().find_map(|p| p.counter_error.clone()),
    })
}

/// Merges interleaved repetitions (see [`super::merge_summaries`]); the
/// counted switches and rounds add up.
pub fn merge(parts: Vec<CtxSwitchResult>) -> Option<CtxSwitchResult> {
    let threads: Vec<&PingPong> = parts.iter().map(|p| &p.threads).collect();
    let processes: Vec<&PingPong> = parts.iter().map(|p| &p.processes).collect();
    Some(CtxSwitchResult {
        pipe_pair_ns: super::merge_cost(&parts, |p| &p.pipe_pair_ns)?,
        threads: merge_pingpong(&threads)?,
        processes: merge_pingpong(&processes)?,
    })
}
