//! Small readers for sysfs/procfs text files: trimmed contents, CPU lists
//! (`0-3,8-11`), hexadecimal CPU masks (`ff,00000001`) and cache sizes (`32K`).
//!
//! Every reader returns `None` for a missing or unparsable file: the topology
//! treats such a value as absent, never as an error.

use std::path::Path;

/// Largest CPU number accepted from a list or mask, so a corrupt file cannot
/// make the reader allocate without bound (Linux's `NR_CPUS` maximum is 8192).
pub const MAX_CPU: u32 = hwqos_pmu::target::MAX_CPU;

/// The file's contents with surrounding whitespace removed; `None` if it cannot be read.
pub fn read_trimmed(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

/// A decimal number from a one-value file.
pub fn read_number<T: std::str::FromStr>(path: &Path) -> Option<T> {
    read_trimmed(path)?.parse().ok()
}

/// Parses a kernel CPU list such as `0-3,8-11` or `0,2` (empty: no CPUs)
/// with hwqos's one CPU-list parser ([`hwqos_pmu::target::parse_cpu_list`]).
/// `None` if malformed or a CPU is above [`MAX_CPU`].
pub fn parse_cpu_list(text: &str) -> Option<Vec<u32>> {
    hwqos_pmu::target::parse_cpu_list(text).ok()
}

/// Parses a kernel CPU mask such as `3` or `ff,00000001` (32-bit words, most
/// significant first).
pub fn parse_cpu_mask(text: &str) -> Option<Vec<u32>> {
    let mut cpus = Vec::new();
    let words: Vec<&str> = text.trim().split(',').collect();
    for (i, word) in words.iter().rev().enumerate() {
        let w = u32::from_str_radix(word.trim(), 16).ok()?;
        for bit in 0..32u32 {
            if w & (1 << bit) != 0 {
                let cpu = u32::try_from(i).ok()?.checked_mul(32)?.checked_add(bit)?;
                if cpu > MAX_CPU {
                    return None;
                }
                cpus.push(cpu);
            }
        }
    }
    cpus.sort_unstable();
    Some(cpus)
}

/// Formats CPUs as a kernel CPU list (`0-3,8-11`).
pub fn format_cpu_list(cpus: &[u32]) -> String {
    let mut sorted = cpus.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let start = sorted[i];
        let mut end = start;
        while i + 1 < sorted.len() && sorted[i + 1] == end + 1 {
            i += 1;
            end = sorted[i];
        }
        out.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    out.join(",")
}

/// Parses a sysfs cache size (`32K`, `1024K`, `32768K`, `4M`, `512`) into bytes.
pub fn parse_size(text: &str) -> Option<u64> {
    let t = text.trim();
    let (digits, mult) = match t.char_indices().last()? {
        (i, 'K' | 'k') => (&t[..i], 1024),
        (i, 'M' | 'm') => (&t[..i], 1024 * 1024),
        (i, 'G' | 'g') => (&t[..i], 1024 * 1024 * 1024),
        _ => (t, 1),
    };
    digits.trim().parse::<u64>().ok()?.checked_mul(mult)
}

/// Formats a byte size the way people write cache sizes: `32 KiB`, `1 MiB`, `5.5 MiB`.
pub fn format_size(bytes: u64) -> String {
    const KIB: u64 = 1024;
    const MIB: u64 = 1024 * 1024;
    const GIB: u64 = 1024 * 1024 * 1024;
    let (unit, div) = if bytes >= GIB {
        ("GiB", GIB)
    } else if bytes >= MIB {
        ("MiB", MIB)
    } else if bytes >= KIB {
        ("KiB", KIB)
    } else {
        return format!("{bytes} B");
    };
    if bytes % div == 0 {
        format!("{} {unit}", bytes / div)
    } else {
        format!("{:.1} {unit}", bytes as f64 / div as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(
            parse_cpu_list("0-3,8-11").unwrap(),
            [0, 1, 2, 3, 8, 9, 10, 11]
        );
        assert_eq!(parse_cpu_list("0,2\n").unwrap(), [0, 2]);
        assert_eq!(parse_cpu_list("").unwrap(), Vec::<u32>::new());
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("0-99999999"), None);
        assert_eq!(parse_cpu_list("x"), None);
        assert_eq!(format_cpu_list(&[8, 0, 1, 2, 3, 9]), "0-3,8-9");
        assert_eq!(format_cpu_list(&[0, 2]), "0,2");
    }

    #[test]
    fn cpu_masks() {
        assert_eq!(parse_cpu_mask("3").unwrap(), [0, 1]);
        assert_eq!(parse_cpu_mask("00000001,00000100").unwrap(), [8, 32]);
        assert_eq!(parse_cpu_mask("zz"), None);
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("32K"), Some(32 * 1024));
        assert_eq!(parse_size("32768K"), Some(32 << 20));
        assert_eq!(parse_size("4M"), Some(4 << 20));
        assert_eq!(parse_size("512"), Some(512));
        assert_eq!(parse_size("K"), None);
        assert_eq!(parse_size(""), None);
        assert_eq!(format_size(32 * 1024), "32 KiB");
        assert_eq!(format_size(5632 * 1024), "5.5 MiB");
    }
}
