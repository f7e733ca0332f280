//! Counter backends: where counts come from.
//!
//! [`CounterBackend`] is the seam between the sampler and the counters. The
//! shipped backend is [`perf::PerfBackend`] (`perf_event_open` through
//! perf-event2); [`sim::SimBackend`] is a deterministic simulator with scriptable
//! counts, a finite number of hardware counters and multiplexing, used to test the
//! hardware paths on nodes without a PMU. Both see exactly the same calls.

pub mod perf;
pub mod sim;

use crate::{Event, PmuError};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// What a counter group counts.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum CountTarget {
    /// One task (thread). With `inherit`, tasks it creates later are counted too.
    Task {
        /// The thread id.
        tid: u32,
        /// Also count threads and processes the task creates after the group is opened.
        inherit: bool,
    },
    /// Everything that runs on one CPU (system-wide per-CPU counting).
    Cpu {
        /// The CPU number as the kernel numbers it.
        cpu: u32,
    },
    /// Everything in a cgroup v2 directory, on one CPU.
    Cgroup {
        /// The cgroup's directory under the cgroup v2 mount.
        path: PathBuf,
        /// The CPU counted on (one group per CPU covers the whole cgroup).
        cpu: u32,
    },
}

/// Handle of an open counter group within one backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct GroupId(pub u64);

/// A cumulative reading of a group since it was opened: the group's
/// `time_enabled`/`time_running` (ns) and one value per event, in the order the
/// events were given to [`CounterBackend::open_group`].
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct GroupReading {
    /// Nanoseconds the group was enabled.
    pub time_enabled: u64,
    /// Nanoseconds the group was actually on the PMU; less than `time_enabled`
    /// when it was multiplexed (counts are then scaled by enabled/running).
    pub time_running: u64,
    /// Raw cumulative counts, one per event, in the order given at open.
    pub values: Vec<u64>,
}

/// Which kind of backend produced a number; defined with the live API
/// protocol, which reports it.
pub use hwqos_api::BackendKind;

/// A source of counter groups. Groups are opened disabled.
pub trait CounterBackend: Send {
    /// Which backend this is (reported with every number it produced).
    fn kind(&self) -> BackendKind;

    /// How many events can be counted at once without multiplexing, if known.
    fn capacity(&self) -> Option<usize>;

    /// Opens `events` as one group on `target`, disabled. Fails with
    /// [`PmuError::Unavailable`] naming the first event the node cannot count.
    fn open_group(&mut self, target: &CountTarget, events: &[Event]) -> Result<GroupId, PmuError>;

    /// Starts the group counting; its events start and stop together.
    fn enable(&mut self, group: GroupId) -> Result<(), PmuError>;

    /// Stops the group counting; counts so far are kept and readable.
    fn disable(&mut self, group: GroupId) -> Result<(), PmuError>;

    /// Reads the group's cumulative counts.
    fn read(&mut self, group: GroupId) -> Result<GroupReading, PmuError>;

    /// Reads the group's cumulative counts into `out`, reusing its buffer: the
    /// sampler's per-tick form of [`CounterBackend::read`] (same numbers). The
    /// default calls `read`; a backend that can read without allocating
    /// overrides it. On error `out` is unspecified.
    fn read_into(&mut self, group: GroupId, out: &mut GroupReading) -> Result<(), PmuError> {
        *out = self.read(group)?;
        Ok(())
    }

    /// Closes the group; unknown ids are ignored.
    fn close(&mut self, group: GroupId);

    /// Whether `event` can be counted here, checked by opening it on the calling
    /// thread and closing it again.
    fn probe(&mut self, event: &Event) -> Result<(), PmuError> {
        let me = CountTarget::Task {
            tid: nix::unistd::gettid().as_raw() as u32,
            inherit: false,
        };
        let g = self.open_group(&me, std::slice::from_ref(event))?;
        self.close(g);
        Ok(())
    }
}
