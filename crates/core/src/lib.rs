//! hwqos-core: the one measurement type that travels through every hwqos crate,
//! file and socket, plus the clocks, the drift-free ticker and the statistics
//! that every agent needs.
//!
//! - [`metric`]: stable dotted metric names with units, defined once in a registry;
//! - [`scope`]: what a sample is about (system, CPU, process, thread, cgroup, stream);
//! - [`sample`]: [`Sample`], [`Frame`] (the samples of one tick) and counter readings
//!   with `time_enabled`/`time_running` so multiplexed counts are scaled honestly;
//! - [`series`]: a bounded ring of values with mean, percentiles, resampling,
//!   correlation and low-pass filtering;
//! - [`time`], [`ticker`]: monotonic and wall clocks, and a periodic ticker on
//!   absolute deadlines that never accumulates error;
//! - [`recording`]: recordings on disk (JSON lines with a schema header, CSV);
//! - [`stats`], [`filter`]: descriptive statistics, Student-t confidence intervals,
//!   Pearson correlation, Butterworth filtering;
//! - [`mem`]: fresh anonymous pages with a known page-fault count;
//! - [`fs`]: reading user-given files safely (regular files only, bounded).

pub mod affinity;
pub mod filter;
pub mod fs;
pub mod mem;
pub mod metric;
pub mod recording;
pub mod sample;
pub mod scope;
pub mod series;
pub mod stats;
pub mod ticker;
pub mod time;

pub use filter::Butterworth;
pub use metric::{MetricInfo, MetricKind, MetricName, Unit};
pub use sample::{CounterReading, Frame, Sample, ScopeLabel};
pub use scope::Scope;
pub use series::Series;
pub use ticker::{SleepStrategy, Tick, Ticker, TickerError};
pub use time::Timestamp;
