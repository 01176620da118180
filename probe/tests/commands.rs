//! Commands from a subscriber reach the job through the collector; bad ones are rejected
//! with a reason and the job goes on unchanged.

use std::time::Duration;

use megaflux::control::ControlHandle;
use megaflux::harness::RunConfig;
use megaflux_probe::ProbeLayer;
use megaflux_probe::collector::{Collector, CollectorConfig};
use megaflux_probe::event::{Event, Outcome};
use megaflux_probe::wire::{self, CommandRequest};
use tracing_subscriber::prelude::*;

mod common;
use common::{NET, RUN, background};

/// A job that runs until the test has its answers, then is stopped: the answers come from
/// the job itself, which must still run when the commands reach it.
fn config() -> RunConfig {
    common::job_until_stopped()
}

#[test]
fn bad_commands_are_rejected_and_the_job_goes_on() {
    let (layer, queue) = ProbeLayer::new(0, 1 << 20);
    let hello = layer.stamp(Event::Hello {
        processes: 1,
        workers: 2,
        peers: 2,
        bins: 16,
        config: serde_json::json!({}),
        anchor_unix_s: None,
    });
    tracing_subscriber::registry().with(layer.filtered()).init();
    let control = ControlHandle::new();
    let collector = Collector::start(
        CollectorConfig {
            serve: Some("127.0.0.1:0".parse().unwrap()),
            control: Some(control.clone()),
            hello: Some(hello),
            ..CollectorConfig::default()
        },
        queue,
    )
    .unwrap();
    let addr = collector.local_addr().unwrap();
    let job = {
        let control = control.clone();
        background("the job", move || {
            megaflux::workload::run(config(), control).unwrap().unwrap()
        })
    };

    let rt = common::runtime();
    let answers = rt.block_on(async {
        let subscribing = wire::subscribe(addr, None);
        let mut conn = common::bounded("the collector's welcome", NET, subscribing)
            .await
            .unwrap();
        let commands = [
            CommandRequest::MoveBins {
                bins: vec![16],
                worker: 1,
                standby: false,
            },
            CommandRequest::MoveBins {
                bins: vec![3],
                worker: 2,
                standby: false,
            },
            CommandRequest::StartPlan {
                schedule: "sideways".into(),
                target: "uniform".into(),
            },
            // Parses, but the job has no worker 5 to pack onto: the job itself says no.
            CommandRequest::StartPlan {
                schedule: "fluid".into(),
                target: "pack:5".into(),
            },
            CommandRequest::CancelPlan,
            // This job records nothing.
            CommandRequest::Record { on: false },
        ];
        common::ask(&mut conn, commands.to_vec()).await
    });
    for (outcome, _) in &answers {
        assert_eq!(*outcome, Outcome::Rejected);
    }
    assert!(answers[0].1.contains("unknown bin 16"), "{}", answers[0].1);
    assert!(answers[1].1.contains("unknown worker 2"), "{}", answers[1].1);
    assert!(answers[2].1.contains("sideways"), "{}", answers[2].1);
    assert!(
        answers[3].1.contains("pack:5") || answers[3].1.contains('5'),
        "{}",
        answers[3].1
    );
    assert!(answers[4].1.contains("no migration plan"), "{}", answers[4].1);
    assert!(answers[5].1.contains("records nothing"), "{}", answers[5].1);

    // The job goes on: a second more of its records is out before it is stopped.
    let answered = control.progress();
    let what = "the job to go on for a second of its records after the commands";
    megaflux_testkit::wait_until(what, RUN, || {
        control.progress() >= answered + Duration::from_secs(1)
    });
    control.stop();
    let summary = job.wait(RUN);
    assert!(summary.migrations.is_empty());
    let report = megaflux_testkit::within("the collector to finish", RUN, move |_| {
        collector.finish(Duration::ZERO, None)
    })
    .unwrap();
    assert!(report.model.moving.is_empty());
    // Unchanged: the same output as a job nobody sent commands to, over the same epochs.
    let quiet = common::quiet_twin(config(), &summary);
    let quiet = megaflux_testkit::within("the job nobody sent commands to", RUN, move |_| {
        megaflux::workload::run(quiet, ControlHandle::new())
            .unwrap()
            .unwrap()
    });
    assert_eq!(summary.output_digest, quiet.output_digest);
    assert_eq!(summary.outputs, quiet.outputs);
}
