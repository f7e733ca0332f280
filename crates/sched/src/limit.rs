//! The resource-limit finder (thesis Listing 8.2): measure the victim's
//! performance x̄ alone, set x_limit = ω·x̄, then ramp a leech on the same
//! resource until x < x_limit, and take the victim's resource usage at the
//! last acceptable step as its quota O_{r,p}.
//!
//! Measurement is behind [`LimitProbe`] and the interference behind [`Ramp`] so
//! the procedure is tested with known answers and run for real by
//! `hwqos-sra find-limit` (perf counters on the victim, in-process leeches).

use crate::SchedError;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Measures the victim over an interval.
pub trait LimitProbe {
    /// Runs for `interval` and returns (x, r per second) over it.
    fn measure(&mut self, interval: Duration) -> Result<(f64, f64), SchedError>;
}

/// A controllable interference source.
pub trait Ramp {
    /// Sets the leech intensity in [0, 1].
    fn set_intensity(&mut self, intensity: f64);
}

/// The finder's parameters (thesis Listing 8.2's ω, t, δ); [`Default`] is
/// ω 0.9, 3 s alone, 1 s steps of 0.1, a 10 ms quota period.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LimitParams {
    /// ω: lowest acceptable fraction of x̄ (0, 1].
    pub omega: f64,
    /// t: how long x̄ is measured alone.
    pub baseline: Duration,
    /// δ: how long each ramp step is measured.
    pub step_interval: Duration,
    /// Intensity added per step, in (0, 1].
    pub step: f64,
    /// Quota period the result is expressed in.
    pub period: Duration,
}

impl Default for LimitParams {
    fn default() -> Self {
        LimitParams {
            omega: 0.9,
            baseline: Duration::from_secs(3),
            step_interval: Duration::from_secs(1),
            step: 0.1,
            period: Duration::from_millis(10),
        }
    }
}

/// One ramp step as measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LimitStep {
    /// The leech intensity during the step, in (0, 1].
    pub intensity: f64,
    /// The victim's performance *x* over the step.
    pub x: f64,
    /// The victim's resource usage *r*, events per second.
    pub r_per_s: f64,
}

/// What [`find_limit`] measured and the quota it derived.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LimitResult {
    /// x̄: the victim's performance alone (leech off), > 0.
    pub x_bar: f64,
    /// The victim's resource usage alone, events per second.
    pub r_bar_per_s: f64,
    /// ω·x̄: the lowest acceptable performance.
    pub x_limit: f64,
    /// Every ramp step in order; the last is the first unacceptable one when
    /// `degraded`.
    pub steps: Vec<LimitStep>,
    /// The step index whose usage became the quota (last acceptable one);
    /// `None` when even the first step was unacceptable (the alone run is used).
    pub accepted_step: Option<usize>,
    /// Whether x ever fell below x_limit (false: the leech at full intensity
    /// did not degrade the victim enough; the quota is the usage at full).
    pub degraded: bool,
    /// O_{r,p}: events per period.
    pub quota_per_period: u64,
}

/// Runs Listing 8.2.
pub fn find_limit(
    probe: &mut dyn LimitProbe,
    ramp: &mut dyn Ramp,
    p: &LimitParams,
) -> Result<LimitResult, SchedError> {
    let in_unit = |v: f64| v > 0.0 && v <= 1.0;
    if !in_unit(p.omega) || !in_unit(p.step) {
        return Err(SchedError::invalid(
            "limit finder parameters",
            format!("omega {} and step {} must be in (0, 1]", p.omega, p.step),
        ));
    }
    ramp.set_intensity(0.0);
    let (x_bar, r_bar) = probe.measure(p.baseline)?;
    if !(x_bar.is_finite() && x_bar > 0.0) {
        return Err(SchedError::invalid(
            "baseline x̄",
            format!("{x_bar} (the victim reported no performance)"),
        ));
    }
    let x_limit = p.omega * x_bar;
    let mut steps = Vec::new();
    let mut accepted = None;
    let mut degraded = false;
    let mut intensity = 0.0f64;
    loop {
        intensity = (intensity + p.step).min(1.0);
        ramp.set_intensity(intensity);
        let (x, r) = probe.measure(p.step_interval)?;
        steps.push(LimitStep {
            intensity,
            x,
            r_per_s: r,
        });
        if x < x_limit {
            degraded = true;
            break;
        }
        accepted = Some(steps.len() - 1);
        if intensity >= 1.0 {
            break;
        }
    }
    ramp.set_intensity(0.0);
    let r = accepted.map(|i| steps[i].r_per_s).unwrap_or(r_bar);
    let quota = (r * p.period.as_secs_f64()).round().max(1.0) as u64;
    Ok(LimitResult {
        x_bar,
        r_bar_per_s: r_bar,
        x_limit,
        steps,
        accepted_step: accepted,
        degraded,
        quota_per_period: quota,
    })
}

/// The probe of `hwqos-sra find-limit`: *x* is the first number a shell
/// command prints, run every 200 ms; *r* is a counting counter summed over
/// every thread of the victim.
pub struct CommandProbe {
    argv: Vec<String>,
    counter: crate::counter::ProcessCounter,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl CommandProbe {
    /// *x* from `sh -c shell_command`; a set `stop` interrupts a measurement.
    pub fn new(
        shell_command: &str,
        counter: crate::counter::ProcessCounter,
        stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    ) -> CommandProbe {
        CommandProbe {
            argv: vec!["sh".into(), "-c".into(), shell_command.into()],
            counter,
            stop,
        }
    }

    fn x(&self) -> Result<f64, SchedError> {
        let mut cmd = std::process::Command::new(&self.argv[0]);
        cmd.args(&self.argv[1..]);
        // The agent blocks its stop signals (sigwait); the command must not.
        let out = hwqos_core::process::clear_signal_mask_on_exec(&mut cmd)
            .output()
            .map_err(|e| SchedError::io(format!("running {:?}", self.argv), e))?;
        let text = String::from_utf8_lossy(&out.stdout);
        hwqos_pmu::appmetric::first_number(&text).ok_or_else(|| {
            SchedError::invalid("x command", format!("{:?} printed no number", self.argv))
        })
    }
}

impl LimitProbe for CommandProbe {
    fn measure(&mut self, interval: Duration) -> Result<(f64, f64), SchedError> {
        use std::sync::atomic::Ordering;
        self.counter.refresh()?;
        let r0 = self.counter.total();
        let start = std::time::Instant::now();
        let mut xs = Vec::new();
        while start.elapsed() < interval {
            if self.stop.load(Ordering::SeqCst) {
                return Err(SchedError::invalid("find-limit", "interrupted"));
            }
            std::thread::sleep(Duration::from_millis(200).min(interval));
            xs.push(self.x()?);
        }
        let r1 = self.counter.total();
        let secs = start.elapsed().as_secs_f64();
        let x = hwqos_core::stats::mean(&xs).unwrap_or(0.0);
        let r = (r1 - r0) as f64 / secs;
        tracing::info!(x, r_per_s = r, "measured");
        Ok((x, r))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::rc::Rc;

    /// x = 100 − 60·i and r = 1000·(1 − i/2) per second at leech intensity i:
    /// with ω = 0.9 the limit is 90, crossed above i = 1/6, so with steps of
    /// 0.1 the last acceptable step is i = 0.1 with r = 950/s → 9.5 ≈ 10 per 10 ms.
    struct Model(Rc<Cell<f64>>);
    impl LimitProbe for Model {
        fn measure(&mut self, _: Duration) -> Result<(f64, f64), SchedError> {
            let i = self.0.get();
            Ok((100.0 - 60.0 * i, 1000.0 * (1.0 - i / 2.0)))
        }
    }
    struct Knob(Rc<Cell<f64>>);
    impl Ramp for Knob {
        fn set_intensity(&mut self, i: f64) {
            self.0.set(i);
        }
    }

    #[test]
    fn listing_8_2_known_answer() {
        let i = Rc::new(Cell::new(0.0));
        let r = find_limit(
            &mut Model(i.clone()),
            &mut Knob(i.clone()),
            &LimitParams::default(),
        )
        .unwrap();
        assert_eq!(r.x_bar, 100.0);
        assert_eq!(r.x_limit, 90.0);
        assert_eq!(r.steps.len(), 2);
        assert_eq!(r.accepted_step, Some(0));
        assert!(r.degraded);
        assert_eq!(r.quota_per_period, 10);
        assert_eq!(i.get(), 0.0, "leech switched off at the end");
    }

    #[test]
    fn a_victim_that_never_degrades_gets_its_full_intensity_usage() {
        struct Flat;
        impl LimitProbe for Flat {
            fn measure(&mut self, _: Duration) -> Result<(f64, f64), SchedError> {
                Ok((50.0, 2000.0))
            }
        }
        let i = Rc::new(Cell::new(0.0));
        let r = find_limit(
            &mut Flat,
            &mut Knob(i),
            &LimitParams {
                step: 0.25,
                ..LimitParams::default()
            },
        )
        .unwrap();
        assert!(!r.degraded);
        assert_eq!(r.steps.len(), 4);
        assert_eq!(r.quota_per_period, 20);
        let e = find_limit(
            &mut Flat,
            &mut Knob(Rc::new(Cell::new(0.0))),
            &LimitParams {
                omega: 0.0,
                ..LimitParams::default()
            },
        );
        assert!(e.unwrap_err().to_string().contains("omega"));
    }
}
