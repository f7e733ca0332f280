//! Flushing (SIGUSR1, the API's `flush`, shutdown): the frames sampled since
//! the last flush are appended to the recordings in the output directory
//! (see [`crate::segments`]).

use crate::db::FlushError;
use crate::live::lock;
use crate::monitor::MonitorHandle;
use crate::segments::{FlushReport, OutputStats};
use crate::VERSION;
use hwqos_core::recording::{CounterClass, RecordedBackend, RecordingHeader};
use hwqos_pmu::backend::BackendKind;
use std::path::PathBuf;
use tracing::{info, warn};

impl MonitorHandle {
    /// Appends the frames sampled since the last flush to the recordings in
    /// the output directory and returns the files written to.
    pub fn flush(&self) -> Result<Vec<PathBuf>, FlushError> {
        self.flush_report().map(|r| r.paths)
    }

    /// [`MonitorHandle::flush`] with what it did: frames and bytes appended,
    /// frames lost since the previous flush, old segments removed.
    pub fn flush_report(&self) -> Result<FlushReport, FlushError> {
        let mut output = lock(&self.shared.output);
        let config = self.config();
        let (frames, stored) = lock(&self.shared.db).encoded_frames_after(output.last_seq());
        let info = lock(&self.shared.source_info).clone();
        let mut header = RecordingHeader::new(
            self.shared.node.clone(),
            self.shared.started,
            config.rate_hz,
            match info.backend {
                BackendKind::Perf => RecordedBackend::Perf,
                BackendKind::Simulated => RecordedBackend::Simulated,
            },
            // The writer states the class of every metric the run flushed.
            CounterClass::None,
        );
        header.event_sets = info.event_sets;
        header.writer = format!("hwqos-monitor {VERSION}");
        let result = output.append(
            &frames,
            stored,
            &header,
            &config.output.dir,
            &config.output.formats,
            config.output.limits(),
        );
        *lock(&self.shared.output_stats) = output.stats();
        drop(output);
        let report = result?;
        if let Some(gap) = report.gap {
            warn!(
                "flush: {gap}; flush more often or keep more frames ([database] frames, max_mib)"
            );
        }
        if !report.removed.is_empty() {
            info!(
                "flush: removed {} old recording files to stay within [output] max_mib = {}",
                report.removed.len(),
                config.output.max_mib
            );
        }
        info!(
            frames = report.frames,
            bytes = report.bytes,
            "flushed to {}",
            config.output.dir.display()
        );
        Ok(report)
    }

    /// What the flushes wrote and lost since start.
    pub fn output_stats(&self) -> OutputStats {
        *lock(&self.shared.output_stats)
    }
}
