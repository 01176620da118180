//! Re-running every sample trace reproduces its output digest, with the recorded strategies
//! and with others; the re-run takes each recorded command at its recorded logical time;
//! traces that cannot be re-run say why.

use std::io::Write;

use megaflux::control::{Command, ControlHandle};
use megaflux::harness::{self, Pace};
use megaflux::plan::{Schedule, Strategy};
use megaflux::summary::Summary;
use megaflux_replay::compare::Comparison;
use megaflux_replay::rerun::{Options, Recording};

mod common;
use common::{sample, samples};

fn run(recording: &Recording, options: &Options) -> Summary {
    let config = recording.rerun(options).expect("the sample re-runs");
    harness::run(config, ControlHandle::new())
        .expect("the re-run runs")
        .expect("worker 0's process has the summary")
}

const MAX: Options = Options {
    strategy: None,
    recovery: None,
    pace: Pace::Max,
    timely_args: Vec::new(),
};

#[test]
fn every_sample_reruns_to_its_digest() {
    for path in samples() {
        let recording = Recording::read(&path).expect("a sample reads");
        assert!(!recording.script.is_empty(), "{}: no commands", path.display());
        let rerun = run(&recording, &MAX);
        let comparison = Comparison {
            recorded: &recording.summary,
            rerun: &rerun,
            recorded_latency: true,
            rerun_latency: false,
        };
        assert!(
            comparison.digests_match(),
            "{}:\n{}",
            path.display(),
            comparison.table()
        );
        assert_eq!(
            rerun.records_in,
            recording.summary.records_in,
            "{}",
            path.display()
        );
        // The same plans, moving the same bins.
        let moved = |s: &Summary| {
            s.migrations
                .iter()
                .map(|m| (m.target.clone(), m.bins_moved))
                .collect::<Vec<_>>()
        };
        let table = comparison.table();
        assert_eq!(
            moved(&rerun),
            moved(&recording.summary),
            "{}:\n{table}",
            path.display()
        );
        let failed = |s: &Summary| s.failures.iter().map(|f| (f.worker, f.time)).collect::<Vec<_>>();
        assert_eq!(
            failed(&rerun),
            failed(&recording.summary),
            "{}:\n{table}",
            path.display()
        );
    }
}

#[test]
fn other_strategies_give_the_same_digest_and_other_figures() {
    let path = sample("keycount-fluid.jsonl");
    let recording = Recording::read(&path).expect("it reads");
    let all_at_once = Schedule {
        strategy: Strategy::AllAtOnce,
        pipelined: false,
    };
    let rerun = run(
        &recording,
        &Options {
            strategy: Some(all_at_once),
            ..MAX
        },
    );
    assert_eq!(rerun.output_digest, recording.summary.output_digest);
    assert_eq!(rerun.migrations.len(), recording.summary.migrations.len());
    for (recorded, again) in recording.summary.migrations.iter().zip(&rerun.migrations) {
        assert_eq!(again.strategy, "all-at-once");
        assert_eq!(
            (again.target.as_str(), again.bins_moved),
            (recorded.target.as_str(), recorded.bins_moved)
        );
        // Fluid moves a bin per step; all at once, one step.
        assert!(recorded.steps > 1);
        assert_eq!(again.steps, 1);
    }
}

#[test]
fn commands_keep_their_recorded_epochs() {
    let path = sample("keycount-failover.jsonl");
    let recording = Recording::read(&path).expect("it reads");
    let script: Vec<(u64, &Command)> = recording.script.iter().map(|s| (s.epoch, &s.command)).collect();
    // `--fail 1@1 --rejoin 1@2.5`: taken at the epochs due then (open loop: within a few
    // epochs of them), which the re-run keeps.
    let due = |s: f64| recording.config.epoch.in_secs(s);
    let near = |epoch: u64, s: f64| epoch.abs_diff(due(s)) <= due(s) / 100;
    assert!(
        matches!(script.as_slice(),
            [(fail, Command::Fail { worker: 1 }), (rejoin, Command::Rejoin { worker: 1 })]
                if near(*fail, 1.0) && near(*rejoin, 2.5)),
        "{script:?}"
    );
    let config = recording.rerun(&MAX).expect("it re-runs");
    assert!(config.failures.is_empty() && config.rejoins.is_empty() && config.migrations.is_empty());
}

/// A trace from the sample's first `lines` lines, with `edit` applied to each.
fn cut(lines: usize, edit: impl Fn(&str) -> String) -> tempfile::NamedTempFile {
    let path = sample("keycount-fluid.jsonl");
    let text = std::fs::read_to_string(path).expect("it reads");
    let mut file = tempfile::NamedTempFile::new().expect("a temporary file");
    for line in text.lines().take(lines) {
        writeln!(file, "{}", edit(line)).expect("written");
    }
    file
}

#[test]
fn traces_that_cannot_be_rerun_say_why() {
    let whole = usize::MAX;
    let cases: Vec<(tempfile::NamedTempFile, &str)> = vec![
        (cut(100, str::to_string), "no summary at its end"),
        (
            cut(whole, |l| {
                l.replace(r#""command":"start_plan""#, r#""command":"explode""#)
            }),
            "a command that cannot be taken again",
        ),
        (
            cut(whole, |l| l.replace(r#""keys":100000"#, r#""keys":"many""#)),
            "the header's job cannot be read",
        ),
    ];
    for (file, why) in cases {
        let e = Recording::read(file.path()).expect_err(why);
        assert!(e.is_bad_input(), "{e}");
        assert!(e.to_string().contains(why), "{e} (expected: {why})");
    }
}
