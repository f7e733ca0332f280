//! hwqos-core: the one measurement type that travels through every hwqos crate,
//! file and socket, plus the clocks, the drift-free ticker and the statistics
//! that every agent needs.
//!
//! Everything hwqos measures — a PMU counter, a kernel software event, a procfs
//! statistic, an application's own latency — becomes a [`Sample`]: one value
//! of one [`MetricName`] about one [`Scope`] (the node, a CPU, a process, a
//! thread, a cgroup or a message stream) at one [`Timestamp`]. Counter samples
//! keep the kernel's raw [`CounterReading`] (`time_enabled`/`time_running`) so
//! that a value scaled from a multiplexed counter is flagged, never passed off
//! as a measured one. The samples of one sampling tick form a [`Frame`]; frames
//! are what the monitor stores, streams over its live API, writes to
//! [recordings](recording) and what every consumer (load generator, SRA agent,
//! relay, CLI) reads back. Frames serialize with serde, so the JSON form is the
//! same on disk and on the wire.
//!
//! Metric names are validated dotted names whose first part is the family
//! (`hw`, `sw`, `os`, `app`, `derived`); the [registry](metric::REGISTRY) gives
//! the unit, kind (counter increment or gauge) and help of every metric hwqos
//! produces, and [`metric::names`] has a constant for each so producers and
//! consumers cannot drift apart by a typo.
//!
//! Around the type sit the tools an agent needs to produce and analyse it: a
//! periodic [`Ticker`] on absolute deadlines that never drifts (with selectable
//! [`SleepStrategy`]s and lateness statistics), a bounded time [`Series`] with
//! percentiles, resampling, correlation and [`Butterworth`] filtering,
//! descriptive statistics with confidence intervals, and small, shared system
//! helpers (thread affinity, bounded file reads and atomic writes, fresh
//! anonymous memory). The crate has no async runtime or logging dependency, so
//! any Rust service can use it.
//!
//! - [`metric`]: stable dotted metric names with units, defined once in a registry;
//! - [`scope`]: what a sample is about (system, CPU, process, thread, cgroup, stream);
//! - [`sample`]: [`Sample`], [`Frame`] (the samples of one tick) and counter readings
//!   with `time_enabled`/`time_running` so multiplexed counts are scaled honestly;
//! - [`series`]: a bounded ring of values with mean, percentiles, resampling,
//!   correlation and low-pass filtering;
//! - [`time`], [`ticker`]: monotonic and wall clocks, and a periodic ticker on
//!   absolute deadlines that never accumulates error;
//! - [`recording`]: recordings on disk (JSON lines with a schema header; CSV
//!   with the crate feature `csv`, off by default);
//! - [`stats`], [`filter`]: descriptive statistics, Student-t confidence intervals,
//!   Pearson correlation, Butterworth filtering;
//! - [`mem`]: fresh anonymous pages with a known page-fault count;
//! - [`fs`]: reading user-given files safely (regular files only, bounded) and
//!   replacing files atomically;
//! - [`affinity`]: pinning threads to CPUs;
//! - [`watch_dir`]: documents distributed as files in a watched directory
//!   (inotify), the best valid one chosen.
//!
//! # Example
//!
//! A frame with one gauge and one multiplexed counter, as a sampler builds it:
//!
//! ```rust
//! use hwqos_core::metric::names;
//! use hwqos_core::{CounterReading, Frame, MetricName, Sample, Scope, Timestamp};
//!
//! let now = Timestamp::now();
//! let cpu0 = Scope::Cpu { cpu: 0 };
//! let util = Sample::gauge(now, cpu0.clone(), MetricName::from_static(names::OS_CPU_UTIL), 0.42);
//! // 1000 cycles counted while on the PMU for half of the 10 ms interval.
//! let reading = CounterReading { raw: 1000, time_enabled: 10_000_000, time_running: 5_000_000 };
//! let cycles = Sample::counter(now, cpu0.clone(), MetricName::from_static(names::HW_CYCLES), reading)
//!     .expect("the counter ran, so there is a value");
//! assert!(cycles.multiplexed());
//! assert_eq!(cycles.value, 2000.0); // scaled by time_enabled / time_running
//!
//! let frame = Frame {
//!     seq: 0,
//!     time: now,
//!     interval_ns: 10_000_000,
//!     samples: vec![util, cycles],
//!     labels: Vec::new(),
//! };
//! assert_eq!(frame.value(&cpu0, names::HW_CYCLES), Some(2000.0));
//! assert_eq!("cpu:0".parse::<Scope>().unwrap(), cpu0);
//! ```

#![deny(missing_docs)]

pub mod affinity;
pub mod compare;
pub mod filter;
pub mod fs;
pub mod mem;
pub mod metric;
pub mod process;
pub mod recording;
pub mod sample;
pub mod scope;
pub mod series;
pub mod stats;
pub mod ticker;
pub mod time;
pub mod watch_dir;

pub use filter::Butterworth;
pub use metric::{MetricInfo, MetricKind, MetricName, Unit};
pub use sample::{CounterReading, Frame, Sample, ScopeLabel};
pub use scope::Scope;
pub use series::Series;
pub use ticker::{SleepStrategy, Tick, Ticker, TickerError};
pub use time::Timestamp;
