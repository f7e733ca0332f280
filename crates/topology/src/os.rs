//! The OS inventory attached to a hardware model: the kernel and the settings
//! that change how the same hardware performs (seed 000 section 3.2): kernel
//! version, clocksource, HZ, transparent huge pages, CPU frequency governors,
//! isolated CPUs, and the memory and scheduler sysctls.
//!
//! [`OsInventory::read`] reads from a root directory (fixtures in tests);
//! [`OsInventory::this_node`] also measures HZ from jiffies when no kernel
//! config is installed. Unreadable items are absent, not errors.

use crate::sysfs::read_trimmed;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// The memory and scheduler sysctls recorded (`/proc/sys/<dotted path>`);
/// every `kernel.sched_*` file is added to these.
pub const SYSCTLS: [&str; 14] = [
    "vm.swappiness",
    "vm.dirty_ratio",
    "vm.dirty_background_ratio",
    "vm.dirty_bytes",
    "vm.dirty_background_bytes",
    "vm.dirty_expire_centisecs",
    "vm.dirty_writeback_centisecs",
    "vm.min_free_kbytes",
    "vm.overcommit_memory",
    "vm.zone_reclaim_mode",
    "vm.stat_interval",
    "kernel.numa_balancing",
    "kernel.perf_event_paranoid",
    "kernel.timer_migration",
];

/// Most entries read from one directory of tunables (bounds a corrupt tree).
const MAX_TUNABLES: usize = 256;

/// Where the HZ value came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HzSource {
    /// `CONFIG_HZ` in `/boot/config-<release>` (`/proc/config.gz` is not read).
    KernelConfig,
    /// Jiffies counted over a measured interval, rounded to a valid HZ.
    MeasuredJiffies,
}

/// The OS settings that matter to performance.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct OsInventory {
    /// `kernel.osrelease` (`6.18.0-1-amd64`).
    pub kernel_release: Option<String>,
    /// `/proc/version`.
    pub kernel_version: Option<String>,
    /// `/proc/cmdline` (isolcpus, nohz_full, mitigations …).
    pub cmdline: Option<String>,
    /// The current clocksource (`tsc`, `kvm-clock`, `arch_sys_counter`…):
    /// what `clock_gettime` costs depends on it.
    pub clocksource: Option<String>,
    /// The clocksources the kernel offers, space-separated as sysfs lists them.
    pub available_clocksources: Option<String>,
    /// The kernel's timer tick rate (`CONFIG_HZ`), the granularity of
    /// jiffies-based accounting; `None` when neither found nor measured.
    pub hz: Option<u32>,
    /// Where [`hz`](Self::hz) came from; `None` when `hz` is.
    pub hz_source: Option<HzSource>,
    /// The selected transparent-huge-page mode (`always`, `madvise`, `never`).
    pub thp_enabled: Option<String>,
    /// The selected transparent-huge-page defrag mode (`always`, `defer`,
    /// `madvise`, `never`…).
    pub thp_defrag: Option<String>,
    /// Governor → CPUs using it; empty when the node has no cpufreq driver
    /// (typical of VMs).
    pub cpufreq_governors: BTreeMap<String, String>,
    /// `/sys/devices/system/cpu/isolated` (CPU list, empty when none).
    pub isolated_cpus: Option<String>,
    /// `/sys/devices/system/cpu/nohz_full` (CPU list of tickless CPUs; the
    /// kernel writes `(null)` when none).
    pub nohz_full: Option<String>,
    /// Dotted sysctl name → value (`vm.swappiness` → `60`), plus
    /// `debug.sched.<file>` for the scheduler tunables in
    /// `/sys/kernel/debug/sched/` when debugfs is mounted and readable.
    pub sysctls: BTreeMap<String, String>,
}

impl OsInventory {
    /// Reads the inventory from files under `root`; HZ only from a kernel config.
    pub fn read(root: &Path) -> OsInventory {
        let mut inv = OsInventory {
            kernel_release: read_trimmed(&root.join("proc/sys/kernel/osrelease")),
            kernel_version: read_trimmed(&root.join("proc/version")),
            cmdline: read_trimmed(&root.join("proc/cmdline")),
            clocksource: read_trimmed(
                &root.join("sys/devices/system/clocksource/clocksource0/current_clocksource"),
            ),
            available_clocksources: read_trimmed(
                &root.join("sys/devices/system/clocksource/clocksource0/available_clocksource"),
            ),
            thp_enabled: read_trimmed(&root.join("sys/kernel/mm/transparent_hugepage/enabled"))
                .and_then(|t| selected(&t)),
            thp_defrag: read_trimmed(&root.join("sys/kernel/mm/transparent_hugepage/defrag"))
                .and_then(|t| selected(&t)),
            isolated_cpus: read_trimmed(&root.join("sys/devices/system/cpu/isolated")),
            nohz_full: read_trimmed(&root.join("sys/devices/system/cpu/nohz_full")),
            ..OsInventory::default()
        };
        if let Some(release) = &inv.kernel_release {
            if let Some(hz) = std::fs::read_to_string(root.join(format!("boot/config-{release}")))
                .ok()
                .and_then(|t| config_hz(&t))
            {
                inv.hz = Some(hz);
                inv.hz_source = Some(HzSource::KernelConfig);
            }
        }
        inv.cpufreq_governors = read_governors(root);
        for name in SYSCTLS {
            let path = root.join("proc/sys").join(name.replace('.', "/"));
            if let Some(v) = read_trimmed(&path) {
                inv.sysctls.insert(name.to_string(), v);
            }
        }
        for (file, value) in read_dir_values(&root.join("proc/sys/kernel"), Some("sched_")) {
            inv.sysctls.insert(format!("kernel.{file}"), value);
        }
        for (file, value) in read_dir_values(&root.join("sys/kernel/debug/sched"), None) {
            inv.sysctls.insert(format!("debug.sched.{file}"), value);
        }
        inv
    }

    /// The live node's inventory; when no kernel config gives HZ, it is
    /// measured by counting jiffies (`/proc/timer_list`) over 200 ms.
    pub fn this_node() -> OsInventory {
        let mut inv = OsInventory::read(Path::new("/"));
        if inv.hz.is_none() {
            if let Some(hz) = measure_hz(std::time::Duration::from_millis(200)) {
                inv.hz = Some(hz);
                inv.hz_source = Some(HzSource::MeasuredJiffies);
            }
        }
        inv
    }
}

/// The bracketed choice of a sysfs selection file (`always [madvise] never`).
fn selected(text: &str) -> Option<String> {
    let start = text.find('[')?;
    let end = text[start..].find(']')? + start;
    Some(text[start + 1..end].to_string())
}

/// `CONFIG_HZ=250` from kernel config text.
pub fn config_hz(text: &str) -> Option<u32> {
    text.lines()
        .find_map(|l| l.strip_prefix("CONFIG_HZ="))
        .and_then(|v| v.trim().parse().ok())
}

/// The HZ values Linux can be built with; a measurement is rounded to the nearest.
pub const VALID_HZ: [u32; 5] = [100, 250, 300, 500, 1000];

/// Rounds a measured jiffies rate to the nearest valid HZ; `None` when it is
/// more than 10 % away from every one of them.
pub fn round_hz(rate: f64) -> Option<u32> {
    VALID_HZ
        .iter()
        .copied()
        .min_by(|a, b| {
            (f64::from(*a) - rate)
                .abs()
                .total_cmp(&(f64::from(*b) - rate).abs())
        })
        .filter(|hz| (f64::from(*hz) - rate).abs() <= 0.1 * f64::from(*hz))
}

fn read_jiffies() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/timer_list").ok()?;
    text.lines()
        .find_map(|l| l.trim().strip_prefix("jiffies:"))
        .and_then(|v| v.trim().parse().ok())
}

/// Counts jiffies over `interval` and rounds the rate to a valid HZ.
pub fn measure_hz(interval: std::time::Duration) -> Option<u32> {
    let t0 = hwqos_core::time::monotonic_ns();
    let j0 = read_jiffies()?;
    std::thread::sleep(interval);
    let j1 = read_jiffies()?;
    let t1 = hwqos_core::time::monotonic_ns();
    let secs = (t1 - t0) as f64 / 1e9;
    round_hz(j1.checked_sub(j0)? as f64 / secs)
}

fn read_governors(root: &Path) -> BTreeMap<String, String> {
    let mut by_gov: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    let dir = root.join("sys/devices/system/cpu");
    if let Ok(entries) = std::fs::read_dir(&dir) {
        for e in entries.flatten().take(crate::sysfs::MAX_CPU as usize + 1) {
            let name = e.file_name();
            let Some(cpu) = name
                .to_str()
                .and_then(|n| n.strip_prefix("cpu"))
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            if let Some(g) = read_trimmed(&e.path().join("cpufreq/scaling_governor")) {
                by_gov.entry(g).or_default().push(cpu);
            }
        }
    }
    by_gov
        .into_iter()
        .map(|(g, cpus)| (g, crate::sysfs::format_cpu_list(&cpus)))
        .collect()
}

/// Regular files in `dir` (optionally only those starting with `prefix`) and
/// their trimmed one-line values; unreadable files and directories are skipped.
fn read_dir_values(dir: &Path, prefix: Option<&str>) -> Vec<(String, String)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<(String, String)> = entries
        .flatten()
        .take(MAX_TUNABLES)
        .filter(|e| e.file_type().map(|t| t.is_file()).unwrap_or(false))
        .filter_map(|e| {
            let name = e.file_name().to_str()?.to_string();
            if prefix.is_some_and(|p| !name.starts_with(p)) {
                return None;
            }
            let value = read_trimmed(&e.path())?;
            // Multi-line debug files (e.g. `debug`) are not tunables.
            (!value.contains('\n') && value.len() <= 256).then_some((name, value))
        })
        .collect();
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selections_and_config() {
        assert_eq!(
            selected("always [madvise] never").as_deref(),
            Some("madvise")
        );
        assert_eq!(selected("never"), None);
        assert_eq!(
            config_hz("# x\nCONFIG_HZ_250=y\nCONFIG_HZ=250\n"),
            Some(250)
        );
        assert_eq!(config_hz("CONFIG_NO_HZ=y\n"), None);
    }

    #[test]
    fn hz_rounding() {
        assert_eq!(round_hz(248.0), Some(250));
        assert_eq!(round_hz(1003.5), Some(1000));
        assert_eq!(round_hz(99.0), Some(100));
        assert_eq!(round_hz(700.0), None);
    }
}
