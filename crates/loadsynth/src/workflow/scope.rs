//! What a loop measures ([`MeasureOn`]): the whole CPU, or listed processes
//! (`self` is this process). A model records the scope it was synthesized
//! on ([`ModelScope`]) and a replay measures the same unless told otherwise.

use crate::model::{LoadModel, ModelScope};
use crate::source::MeasureOn;
use crate::LoadError;

/// Parses a comma-separated PID list (`self` is this process), as
/// `--measure-processes` takes it.
pub fn parse_processes(list: &str) -> Result<MeasureOn, LoadError> {
    let pids = list
        .split(',')
        .map(|p| match p.trim() {
            "self" => Ok(std::process::id()),
            p => p
                .parse::<u32>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| LoadError::Invalid(format!("`{p}` is not a PID or `self`"))),
        })
        .collect::<Result<Vec<u32>, LoadError>>()?;
    Ok(MeasureOn::Processes(pids))
}

/// How a model records what its synthesis measured.
pub fn model_scope(on: &MeasureOn) -> ModelScope {
    let me = std::process::id();
    match on {
        MeasureOn::WholeCpu => ModelScope::WholeCpu,
        MeasureOn::Processes(p) => ModelScope::Processes {
            this_process: p.contains(&me),
            others: p.iter().copied().filter(|x| *x != me).collect(),
        },
    }
}

/// What a replay measures: `given` if any, else the model's own scope
/// (this process for a model made on processes: the PIDs of that time are
/// gone, and are named in a warning).
pub fn replay_scope(model: &LoadModel, given: Option<&MeasureOn>) -> MeasureOn {
    if let Some(on) = given {
        return on.clone();
    }
    match &model.measured_on {
        ModelScope::WholeCpu => MeasureOn::WholeCpu,
        ModelScope::Processes {
            this_process,
            others,
        } => {
            if !others.is_empty() {
                tracing::warn!(
                    "the model was synthesized measuring this process and PIDs {others:?}; \
                     replay measures only this process (list the others with --measure-processes self,PID…)"
                );
            }
            if !this_process {
                tracing::warn!("the model was synthesized without `self` in --measure-processes; measuring this process");
            }
            MeasureOn::Processes(vec![std::process::id()])
        }
    }
}

/// `the whole CPU`, `this process` or `processes [..]`.
pub fn describe(on: &MeasureOn) -> String {
    match on {
        MeasureOn::WholeCpu => "the whole CPU".into(),
        MeasureOn::Processes(p) if p == &[std::process::id()] => "this process".into(),
        MeasureOn::Processes(p) => format!("processes {p:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_lists_parse_and_describe_themselves() {
        let me = std::process::id();
        let on = parse_processes("self, 1").unwrap();
        assert_eq!(on, MeasureOn::Processes(vec![me, 1]));
        assert_eq!(
            model_scope(&on),
            ModelScope::Processes {
                this_process: true,
                others: vec![1]
            }
        );
        assert_eq!(describe(&MeasureOn::Processes(vec![me])), "this process");
        assert_eq!(describe(&MeasureOn::WholeCpu), "the whole CPU");
        let e = parse_processes("self,0").unwrap_err();
        assert!(e.to_string().contains("`0` is not a PID"), "{e}");
    }
}
