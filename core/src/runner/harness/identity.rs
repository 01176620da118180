//! What a sink learns of a run ([`RunIdentity`]): the settings its outputs depend on, so that
//! a later run resumes a sink only where it would make the same outputs at the same times.

use super::config::{EpochMode, Pace, RunConfig};
use crate::sink::RunIdentity;

/// Settings that change where and how the outputs are made, never which outputs at which
/// times (the claim every migration, failover and placement keeps): left out of a run's
/// identity, so a run that resumes a sink may differ in them.
const NOT_OUTPUTS: &[&str] = &[
    "workers",
    "native",
    "migrations",
    "chunk_bytes",
    "timely_args",
    "replicas",
    "failures",
    "rejoins",
    "recovery",
    "panics",
    "idle",
    "balance",
    "placement",
    "bins",
    "check_serde",
];

/// The identity of a run of `config`: its settings but those in [`NOT_OUTPUTS`], with the
/// input file's size and hash, and why it cannot resume a sink, if it cannot.
pub(crate) fn identity(config: &RunConfig) -> RunIdentity {
    let mut config = config.clone();
    let mut not_resumable = None;
    if let Some(input) = &mut config.input {
        if !input.rereadable() {
            not_resumable = Some(format!(
                "its records come from {}, which cannot be read again",
                input.name()
            ));
        } else if let Err(e) = input.identify() {
            not_resumable = Some(format!("its input cannot be read again: {e}"));
        }
    }
    if config.epoch_mode == EpochMode::Adaptive {
        not_resumable =
            Some("its epochs are adaptive: its outputs' times depend on how its batches fell".into());
    }
    if config.pace == Pace::Max {
        not_resumable =
            Some("it runs as fast as it can (--pace max): its outputs' times depend on its speed".into());
    }
    let mut settings = match serde_json::to_value(&config) {
        Ok(serde_json::Value::Object(map)) => map,
        _ => serde_json::Map::new(),
    };
    settings.retain(|k, _| !NOT_OUTPUTS.contains(&k.as_str()));
    RunIdentity {
        settings,
        not_resumable,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moves_and_placements_are_not_the_runs_identity_and_its_rate_is() {
        let base = RunConfig::default();
        let mut moved = base.clone();
        moved.workers = 3;
        moved.replicas = 2;
        moved.migrations = vec!["fluid@1:pack:1".parse().unwrap()];
        assert_eq!(identity(&base), identity(&moved));
        let mut faster = base.clone();
        faster.rate *= 2;
        assert_ne!(identity(&base).settings, identity(&faster).settings);
        assert_eq!(identity(&base).not_resumable, None);
        let mut paced = base;
        paced.pace = Pace::Max;
        assert!(identity(&paced).not_resumable.unwrap().contains("--pace max"));
    }
}
