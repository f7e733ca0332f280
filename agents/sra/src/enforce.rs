//! How the agent enforces: the quota backend, the throttle mechanism and the
//! overflow route, as words from the command line or the configuration.

use hwqos_sched::backend::userspace::OverflowRoute;
use hwqos_sched::backend::BackendKind;
use std::path::PathBuf;

/// How a process over its quota is held until the next period.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ThrottleMechanism {
    /// SIGSTOP, then SIGCONT at the next period.
    Sigstop,
    /// The cgroup v2 freezer (`cgroup.freeze`), on the agent route only.
    Freeze,
}

impl ThrottleMechanism {
    /// The configuration word (`sigstop`, `freeze`).
    pub fn as_str(self) -> &'static str {
        match self {
            ThrottleMechanism::Sigstop => "sigstop",
            ThrottleMechanism::Freeze => "freeze",
        }
    }
}

/// A bad enforcement word: which key (`backend`, `throttle`, `route`) and
/// what was expected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {message}")]
pub struct EnforceError {
    /// The key without its section: `backend`, `throttle` or `route`.
    pub key: &'static str,
    /// What was expected and what was found.
    pub message: String,
}

/// Parses backend / throttle / route words; a `None` backend means auto
/// (chosen by [`hwqos_sched::backend::detect`]).
pub fn parse_enforce(
    backend: &str,
    throttle: &str,
    route: &str,
) -> Result<(Option<BackendKind>, ThrottleMechanism, OverflowRoute), EnforceError> {
    let b = match backend {
        "auto" => None,
        other => Some(other.parse::<BackendKind>().map_err(|e| EnforceError {
            key: "backend",
            message: e.to_string(),
        })?),
    };
    let t = match throttle {
        "sigstop" => ThrottleMechanism::Sigstop,
        "freeze" => ThrottleMechanism::Freeze,
        other => {
            return Err(EnforceError {
                key: "throttle",
                message: format!("expected sigstop or freeze, found `{other}`"),
            })
        }
    };
    let r = match route {
        "direct" => OverflowRoute::Direct,
        "agent" => OverflowRoute::Agent,
        other => {
            return Err(EnforceError {
                key: "route",
                message: format!("expected direct or agent, found `{other}`"),
            })
        }
    };
    if t == ThrottleMechanism::Freeze && r == OverflowRoute::Direct {
        return Err(EnforceError {
            key: "throttle",
            message: "`freeze` needs route `agent` (the direct route stops with SIGSTOP)".into(),
        });
    }
    Ok((b, t, r))
}

/// How an [`crate::agent::Agent`] enforces and where it keeps its state.
#[derive(Clone, Debug)]
pub struct AgentOptions {
    /// The quota backend; `None`: detected.
    pub backend: Option<BackendKind>,
    /// How an over-quota process is held.
    pub throttle: ThrottleMechanism,
    /// Who acts on an overflow signal: the handler directly or the agent.
    pub route: OverflowRoute,
    /// SCHED_FIFO priority of the enforcement thread (0: none).
    pub rt_priority: i32,
    /// MemGuard-style lending of unused budget (agent route only).
    pub lending: bool,
    /// Where the throttle state file ([`crate::thaw::STATE_FILE`]) lives.
    pub state_dir: PathBuf,
    /// The proc filesystem (`/proc`; another root in tests).
    pub proc_root: PathBuf,
}

impl AgentOptions {
    /// Options from the enforcement words; `lending` needs the agent route.
    /// Errors name the key without its prefix (`throttle: expected …`).
    #[allow(clippy::too_many_arguments)]
    pub fn parse(
        backend: &str,
        throttle: &str,
        route: &str,
        rt_priority: i32,
        lending: bool,
        state_dir: PathBuf,
    ) -> Result<AgentOptions, EnforceError> {
        let (backend, throttle, route) = parse_enforce(backend, throttle, route)?;
        if lending && route != OverflowRoute::Agent {
            return Err(EnforceError {
                key: "lending",
                message: "needs route `agent`".into(),
            });
        }
        Ok(AgentOptions {
            backend,
            throttle,
            route,
            rt_priority,
            lending,
            state_dir,
            proc_root: PathBuf::from("/proc"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_and_their_errors() {
        let (b, t, r) = parse_enforce("auto", "freeze", "agent").unwrap();
        assert_eq!(
            (b, t, r),
            (None, ThrottleMechanism::Freeze, OverflowRoute::Agent)
        );
        assert_eq!(
            parse_enforce("auto", "nap", "direct")
                .unwrap_err()
                .to_string(),
            "throttle: expected sigstop or freeze, found `nap`"
        );
        assert_eq!(
            parse_enforce("auto", "freeze", "direct").unwrap_err().key,
            "throttle"
        );
        assert_eq!(
            parse_enforce("auto", "sigstop", "x").unwrap_err().key,
            "route"
        );
        let e = AgentOptions::parse("auto", "sigstop", "direct", 0, true, "/tmp".into());
        assert_eq!(e.unwrap_err().to_string(), "lending: needs route `agent`");
    }
}
