//! The CPU model of a node, parsed from `/proc/cpuinfo`: what selects the curated
//! event table and the counter capacity.

use serde::{Deserialize, Serialize};
use std::path::Path;

/// Who designed the CPU (which PMU flavour to expect).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Vendor {
    /// `GenuineIntel`.
    Intel,
    /// `AuthenticAMD`.
    Amd,
    /// `HygonGenuine` (Zen-derived, AMD-style PMU).
    Hygon,
    /// Any arm64 core (Arm Ltd. or an architecture licensee).
    Arm,
    /// Anything else, or `/proc/cpuinfo` unreadable: no curated table applies.
    Unknown,
}

/// The CPU model of a node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuModel {
    /// The vendor, from `vendor_id` (x86) or the architecture (arm64).
    pub vendor: Vendor,
    /// x86: `cpu family`; Arm: `CPU architecture`.
    pub family: u32,
    /// x86: `model`; Arm: the `CPU part` of the first CPU.
    pub model: u32,
    /// x86: `model name`; Arm: the core names (`Cortex-A53 + Cortex-A72`).
    pub model_name: String,
    /// `x86_64`, `aarch64` or `unknown`.
    pub arch: String,
    /// Arm: the distinct `CPU part` numbers (big.LITTLE systems have several).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<u32>,
    /// Arm: the `CPU implementer` code (0x41 is Arm Ltd.).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub implementer: Option<u32>,
}

impl CpuModel {
    /// A model about which nothing is known.
    pub fn unknown() -> CpuModel {
        CpuModel {
            vendor: Vendor::Unknown,
            family: 0,
            model: 0,
            model_name: "unknown".to_string(),
            arch: "unknown".to_string(),
            parts: Vec::new(),
            implementer: None,
        }
    }

    /// Reads `<proc_root>/cpuinfo`; an unreadable or unrecognised file gives
    /// [`CpuModel::unknown`].
    pub fn read(proc_root: &Path) -> CpuModel {
        match std::fs::read_to_string(proc_root.join("cpuinfo")) {
            Ok(text) => CpuModel::from_cpuinfo(&text),
            Err(err) => {
                tracing::debug!("cannot read {}/cpuinfo: {err}", proc_root.display());
                CpuModel::unknown()
            }
        }
    }

    /// Parses the text of `/proc/cpuinfo` (x86 or arm64 layout).
    pub fn from_cpuinfo(text: &str) -> CpuModel {
        let mut model = CpuModel::unknown();
        let mut seen_x86 = false;
        let mut first_block = true;
        for line in text.lines() {
            if line.trim().is_empty() {
                if seen_x86 || model.implementer.is_some() {
                    first_block = false;
                }
                continue;
            }
            let Some((key, value)) = line.split_once(':') else {
                continue;
            };
            let (key, value) = (key.trim(), value.trim());
            match key {
                "vendor_id" if first_block => {
                    seen_x86 = true;
                    model.arch = "x86_64".to_string();
                    model.vendor = match value {
                        "GenuineIntel" => Vendor::Intel,
                        "AuthenticAMD" => Vendor::Amd,
                        "HygonGenuine" => Vendor::Hygon,
                        _ => Vendor::Unknown,
                    };
                }
                "cpu family" if first_block => model.family = parse_number(value).unwrap_or(0),
                "model" if first_block && seen_x86 => {
                    model.model = parse_number(value).unwrap_or(0)
                }
                "model name" if first_block && seen_x86 => model.model_name = value.to_string(),
                "CPU implementer" => {
                    model.vendor = Vendor::Arm;
                    model.arch = "aarch64".to_string();
                    if model.implementer.is_none() {
                        model.implementer = parse_number(value);
                    }
                }
                "CPU architecture" if first_block => {
                    model.family = parse_number(value).unwrap_or(0)
                }
                "CPU part" => {
                    if let Some(part) = parse_number(value) {
                        if model.parts.is_empty() {
                            model.model = part;
                        }
                        if !model.parts.contains(&part) {
                            model.parts.push(part);
                        }
                    }
                }
                _ => {}
            }
        }
        if model.vendor == Vendor::Arm {
            model.model_name = arm_model_name(model.implementer, &model.parts);
        }
        model
    }

    /// A short description for messages: `amd family 0x19 model 0x11 (AMD EPYC)`.
    pub fn describe(&self) -> String {
        let vendor = serde_json::to_value(self.vendor)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_else(|| "unknown".to_string());
        format!(
            "{vendor} family {:#x} model {:#x} ({})",
            self.family, self.model, self.model_name
        )
    }
}

/// Parses `25`, `0xd03`.
fn parse_number(s: &str) -> Option<u32> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u32::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

/// Names of Arm Ltd. cores by `CPU part` (Arm TRMs, MIDR_EL1.PartNum).
pub(crate) const ARM_PARTS: &[(u32, &str)] = &[
    (0xd03, "Cortex-A53"),
    (0xd04, "Cortex-A35"),
    (0xd05, "Cortex-A55"),
    (0xd07, "Cortex-A57"),
    (0xd08, "Cortex-A72"),
    (0xd09, "Cortex-A73"),
    (0xd0a, "Cortex-A75"),
    (0xd0b, "Cortex-A76"),
    (0xd0c, "Neoverse-N1"),
    (0xd0d, "Cortex-A77"),
    (0xd40, "Neoverse-V1"),
    (0xd41, "Cortex-A78"),
    (0xd44, "Cortex-X1"),
    (0xd49, "Neoverse-N2"),
    (0xd4f, "Neoverse-V2"),
];

const ARM_LTD: u32 = 0x41;

fn arm_model_name(implementer: Option<u32>, parts: &[u32]) -> String {
    let names: Vec<String> = parts
        .iter()
        .map(|&part| {
            let known = if implementer == Some(ARM_LTD) {
                ARM_PARTS
                    .iter()
                    .find(|p| p.0 == part)
                    .map(|p| p.1.to_string())
            } else {
                None
            };
            known.unwrap_or_else(|| {
                format!("implementer {:#x} part {part:#x}", implementer.unwrap_or(0))
            })
        })
        .collect();
    if names.is_empty() {
        "arm64 (no CPU part in cpuinfo)".to_string()
    } else {
        names.join(" + ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_x86_and_arm() {
        let amd = CpuModel::from_cpuinfo(
            "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\nmodel name\t: AMD EPYC\n\n",
        );
        assert_eq!((amd.vendor, amd.family, amd.model), (Vendor::Amd, 25, 17));
        assert_eq!(amd.model_name, "AMD EPYC");
        let arm = CpuModel::from_cpuinfo(
            "processor\t: 0\nCPU implementer\t: 0x41\nCPU architecture: 8\nCPU part\t: 0xd03\n\n\
             processor\t: 4\nCPU implementer\t: 0x41\nCPU architecture: 8\nCPU part\t: 0xd08\n",
        );
        assert_eq!((arm.vendor, arm.family, arm.model), (Vendor::Arm, 8, 0xd03));
        assert_eq!(arm.parts, vec![0xd03, 0xd08]);
        assert_eq!(arm.model_name, "Cortex-A53 + Cortex-A72");
        assert_eq!(
            CpuModel::from_cpuinfo("garbage\n\u{0}:::\n").vendor,
            Vendor::Unknown
        );
    }
}
