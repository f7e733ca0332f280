//! The event catalog: turns an event name into a resolved [`Event`]
//! (`perf_event_attr` encoding + metric name).
//!
//! Accepted names:
//! - generic hwqos names: `hw.cycles`, `hw.l1d.miss`, `hw.l2.miss`, `sw.task_clock`, …
//!   ([`generic_event_names`]); `hw.l2.*` is not in the generic perf ABI and comes
//!   from the curated per-CPU-model table;
//! - perf's symbolic names and aliases (`cycles`, `cs`, `task-clock`) and its
//!   legacy cache syntax `<cache>-<op>-<result>` (`L1-dcache-load-misses`), reported
//!   as the generic metric (as in perf, `L2-…` means the last-level cache; the real
//!   L2 is `hw.l2.*`);
//! - raw events `rNNNN` (hex `config` on `PERF_TYPE_RAW`), metric `hw.raw.rnnnn`;
//! - sysfs PMU syntax `pmu/term=value,term,…/` (`cpu/event=0x51,umask=0x1/`,
//!   `cpu/cache-misses/`, `msr/tsc/`), encoded through the PMU's `type`, `format/`
//!   and `events/` files, metric `hw.raw.<pmu>_<terms>`.
//!
//! Everything is read from a configurable sysfs root so that other machines'
//! trees (test fixtures, target specs) resolve exactly like this node's.
//! Event modifiers (`:u`, `:k`, `/u`) are rejected as not supported yet.

pub mod cpu;
pub(crate) mod curated;
pub(crate) mod generic;
pub mod sysfs;

pub use cpu::{CpuModel, Vendor};
pub use sysfs::PmuInfo;

use crate::event::{perf_type, Event, EventAttr, EventSource};
use crate::PmuError;
use generic::{CacheParse, CacheResult, Encoding};
use hwqos_core::MetricName;
use std::path::{Path, PathBuf};

/// The kinds of names the catalog knows, for listings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NameSource {
    /// hwqos's `hw.*`/`sw.*` names.
    Generic,
    /// perf's symbolic names and canonical cache names.
    Perf,
    /// `pmu/alias/` for every alias in the PMUs' `events/` directories.
    Pmu,
    /// Generic names encoded from the curated per-model table (`hw.l2.*`)
    /// that resolve on this catalog's CPU.
    Curated,
}

/// Resolves event names against one node's PMUs and CPU model.
///
/// perf's names and hwqos's generic names resolve to the same metric;
/// software events resolve on every node, hardware ones need its PMU:
///
/// ```
/// use hwqos_pmu::Catalog;
///
/// let catalog = Catalog::for_this_node();
/// let cs = catalog.resolve("cs")?; // perf's alias
/// assert_eq!(cs.metric.as_str(), "sw.context_switches");
/// assert!(!cs.is_hardware());
/// assert_eq!(catalog.resolve("task-clock")?.metric.as_str(), "sw.task_clock");
/// assert!(catalog.resolve("no-such-event").is_err());
/// # Ok::<(), hwqos_pmu::PmuError>(())
/// ```
#[derive(Clone, Debug)]
pub struct Catalog {
    sysfs_root: PathBuf,
    pmus: Vec<PmuInfo>,
    cpu: Option<CpuModel>,
    warnings: Vec<String>,
}

impl Catalog {
    /// Loads the PMUs under `<sysfs_root>/bus/event_source/devices`, without a CPU
    /// model (curated events are then unavailable). Never fails: missing
    /// directories just mean fewer PMUs (see [`Catalog::warnings`]).
    pub fn load(sysfs_root: &Path) -> Catalog {
        let (pmus, warnings) = sysfs::load_pmus(sysfs_root);
        Catalog {
            sysfs_root: sysfs_root.to_path_buf(),
            pmus,
            cpu: None,
            warnings,
        }
    }

    /// Loads the PMUs and the CPU model from `<proc_root>/cpuinfo`.
    pub fn load_with_cpu(sysfs_root: &Path, proc_root: &Path) -> Catalog {
        Catalog::load(sysfs_root).with_cpu(CpuModel::read(proc_root))
    }

    /// This node: `/sys` and `/proc`.
    pub fn for_this_node() -> Catalog {
        Catalog::load_with_cpu(Path::new("/sys"), Path::new("/proc"))
    }

    /// A catalog from already-known PMUs (e.g. a target spec's) and CPU model.
    pub fn from_parts(pmus: Vec<PmuInfo>, cpu: Option<CpuModel>) -> Catalog {
        let mut pmus = pmus;
        pmus.sort_by(|a, b| a.name.cmp(&b.name));
        Catalog {
            sysfs_root: PathBuf::from("(target spec)"),
            pmus,
            cpu,
            warnings: Vec::new(),
        }
    }

    /// Sets the CPU model the curated table is selected by.
    pub fn with_cpu(mut self, cpu: CpuModel) -> Catalog {
        self.cpu = Some(cpu);
        self
    }

    /// The CPU model curated events are selected by; `None` when the catalog was
    /// loaded without one (then curated events are unavailable).
    pub fn cpu(&self) -> Option<&CpuModel> {
        self.cpu.as_ref()
    }

    /// All PMUs, sorted by name.
    pub fn pmus(&self) -> &[PmuInfo] {
        &self.pmus
    }

    /// The PMU with this sysfs name (`cpu`, `uncore_imc_0`), if the node has it.
    pub fn pmu(&self, name: &str) -> Option<&PmuInfo> {
        self.pmus.iter().find(|p| p.name == name)
    }

    /// The CPU core PMUs (`cpu`, `cpu_core`, `armv8_*`, …), sorted by name.
    pub fn core_pmus(&self) -> impl Iterator<Item = &PmuInfo> {
        self.pmus.iter().filter(|p| p.is_core())
    }

    /// What could not be read while loading (skipped PMUs, missing directories).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Known names of one kind.
    pub fn names(&self, source: NameSource) -> Vec<String> {
        match source {
            NameSource::Generic => generic_event_names()
                .into_iter()
                .map(str::to_string)
                .collect(),
            NameSource::Perf => perf_event_names(),
            NameSource::Pmu => self
                .pmus
                .iter()
                .flat_map(|p| {
                    p.events
                        .keys()
                        .map(move |alias| format!("{}/{alias}/", p.name))
                })
                .collect(),
            NameSource::Curated => generic::GENERIC
                .iter()
                .filter(|(_, enc)| matches!(enc, Encoding::CuratedL2(_)))
                .map(|(name, _)| *name)
                .filter(|name| self.resolve(name).is_ok())
                .map(str::to_string)
                .collect(),
        }
    }

    /// The names `--list-events` shows: every generic name, then every alias of
    /// the core PMUs.
    pub fn listing_names(&self) -> Vec<String> {
        let mut names = self.names(NameSource::Generic);
        for pmu in self.core_pmus() {
            names.extend(
                pmu.events
                    .keys()
                    .map(|alias| format!("{}/{alias}/", pmu.name)),
            );
        }
        names
    }

    /// Resolves an event name (see the module docs for the syntaxes).
    ///
    /// Fails with [`PmuError::UnknownEvent`] naming what is wrong with the name,
    /// or [`PmuError::Unavailable`] for a well-formed generic name this catalog's
    /// CPU has no encoding for (`hw.l2.*` on a model not in the curated table).
    pub fn resolve(&self, name: &str) -> Result<Event, PmuError> {
        let unknown = |reason: String| PmuError::UnknownEvent {
            name: name.to_string(),
            reason,
        };
        if name.trim().is_empty() {
            return Err(unknown("the event name is empty".to_string()));
        }
        if let Some(c) = name
            .chars()
            .find(|c| c.is_whitespace() || c.is_control() || !c.is_ascii())
        {
            return Err(unknown(format!(
                "event names are ASCII without spaces or control characters; found {c:?}"
            )));
        }
        if name.contains('/') {
            return self.resolve_pmu_syntax(name).map_err(unknown);
        }
        if let Some((base, modifiers)) = name.rsplit_once(':') {
            let mut event = match self.resolve(base) {
                Ok(event) => event,
                Err(PmuError::UnknownEvent { .. }) => {
                    return Err(unknown(
                        "tracepoints (`subsystem:event`) are not supported, and the part before `:` is not an event name".to_string(),
                    ))
                }
                Err(other) => return Err(other),
            };
            event.attr.modes = crate::Modes::parse(modifiers).map_err(unknown)?;
            event.name = name.to_string();
            return Ok(event);
        }
        if name.starts_with("hw.") || name.starts_with("sw.") {
            return match generic::generic(name) {
                Some(enc) => self.encode_generic(name, name, enc, EventSource::Generic),
                None => Err(unknown(
                    self.unknown_reason(name, "is not a generic hwqos event name"),
                )),
            };
        }
        if let Some(generic_name) = generic::perf_symbolic(name) {
            let enc = generic::generic(generic_name).ok_or_else(|| {
                unknown(format!(
                    "internal: `{generic_name}` missing from the generic table"
                ))
            })?;
            return self.encode_generic(name, generic_name, enc, EventSource::PerfName);
        }
        if let Some(hex) = name
            .strip_prefix('r')
            .filter(|h| h.starts_with(|c: char| c.is_ascii_hexdigit()))
        {
            return self.resolve_raw(name, hex).map_err(unknown);
        }
        match generic::parse_cache(name) {
            Ok(cache) => {
                let metric = metric_name(&cache.metric()).map_err(unknown)?;
                return Ok(Event {
                    name: name.to_string(),
                    metric,
                    attr: attr(perf_type::HW_CACHE, cache.config()),
                    source: EventSource::PerfName,
                });
            }
            Err(CacheParse::Invalid(reason)) => return Err(unknown(reason)),
            Err(CacheParse::NotCache) => {}
        }
        Err(unknown(
            self.unknown_reason(name, "is not a known event name"),
        ))
    }

    fn encode_generic(
        &self,
        name: &str,
        generic_name: &str,
        enc: Encoding,
        source: EventSource,
    ) -> Result<Event, PmuError> {
        let metric = metric_name(generic_name).map_err(|reason| PmuError::UnknownEvent {
            name: name.to_string(),
            reason,
        })?;
        if let Some((type_, config)) = enc.attr() {
            return Ok(Event {
                name: name.to_string(),
                metric,
                attr: attr(type_, config),
                source,
            });
        }
        let Encoding::CuratedL2(result) = enc else {
            return Err(PmuError::UnknownEvent {
                name: name.to_string(),
                reason: "internal: generic encoding without attr".to_string(),
            });
        };
        let (table, attr) = self
            .curated_l2(result)
            .map_err(|reason| PmuError::Unavailable {
                name: name.to_string(),
                reason,
            })?;
        Ok(Event {
            name: name.to_string(),
            metric,
            attr,
            source: EventSource::Curated { table },
        })
    }

    /// The encoding of L2 accesses or misses on this catalog's CPU.
    fn curated_l2(&self, result: CacheResult) -> Result<(String, EventAttr), String> {
        let cpu = self.cpu.as_ref().ok_or_else(|| {
            "the CPU model is not known (catalog loaded without /proc/cpuinfo), so the model-specific L2 event cannot be chosen".to_string()
        })?;
        match cpu.vendor {
            Vendor::Intel | Vendor::Amd | Vendor::Hygon => {
                let row = curated::x86_row(cpu).ok_or_else(|| {
                    format!(
                        "the generic perf ABI has no L2 event and {} is not in hwqos's curated table (it covers {}); use a raw event such as rNNNN or cpu/event=…,umask=…/",
                        cpu.describe(),
                        curated::COVERAGE
                    )
                })?;
                let (event, umask) = curated::x86_l2(row, result);
                let core = self.pmu("cpu");
                let attr = match core {
                    Some(pmu)
                        if pmu.formats.contains_key("event")
                            && pmu.formats.contains_key("umask") =>
                    {
                        sysfs::encode(pmu, &format!("event={event:#x},umask={umask:#x}"))?
                    }
                    Some(pmu) => attr(pmu.type_, curated::x86_raw_config(event, umask)),
                    None => attr(perf_type::RAW, curated::x86_raw_config(event, umask)),
                };
                Ok((row.table.to_string(), attr))
            }
            Vendor::Arm => {
                let (code, alias) = match result {
                    CacheResult::Access => curated::ARM_L2D_CACHE,
                    CacheResult::Miss => curated::ARM_L2D_CACHE_REFILL,
                };
                let table = curated::ARM_TABLE.to_string();
                let cores: Vec<&PmuInfo> = self.core_pmus().collect();
                // The arm_pmuv3 driver lists only the events PMCEID says the core
                // implements, so an alias is the best evidence; with several core
                // PMUs (big.LITTLE) the first that has it is used.
                if let Some(pmu) = cores.iter().find(|p| sysfs::find_alias(p, alias).is_some()) {
                    return Ok((table, sysfs::encode(pmu, alias)?));
                }
                if let Some(pmu) = cores.iter().find(|p| !p.events.is_empty()) {
                    return Err(format!(
                        "the core PMU `{}` does not list `{alias}` (event {code:#x}) among its events, so this core does not implement it",
                        pmu.name
                    ));
                }
                match cores.first() {
                    Some(pmu) if pmu.formats.contains_key("event") => {
                        Ok((table, sysfs::encode(pmu, &format!("event={code:#x}"))?))
                    }
                    Some(pmu) => Ok((table, attr(pmu.type_, code))),
                    None => Ok((table, attr(perf_type::RAW, code))),
                }
            }
            Vendor::Unknown => Err(format!(
                "the CPU model is unknown ({}), so the model-specific L2 event cannot be chosen",
                cpu.describe()
            )),
        }
    }

    fn resolve_raw(&self, name: &str, hex: &str) -> Result<Event, String> {
        if !hex.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(format!(
                "raw events are `r` followed by hex digits (e.g. r01c4); `{hex}` is not hexadecimal"
            ));
        }
        let trimmed = hex.trim_start_matches('0');
        if trimmed.len() > 16 {
            return Err(format!("raw config `{hex}` does not fit in 64 bits"));
        }
        let config = if trimmed.is_empty() {
            0
        } else {
            u64::from_str_radix(trimmed, 16).map_err(|e| format!("raw config `{hex}`: {e}"))?
        };
        Ok(Event {
            name: name.to_string(),
            metric: metric_name(&format!("hw.raw.r{}", hex.to_ascii_lowercase()))?,
            attr: attr(perf_type::RAW, config),
            source: EventSource::Raw,
        })
    }

    fn resolve_pmu_syntax(&self, name: &str) -> Result<Event, String> {
        let (pmu_name, rest) = name.split_once('/').unwrap_or((name, ""));
        let Some(close) = rest.rfind('/') else {
            return Err(format!(
                "missing the closing `/`: write `{pmu_name}/TERMS/`"
            ));
        };
        let (terms, modifiers) = (&rest[..close], &rest[close + 1..]);
        if !modifiers.is_empty() {
            return Err(format!(
                "event modifiers (`/{modifiers}` after the closing slash) are not supported yet"
            ));
        }
        if terms.contains('/') {
            return Err("a `pmu/terms/` event has exactly two slashes".to_string());
        }
        if pmu_name.is_empty() {
            return Err("no PMU name before the first `/`".to_string());
        }
        let Some(pmu) = self.pmu(pmu_name) else {
            let known: Vec<&str> = self.pmus.iter().map(|p| p.name.as_str()).collect();
            let mut msg = format!(
                "no PMU `{pmu_name}` under {}; PMUs here: {}",
                sysfs::devices_dir(&self.sysfs_root).display(),
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                }
            );
            if let Some(best) = suggest(pmu_name, known.iter().copied()) {
                msg.push_str(&format!(" (did you mean `{best}`?)"));
            }
            return Err(msg);
        };
        let attr = sysfs::encode(pmu, terms)?;
        Ok(Event {
            name: name.to_string(),
            metric: metric_name(&format!(
                "hw.raw.{}",
                sanitize(&format!("{pmu_name}_{terms}"))
            ))?,
            attr,
            source: EventSource::Sysfs {
                pmu: pmu_name.to_string(),
            },
        })
    }

    /// "`x` is not …; did you mean …" with the closest known name, and a hint when
    /// the name is an alias of some PMU.
    fn unknown_reason(&self, name: &str, what: &str) -> String {
        let mut msg = format!("`{name}` {what}");
        let owners: Vec<String> = self
            .pmus
            .iter()
            .filter_map(|p| {
                sysfs::find_alias(p, name).map(|(alias, _)| format!("{}/{alias}/", p.name))
            })
            .collect();
        if !owners.is_empty() {
            msg.push_str(&format!(
                "; it is an event of a PMU: write it as {}",
                owners.join(" or ")
            ));
            return msg;
        }
        let generic = generic_event_names();
        let perf = perf_event_names();
        let candidates: Vec<&str> = if name.starts_with("hw.") || name.starts_with("sw.") {
            generic
        } else {
            generic
                .into_iter()
                .chain(perf.iter().map(String::as_str))
                .collect()
        };
        match suggest(name, candidates.into_iter()) {
            Some(best) => msg.push_str(&format!("; did you mean `{best}`?")),
            None => msg.push_str("; see `--list-events` for the names this node knows"),
        }
        msg
    }
}

fn attr(type_: u32, config: u64) -> EventAttr {
    EventAttr {
        type_,
        config,
        config1: 0,
        config2: 0,
        modes: Default::default(),
    }
}

fn metric_name(name: &str) -> Result<MetricName, String> {
    MetricName::new(name).map_err(|e| format!("cannot form a metric name: {e}"))
}

/// Lower-case, every run of characters outside `[a-z0-9]` becomes one `_`,
/// no leading or trailing `_` (`cpu_event=0x51,umask=0x1` → `cpu_event_0x51_umask_0x1`).
fn sanitize(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars().map(|c| c.to_ascii_lowercase()) {
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            out.push(c);
        } else if !out.is_empty() && !out.ends_with('_') {
            out.push('_');
        }
    }
    let trimmed = out.trim_end_matches('_');
    if trimmed.is_empty() {
        "event".to_string()
    } else {
        trimmed.to_string()
    }
}

/// The closest candidate by case-insensitive edit distance, if close enough to be
/// a plausible typo.
pub(crate) fn suggest<'a>(
    name: &str,
    candidates: impl Iterator<Item = &'a str>,
) -> Option<&'a str> {
    let lower = name.to_ascii_lowercase();
    let limit = (name.len() / 3).max(2);
    candidates
        .filter(|c| c.len().abs_diff(name.len()) <= limit)
        .map(|c| (edit_distance(&lower, &c.to_ascii_lowercase()), c))
        .filter(|&(d, _)| d <= limit)
        .min_by_key(|&(d, _)| d)
        .map(|(_, c)| c)
}

/// Levenshtein distance over bytes.
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, &ca) in a.iter().enumerate() {
        cur[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let substitute = prev[j] + usize::from(ca != cb);
            cur[j + 1] = substitute.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

/// hwqos's generic names (`hw.*` and `sw.*`), in registry order.
pub fn generic_event_names() -> Vec<&'static str> {
    generic::GENERIC.iter().map(|(name, _)| *name).collect()
}

/// perf's symbolic names (with aliases) and canonical legacy-cache names.
pub fn perf_event_names() -> Vec<String> {
    generic::PERF_SYMBOLIC
        .iter()
        .map(|(name, _)| name.to_string())
        .chain(generic::canonical_cache_names())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sanitize_and_suggest() {
        assert_eq!(
            sanitize("cpu_event=0x51,umask=0x1"),
            "cpu_event_0x51_umask_0x1"
        );
        assert_eq!(sanitize("msr_tsc"), "msr_tsc");
        assert_eq!(sanitize("--"), "event");
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(
            suggest("hw.cylces", generic_event_names().into_iter()),
            Some("hw.cycles")
        );
        assert_eq!(suggest("zzzzzzzz", generic_event_names().into_iter()), None);
    }
}
