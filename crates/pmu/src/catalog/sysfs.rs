//! PMUs as the kernel describes them under `/sys/bus/event_source/devices/<pmu>/`:
//! `type` (the `perf_event_attr.type` to use), `format/<term>` (which bits of
//! `config`/`config1`/`config2` a term sets, e.g. `config:0-7,32-35`),
//! `events/<alias>` (named events such as `event=0x3c`), `caps/*` and `cpus`.
//! Encodes perf's `pmu/term=value,term,.../` syntax through them.

use crate::event::EventAttr;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

/// One PMU as described by sysfs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PmuInfo {
    /// The directory name under `/sys/bus/event_source/devices` (`cpu`, `uncore_imc_0`).
    pub name: String,
    /// The `perf_event_attr.type` of this PMU.
    #[serde(rename = "type")]
    pub type_: u32,
    /// Format term → bit layout as written in sysfs (`event` → `config:0-7`).
    #[serde(default)]
    pub formats: BTreeMap<String, String>,
    /// Event alias → its terms (`cache-misses` → `event=0x2e,umask=0x41`).
    #[serde(default)]
    pub events: BTreeMap<String, String>,
    /// Capabilities (`caps/pmu_name`, `caps/max_precise`, …).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub caps: BTreeMap<String, String>,
    /// The CPUs this PMU counts on (`cpus` or `cpumask`), if the PMU says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<String>,
}

impl PmuInfo {
    /// Whether this is a CPU core PMU (the one hardware and cache events run on):
    /// `cpu` (x86), `cpu_core`/`cpu_atom` (Intel hybrid), `armv8_*`/`armv7_*`.
    pub fn is_core(&self) -> bool {
        let n = self.name.as_str();
        n == "cpu" || n.starts_with("cpu_") || n.starts_with("armv")
    }
}

/// `<sysfs_root>/bus/event_source/devices`.
pub fn devices_dir(sysfs_root: &Path) -> PathBuf {
    sysfs_root.join("bus/event_source/devices")
}

/// Reads every PMU under `<sysfs_root>/bus/event_source/devices`, sorted by name.
/// Never fails: a missing directory gives no PMUs, and PMUs whose `type` cannot be
/// read are skipped with a warning (returned second).
pub fn load_pmus(sysfs_root: &Path) -> (Vec<PmuInfo>, Vec<String>) {
    let dir = devices_dir(sysfs_root);
    let mut pmus = Vec::new();
    let mut warnings = Vec::new();
    let entries = match fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(err) => {
            warnings.push(format!("cannot list PMUs in {}: {err}", dir.display()));
            return (pmus, warnings);
        }
    };
    for entry in entries.flatten() {
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        let path = dir.join(&name);
        match load_pmu(&name, &path) {
            Ok(pmu) => pmus.push(pmu),
            Err(why) => warnings.push(why),
        }
    }
    pmus.sort_by(|a, b| a.name.cmp(&b.name));
    (pmus, warnings)
}

fn load_pmu(name: &str, path: &Path) -> Result<PmuInfo, String> {
    let type_path = path.join("type");
    let text = fs::read_to_string(&type_path)
        .map_err(|e| format!("PMU `{name}` skipped: {}: {e}", type_path.display()))?;
    let type_ = text.trim().parse::<u32>().map_err(|_| {
        format!(
            "PMU `{name}` skipped: {} holds `{}`, not a number",
            type_path.display(),
            text.trim()
        )
    })?;
    let cpus = read_trimmed(&path.join("cpus")).or_else(|| read_trimmed(&path.join("cpumask")));
    Ok(PmuInfo {
        name: name.to_string(),
        type_,
        formats: read_dir_files(&path.join("format"), |_| true),
        events: read_dir_files(&path.join("events"), |n| {
            // Companion files describe an alias rather than being one.
            ![".scale", ".unit", ".per-pkg", ".snapshot"]
                .iter()
                .any(|s| n.ends_with(s))
        }),
        caps: read_dir_files(&path.join("caps"), |_| true),
        cpus,
    })
}

fn read_trimmed(path: &Path) -> Option<String> {
    fs::read_to_string(path).ok().map(|s| s.trim().to_string())
}

/// Every readable regular file of `dir` whose name passes `keep`: name → trimmed content.
fn read_dir_files(dir: &Path, keep: impl Fn(&str) -> bool) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let Ok(entries) = fs::read_dir(dir) else {
        return out;
    };
    for entry in entries.flatten() {
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        if !keep(&name) {
            continue;
        }
        if let Some(content) = read_trimmed(&entry.path()) {
            out.insert(name, content);
        }
    }
    out
}

/// Which `perf_event_attr` word a format term writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigWord {
    /// `perf_event_attr.config`.
    Config,
    /// `perf_event_attr.config1`.
    Config1,
    /// `perf_event_attr.config2`.
    Config2,
}

/// A parsed `format/<term>` file: the bits of one config word the term's value
/// is spread over, low value bits to low positions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FormatField {
    /// The config word the term writes.
    pub word: ConfigWord,
    /// The bit positions in `word` the value is spread over (never empty).
    pub mask: u64,
}

impl FormatField {
    /// Parses `config:0-7`, `config:0-7,32-35`, `config1:0-63`, `config:21`.
    pub fn parse(spec: &str) -> Result<FormatField, String> {
        let (word, ranges) = spec
            .trim()
            .split_once(':')
            .ok_or_else(|| format!("`{spec}` is not of the form config:LO-HI"))?;
        let word = match word {
            "config" => ConfigWord::Config,
            "config1" => ConfigWord::Config1,
            "config2" => ConfigWord::Config2,
            other => return Err(format!("`{other}` in `{spec}` is not a perf_event_attr word hwqos can set (config, config1, config2)")),
        };
        let mut mask = 0u64;
        for range in ranges.split(',') {
            let (lo, hi) = match range.split_once('-') {
                Some((lo, hi)) => (lo, hi),
                None => (range, range),
            };
            let bit = |s: &str| -> Result<u32, String> {
                s.trim()
                    .parse::<u32>()
                    .ok()
                    .filter(|&b| b < 64)
                    .ok_or_else(|| format!("`{s}` in `{spec}` is not a bit number 0-63"))
            };
            let (lo, hi) = (bit(lo)?, bit(hi)?);
            if lo > hi {
                return Err(format!("range `{range}` in `{spec}` runs backwards"));
            }
            let bits = (u64::MAX >> (63 - (hi - lo))) << lo;
            if mask & bits != 0 {
                return Err(format!("ranges in `{spec}` overlap"));
            }
            mask |= bits;
        }
        Ok(FormatField { word, mask })
    }

    /// How many bits the field has.
    pub fn width(&self) -> u32 {
        self.mask.count_ones()
    }

    /// Spreads `value` over the field's bits; fails if it has more bits than fit.
    pub fn place(&self, value: u64) -> Result<u64, String> {
        let width = self.width();
        if width < 64 && value >> width != 0 {
            return Err(format!(
                "value {value:#x} does not fit in {width} bit{}",
                if width == 1 { "" } else { "s" }
            ));
        }
        let mut out = 0u64;
        let mut next_value_bit = 0;
        for pos in 0..64 {
            if self.mask & (1 << pos) != 0 {
                if value & (1 << next_value_bit) != 0 {
                    out |= 1 << pos;
                }
                next_value_bit += 1;
            }
        }
        Ok(out)
    }
}

fn word_mut(attr: &mut EventAttr, word: ConfigWord) -> &mut u64 {
    match word {
        ConfigWord::Config => &mut attr.config,
        ConfigWord::Config1 => &mut attr.config1,
        ConfigWord::Config2 => &mut attr.config2,
    }
}

/// Parses a term value: `0x1f`, `31`.
fn parse_value(term: &str, value: &str) -> Result<u64, String> {
    let v = value.trim();
    let parsed = match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => v.parse::<u64>(),
    };
    parsed.map_err(|_| {
        if v == "?" {
            format!("term `{term}` needs a value (`{term}=?` in the alias)")
        } else {
            format!(
                "`{v}` given to term `{term}` is not a number (decimal or 0x-hex up to 64 bits)"
            )
        }
    })
}

/// Encodes the terms of `pmu/terms/` for `pmu`.
pub(crate) fn encode(pmu: &PmuInfo, terms: &str) -> Result<EventAttr, String> {
    let mut attr = EventAttr {
        type_: pmu.type_,
        config: 0,
        config1: 0,
        config2: 0,
        modes: Default::default(),
    };
    apply_terms(pmu, terms, &mut attr, None)?;
    Ok(attr)
}

fn apply_terms(
    pmu: &PmuInfo,
    terms: &str,
    attr: &mut EventAttr,
    in_alias: Option<&str>,
) -> Result<(), String> {
    let context = |msg: String| match in_alias {
        Some(alias) => format!(
            "in alias `{alias}` of PMU `{}` (`{terms}`): {msg}",
            pmu.name
        ),
        None => msg,
    };
    if terms.trim().is_empty() {
        return Err(context(format!(
            "no terms between the slashes; give an event of PMU `{}` (e.g. {})",
            pmu.name,
            examples(pmu)
        )));
    }
    for term in terms.split(',') {
        let term = term.trim();
        if term.is_empty() {
            return Err(context(
                "empty term (two commas in a row or a trailing comma)".to_string(),
            ));
        }
        let (key, value) = match term.split_once('=') {
            Some((k, v)) => (k.trim(), Some(v)),
            None => (term, None),
        };
        let whole_word = match key {
            "config" => Some(ConfigWord::Config),
            "config1" => Some(ConfigWord::Config1),
            "config2" => Some(ConfigWord::Config2),
            _ => None,
        };
        if let Some(word) = whole_word {
            let value = value.ok_or_else(|| context(format!("term `{key}` needs a value")))?;
            *word_mut(attr, word) = parse_value(key, value).map_err(context)?;
        } else if let Some(spec) = pmu.formats.get(key) {
            let field = FormatField::parse(spec).map_err(|e| {
                context(format!(
                    "format file `format/{key}` of PMU `{}` is unusable: {e}",
                    pmu.name
                ))
            })?;
            let value = match value {
                Some(v) => parse_value(key, v).map_err(context)?,
                None => 1,
            };
            let bits = field
                .place(value)
                .map_err(|e| context(format!("term `{key}`: {e} (its format is `{spec}`)")))?;
            let w = word_mut(attr, field.word);
            *w = (*w & !field.mask) | bits;
        } else if let Some((alias, expansion)) = find_alias(pmu, key) {
            if value.is_some() {
                return Err(context(format!(
                    "`{alias}` is an event of PMU `{}` and takes no value",
                    pmu.name
                )));
            }
            if let Some(outer) = in_alias {
                return Err(format!(
                    "alias `{outer}` of PMU `{}` refers to another alias `{alias}`",
                    pmu.name
                ));
            }
            apply_terms(pmu, expansion, attr, Some(alias))?;
        } else {
            return Err(context(unknown_term(pmu, key)));
        }
    }
    Ok(())
}

/// An alias by exact name, else case-insensitively.
pub(crate) fn find_alias<'a>(pmu: &'a PmuInfo, name: &str) -> Option<(&'a str, &'a str)> {
    pmu.events
        .get_key_value(name)
        .or_else(|| {
            pmu.events
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
        })
        .map(|(k, v)| (k.as_str(), v.as_str()))
}

fn examples(pmu: &PmuInfo) -> String {
    let formats: Vec<&str> = pmu.formats.keys().map(String::as_str).take(4).collect();
    let aliases: Vec<&str> = pmu.events.keys().map(String::as_str).take(4).collect();
    match (formats.first(), aliases.first()) {
        (_, Some(alias)) => format!("`{}/{alias}/`", pmu.name),
        (Some(term), None) => format!("`{}/{term}=0x1/`", pmu.name),
        (None, None) => format!("`{}/config=0x1/`", pmu.name),
    }
}

fn unknown_term(pmu: &PmuInfo, key: &str) -> String {
    let list = |names: Vec<&String>| -> String {
        if names.is_empty() {
            return "none".to_string();
        }
        let shown: Vec<&str> = names.iter().take(12).map(|s| s.as_str()).collect();
        let more = names.len().saturating_sub(shown.len());
        if more > 0 {
            format!("{} and {more} more", shown.join(", "))
        } else {
            shown.join(", ")
        }
    };
    let mut msg = format!(
        "PMU `{}` has no format term or event `{key}`; its format terms: {}; its events: {}; \
         also accepted: config=, config1=, config2=",
        pmu.name,
        list(pmu.formats.keys().collect()),
        list(pmu.events.keys().collect()),
    );
    let candidates = pmu
        .formats
        .keys()
        .chain(pmu.events.keys())
        .map(String::as_str);
    if let Some(best) = super::suggest(key, candidates) {
        msg.push_str(&format!(" (did you mean `{best}`?)"));
    }
    msg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_fields() {
        let f = FormatField::parse("config:0-7,32-35").unwrap();
        assert_eq!(f.width(), 12);
        assert_eq!(f.place(0x1c0), Ok(0x1_0000_00c0));
        assert!(f.place(0x1000).is_err());
        let bit = FormatField::parse("config:21").unwrap();
        assert_eq!(bit.place(1), Ok(1 << 21));
        let full = FormatField::parse("config1:0-63").unwrap();
        assert_eq!(
            (full.word, full.place(u64::MAX)),
            (ConfigWord::Config1, Ok(u64::MAX))
        );
        for bad in [
            "config",
            "config:",
            "config:8-1",
            "config:0-64",
            "config3:0-7",
            "config:0-7,4-5",
            "config:a-b",
        ] {
            assert!(FormatField::parse(bad).is_err(), "{bad}");
        }
    }
}
