//! hwqos-sched: shared-resource-aware allocation and scheduling (thesis
//! chapter 8): correlation of hardware usage with application performance,
//! resource sensitivity models, the placement decision engine, contracts, and
//! quota enforcement backends. The `hwqos-sra` agent is a thin shell around
//! it.
//!
//! The closed loop, in the order data flows:
//!
//! 1. **Analysis** ([`analysis`]): align, normalize, Butterworth-filter and
//!    correlate the resource series *R* with the application metric *x* of
//!    each process ([`analysis::ProcessSeries`] →
//!    [`analysis::ProcessCorrelation`]), and pick r̂, the most correlated
//!    resource above θ ([`analysis::AnalysisParams`]); text table and SVG
//!    (thesis Fig. 8.11).
//! 2. **Evaluation** ([`evaluation`]): one evaluation of the loop — a
//!    period's frames (live or recorded) to per-process analyses to an
//!    updated model, CPU demand from `task_clock`, quotas kept
//!    ([`evaluation::evaluate`], [`evaluation::analyse_frames`],
//!    [`evaluation::update_model`]).
//! 3. **Model** ([`model`]): the [`model::SensitivityModel`]
//!    (`hwqos.sensitivity/1`) — per process what it is sensitive to, its CPU
//!    demand and its quotas — plus manual [`model::Constraint`]s, persisted as
//!    JSON with an atomic save.
//! 4. **Decision** ([`decision`]): [`decision::decide`] places processes by r̂
//!    and cache domains, then by CPU demand, within the constraints, and
//!    explains every choice.
//! 5. **Contract** ([`contract`]): the [`contract::Contract`]
//!    (`hwqos.contract/1`, thesis Fig. 8.9), validated by
//!    [`contract::Contract::parse`] and resolved against this machine
//!    ([`contract::ResolvedEntry`] or [`contract::Skipped`] with a reason),
//!    never touching the agent itself ([`contract::Guard`]).
//!    Contracts may also come from a directory the fleet's configuration
//!    tool writes ([`contract_dir`]: the valid file with the highest
//!    version, bad files rejected with a reason, an inotify watch).
//! 6. **Enforcement**: [`proc::pin_process`] pins every thread and verifies
//!    it; the [`backend::QuotaBackend`] seam throttles a process once it has
//!    used its per-period [`backend::QuotaSet`] — the userspace backend (perf
//!    overflow signals + SIGSTOP or cgroup freeze) or the `SCHED_SRA` kernel
//!    class, picked by [`backend::detect`].
//!
//! Safety nets: the [`guardian`] is a separate process that thaws everything
//! registered with it if the agent dies; the [`deadman`] switch is a
//! kernel-held `SIGCONT` for a stopped process if every hwqos process dies.
//!
//! Quotas come from the resource-limit finder ([`limit`], thesis Listing
//! 8.2): [`limit::find_limit`] measures the victim alone through a
//! [`limit::LimitProbe`] — for real a [`limit::CommandProbe`], *x* from a
//! shell command and *r* from a [`counter::ProcessCounter`] — then ramps
//! interference through a [`limit::Ramp`] until *x* falls below ω·x̄. The
//! interference is a set of [`leech::LeechThreads`] (CPU, memory, FPU or
//! page-fault leeches at a duty cycle, thesis 8.4.2), which the QoS
//! experiments also use.
//!
//! Prediction ([`predict`], thesis 6.4.4): the relation of *x* to r̂ fitted
//! in a production recording (OLS with R², n, residual error), r̂'s level in
//! a test run under a changed configuration, and the predicted *x* under the
//! change with an autocorrelation-aware prediction interval
//! ([`predict::predict_recordings`]; `hwqos-sra predict`).
//!
//! The fleet's Decision Engine ([`prometheus`]): the same analysis over
//! the series every node's monitor exposes, read back from Prometheus's
//! HTTP API (a bounded HTTP/1.1 client, no TLS), grouped per process name
//! and node, pooled over the nodes, with the nodes whose correlation
//! departs from the fleet flagged (`hwqos-sra analyse --prometheus`).
//!
//! [`input`] reads files with a size bound and refuses duplicate JSON keys;
//! every fallible call returns the one error type, [`SchedError`].
//!
//! ```
//! use hwqos_sched::contract::Contract;
//!
//! let c = Contract::parse(
//!     r#"{ "schema": "hwqos.contract/1",
//!          "entries": [ { "name": "web", "process": "name:nginx",
//!                         "affinity": [0, 1], "period_us": 10000,
//!                         "quotas": { "sw.page_faults": 1234 } } ] }"#,
//! )?;
//! assert_eq!(c.entries[0].period(), std::time::Duration::from_millis(10));
//! // A zero quota means nothing: refused, naming the entry.
//! let bad = c.to_json().replace("1234", "0");
//! assert!(Contract::parse(&bad).unwrap_err().to_string().contains("`web`"));
//! # Ok::<(), hwqos_sched::SchedError>(())
//! ```

#![deny(missing_docs)]

pub mod analysis;
pub mod backend;
pub mod contract;
pub mod contract_dir;
pub mod counter;
pub mod deadman;
pub mod decision;
pub mod error;
pub mod evaluation;
pub mod guardian;
pub mod input;
pub mod leech;
pub mod limit;
pub mod model;
pub mod predict;
pub mod proc;
pub mod prometheus;

pub use error::SchedError;
