//! Where frames come from: the [`FrameSource`] trait (one frame per tick), the
//! shipped source on `hwqos-pmu`'s sampler, and [`NodeSources`], which builds
//! a source for a configuration and checks event names against the catalog
//! (a test double replaces both).

use crate::config::{self, Config, ConfigError};
use crate::error::MonitorError;
use hwqos_core::ticker::Ticker;
use hwqos_core::{Frame, Timestamp};
use hwqos_pmu::api::UnavailableEvent;
use hwqos_pmu::backend::BackendKind;
use hwqos_pmu::catalog::Catalog;
use hwqos_pmu::sampler::Sampler;
use hwqos_pmu::PmuError;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Something that produces one frame per tick (the sampler, or a test double).
pub trait FrameSource: Send {
    /// Takes one tick's measurements.
    fn sample(&mut self, time: Timestamp) -> Frame;
    /// The event sets being rotated (unavailable events removed).
    fn event_sets(&self) -> Vec<Vec<String>>;
    /// Replaces the event sets; on error the old ones stay.
    fn set_event_sets(&mut self, sets: Vec<Vec<String>>) -> Result<(), PmuError>;
    /// Configured events this node cannot count.
    fn unavailable(&self) -> Vec<UnavailableEvent>;
    /// Which counter backend the frames come from.
    fn backend(&self) -> BackendKind;
}

/// The shipped frame source: the `hwqos-pmu` sampler.
pub struct SamplerSource {
    sampler: Sampler,
}

impl FrameSource for SamplerSource {
    fn sample(&mut self, time: Timestamp) -> Frame {
        self.sampler.sample(time)
    }
    fn event_sets(&self) -> Vec<Vec<String>> {
        self.sampler.event_sets()
    }
    fn set_event_sets(&mut self, sets: Vec<Vec<String>>) -> Result<(), PmuError> {
        self.sampler.set_event_sets(sets)
    }
    fn unavailable(&self) -> Vec<UnavailableEvent> {
        self.sampler.unavailable().to_vec()
    }
    fn backend(&self) -> BackendKind {
        self.sampler.backend_kind()
    }
}

/// Builds a frame source for a configuration.
pub type SourceFactory = dyn Fn(&Config) -> Result<Box<dyn FrameSource>, PmuError> + Send + Sync;

/// Checks an event name against the catalog (`Err(reason)` when unknown).
pub type EventChecker = dyn Fn(&str) -> Result<(), String> + Send + Sync;

/// How this monitor gets its frames: builds a [`FrameSource`] for a
/// configuration and checks event names (in configurations and `set_event_sets`).
#[derive(Clone)]
pub struct NodeSources {
    /// Builds the source (at start, and on a reload that changes the sampler).
    pub make_source: Arc<SourceFactory>,
    /// Checks one event name.
    pub check_event: Arc<EventChecker>,
}

impl NodeSources {
    /// The real thing: this node's event catalog, `perf_event` counters,
    /// `/proc` (the sampler from `Sampler::for_this_node`).
    pub fn this_node() -> NodeSources {
        let catalog = Catalog::for_this_node();
        NodeSources {
            make_source: Arc::new(|config: &Config| {
                let sampler = Sampler::for_this_node(config.sampler_config())?;
                Ok(Box::new(SamplerSource { sampler }) as Box<dyn FrameSource>)
            }),
            check_event: Arc::new(move |name: &str| match catalog.resolve(name) {
                Err(PmuError::UnknownEvent { reason, .. }) => Err(reason),
                // Known but not countable here: the sampler drops and lists it.
                _ => Ok(()),
            }),
        }
    }

    /// Loads and validates a config file (the built-in defaults when `path` is
    /// `None`), applying a `--rate` override.
    pub fn load_config(
        &self,
        path: Option<&Path>,
        rate_override: Option<f64>,
    ) -> Result<Config, ConfigError> {
        let check = self.check_event.clone();
        let check = move |n: &str| check(n);
        let mut config = match path {
            Some(path) => Config::load(path, &check)?,
            None => Config::parse("", Path::new("<built-in defaults>"), &check)?,
        };
        if let Some(rate) = rate_override {
            config::check_rate(rate).map_err(|expected| ConfigError {
                file: PathBuf::from("--rate"),
                line: None,
                key: None,
                expected,
            })?;
            config.rate_hz = rate;
        }
        Ok(config)
    }

    /// Builds a source for `config`.
    pub(crate) fn source_for(&self, config: &Config) -> Result<Box<dyn FrameSource>, MonitorError> {
        (self.make_source)(config).map_err(MonitorError::from_source)
    }
}

/// What the source reports about itself, cached so status never waits for a tick.
#[derive(Clone, Debug)]
pub(crate) struct SourceInfo {
    pub(crate) event_sets: Vec<Vec<String>>,
    pub(crate) unavailable: Vec<UnavailableEvent>,
    pub(crate) backend: BackendKind,
}

impl SourceInfo {
    pub(crate) fn of(source: &dyn FrameSource) -> SourceInfo {
        SourceInfo {
            event_sets: source.event_sets(),
            unavailable: source.unavailable(),
            backend: source.backend(),
        }
    }
}

/// `perf` or `simulated`.
pub fn backend_name(kind: BackendKind) -> &'static str {
    match kind {
        BackendKind::Perf => "perf",
        BackendKind::Simulated => "simulated",
    }
}

/// Samples one interval and returns the frame (`--once`): a first tick starts
/// the counters, the second, one period later, reads them.
pub fn sample_once(config: &Config, sources: &NodeSources) -> Result<Frame, MonitorError> {
    let mut source = sources.source_for(config)?;
    let mut ticker =
        Ticker::new(config.period()).map_err(|e| MonitorError::Ticker(e.to_string()))?;
    ticker.wait();
    let _ = source.sample(Timestamp::now());
    ticker.wait();
    let mut frame = source.sample(Timestamp::now());
    frame.seq = 1;
    Ok(frame)
}
