//! What a sample is about.
//!
//! Scopes have a compact text form used on command lines, in CSV files and in
//! API filters: `system`, `cpu:3`, `pid:1234`, `tid:1234/1240`,
//! `cgroup:/system.slice/foo.service` and `stream:NAME`.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// The subject of a measurement.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Scope {
    /// The whole node.
    System,
    /// One logical CPU.
    Cpu {
        /// The logical CPU number, as the kernel numbers it (`cpuN` in sysfs).
        cpu: u32,
    },
    /// A process with all its threads.
    Process {
        /// The process id (thread-group id).
        pid: u32,
    },
    /// One thread of a process.
    Thread {
        /// The process the thread belongs to.
        pid: u32,
        /// The thread's kernel task id.
        tid: u32,
    },
    /// A cgroup, by its path below the cgroup root (starting with `/`).
    Cgroup {
        /// The path below the cgroup root, e.g. `/system.slice/foo.service`.
        path: String,
    },
    /// A message stream (hwqos-relay), by name.
    Stream {
        /// The stream's configured name.
        name: String,
    },
}

/// Why a string is not a scope.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid scope `{input}`: {reason} (expected system, cpu:N, pid:N, tid:PID/TID, cgroup:/PATH or stream:NAME)")]
pub struct ScopeParseError {
    /// The text that was given.
    pub input: String,
    /// What is wrong with it, e.g. "missing `:`".
    pub reason: &'static str,
}

impl Scope {
    /// The scope kind as a word: `system`, `cpu`, `process`, `thread`, `cgroup`, `stream`.
    pub fn kind(&self) -> &'static str {
        match self {
            Scope::System => "system",
            Scope::Cpu { .. } => "cpu",
            Scope::Process { .. } => "process",
            Scope::Thread { .. } => "thread",
            Scope::Cgroup { .. } => "cgroup",
            Scope::Stream { .. } => "stream",
        }
    }

    /// Label pairs for OpenMetrics / Prometheus (`scope` plus the identifying key).
    pub fn labels(&self) -> Vec<(&'static str, String)> {
        let mut l = vec![("scope", self.kind().to_string())];
        match self {
            Scope::System => {}
            Scope::Cpu { cpu } => l.push(("cpu", cpu.to_string())),
            Scope::Process { pid } => l.push(("pid", pid.to_string())),
            Scope::Thread { pid, tid } => {
                l.push(("pid", pid.to_string()));
                l.push(("tid", tid.to_string()));
            }
            Scope::Cgroup { path } => l.push(("cgroup", path.clone())),
            Scope::Stream { name } => l.push(("stream", name.clone())),
        }
        l
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scope::System => f.write_str("system"),
            Scope::Cpu { cpu } => write!(f, "cpu:{cpu}"),
            Scope::Process { pid } => write!(f, "pid:{pid}"),
            Scope::Thread { pid, tid } => write!(f, "tid:{pid}/{tid}"),
            Scope::Cgroup { path } => write!(f, "cgroup:{path}"),
            Scope::Stream { name } => write!(f, "stream:{name}"),
        }
    }
}

impl FromStr for Scope {
    type Err = ScopeParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |reason| ScopeParseError {
            input: s.to_string(),
            reason,
        };
        let num = |v: &str| {
            v.parse::<u32>()
                .map_err(|_| err("not a non-negative integer"))
        };
        if s == "system" {
            return Ok(Scope::System);
        }
        let (kind, rest) = s.split_once(':').ok_or_else(|| err("missing `:`"))?;
        match kind {
            "cpu" => Ok(Scope::Cpu { cpu: num(rest)? }),
            "pid" => Ok(Scope::Process { pid: num(rest)? }),
            "tid" => {
                let (p, t) = rest
                    .split_once('/')
                    .ok_or_else(|| err("thread scope needs PID/TID"))?;
                Ok(Scope::Thread {
                    pid: num(p)?,
                    tid: num(t)?,
                })
            }
            "cgroup" if rest.starts_with('/') => Ok(Scope::Cgroup {
                path: rest.to_string(),
            }),
            "cgroup" => Err(err("cgroup path must start with /")),
            "stream" if !rest.is_empty() => Ok(Scope::Stream {
                name: rest.to_string(),
            }),
            "stream" => Err(err("empty stream name")),
            _ => Err(err("unknown scope kind")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_round_trip() {
        for s in [
            "system",
            "cpu:3",
            "pid:1234",
            "tid:1234/1240",
            "cgroup:/system.slice/a.service",
            "stream:peer-1",
        ] {
            let scope: Scope = s.parse().unwrap();
            assert_eq!(scope.to_string(), s);
        }
    }

    #[test]
    fn bad_text_is_rejected_with_reason() {
        for s in [
            "",
            "cpu",
            "cpu:x",
            "cpu:-1",
            "tid:5",
            "cgroup:rel",
            "stream:",
            "disk:1",
        ] {
            let e = s.parse::<Scope>().unwrap_err();
            assert!(e.to_string().contains(s), "{e}");
        }
    }

    #[test]
    fn serde_shape() {
        let j = serde_json::to_string(&Scope::Thread { pid: 1, tid: 2 }).unwrap();
        assert_eq!(j, r#"{"kind":"thread","pid":1,"tid":2}"#);
        let back: Scope = serde_json::from_str(&j).unwrap();
        assert_eq!(back, Scope::Thread { pid: 1, tid: 2 });
    }
}
