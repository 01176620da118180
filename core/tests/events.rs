//! Every moved bin reports each migration phase through `tracing`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use megaflux::control::{Command, ControlHandle};
use megaflux::harness::{Pace, RunConfig, Scripted};
use megaflux::job::ParamValues;
use megaflux::plan::{Schedule, Strategy, Target};
use megaflux::workload::run;
use tracing::field::{Field, Visit};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::{Context, SubscriberExt};

mod common;

type Seen = Arc<Mutex<Vec<(String, BTreeMap<String, String>)>>>;

struct Collect(Seen);

struct Fields(BTreeMap<String, String>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(
            field.name().to_string(),
            format!("{value:?}").trim_matches('"').to_string(),
        );
    }
}

impl<S: tracing::Subscriber> Layer<S> for Collect {
    fn on_event(&self, event: &tracing::Event<'_>, _ctx: Context<'_, S>) {
        let mut fields = Fields(BTreeMap::new());
        event.record(&mut fields);
        self.0
            .lock()
            .unwrap()
            .push((event.metadata().target().to_string(), fields.0));
    }
}

#[test]
fn every_moved_bin_goes_through_every_phase() {
    let seen: Seen = Arc::default();
    let subscriber = tracing_subscriber::registry().with(Collect(Arc::clone(&seen)));
    tracing::subscriber::set_global_default(subscriber).unwrap();

    // The plan at an epoch of a run as fast as it goes: its 128 steps (one bin each) run
    // to their end within the run's 1,200 epochs however slow this machine (a test build)
    // is, which a plan at a time on the clock of a run in real time would not.
    let config = RunConfig {
        params: ParamValues::new().with("keys", 5_000),
        rate: 20_000,
        duration: Duration::from_millis(1200),
        pace: Pace::Max,
        script: vec![Scripted {
            epoch: 300,
            command: Command::StartPlan {
                schedule: Schedule {
                    strategy: Strategy::Matched,
                    pipelined: false,
                },
                target: Target::Pack(1),
            },
        }],
        ..RunConfig::default()
    };
    let summary = common::in_time("the run with a matched plan", move || {
        run(config, ControlHandle::new()).unwrap().unwrap()
    });
    assert_eq!(summary.migrations.len(), 1, "{:?}", summary.migrations);
    assert_eq!(summary.migrations[0].bins_moved, 128);
    assert!(
        summary.migrations[0].completed_s.is_some(),
        "the plan ran to its end: {:?}",
        summary.migrations[0]
    );

    let seen = seen.lock().unwrap();
    let bins_in = |phase: &str| -> BTreeSet<u32> {
        seen.iter()
            .filter(|(target, f)| {
                target == "megaflux::migration" && f.get("phase").map(String::as_str) == Some(phase)
            })
            .map(|(_, f)| f["bin"].parse().unwrap())
            .collect()
    };
    // Under the uniform map worker 1 owns the odd bins; pack:1 moves all of them.
    let odd: BTreeSet<u32> = (0..256).filter(|b| b % 2 == 1).collect();
    for phase in ["issued", "extracted", "received", "installed", "completed"] {
        assert_eq!(bins_in(phase), odd, "phase {phase}");
    }
    let extracted_bytes: u64 = seen
        .iter()
        .filter(|(_, f)| f.get("phase").map(String::as_str) == Some("extracted"))
        .map(|(_, f)| f["bytes"].parse::<u64>().unwrap())
        .sum();
    assert_eq!(extracted_bytes, summary.migrations[0].bytes_moved);
    assert!(
        seen.iter()
            .any(|(t, f)| t == "megaflux::plan" && f.get("phase").map(String::as_str) == Some("completed"))
    );
}
