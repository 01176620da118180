//! Re-running every sample trace reproduces its output digest, with the recorded strategies
//! and with others; the re-run takes each recorded command at its recorded logical time;
//! traces that cannot be re-run say why.

use std::io::Write;

use megaflux::control::{Command, ControlHandle};
use megaflux::harness::Pace;
use megaflux::plan::{Schedule, Strategy};
use megaflux::summary::Summary;
use megaflux_replay::ReplayError;
use megaflux_replay::compare::Comparison;
use megaflux_replay::error::RerunLimit;
use megaflux_replay::rerun::{Limits, Options, Recording};

mod common;
use common::{sample, samples};

/// How long a re-run of a sample (a few seconds of records, as fast as it goes, in a debug
/// build on a loaded machine) may take.
const RUN: std::time::Duration = std::time::Duration::from_secs(600);

/// Re-runs `recording` (named `what` in failures) with `options`, in process.
fn run(what: &str, recording: &Recording, options: &Options) -> Summary {
    let config = recording.rerun(options).expect("the sample re-runs");
    megaflux_testkit::within(&format!("the re-run of {what}"), RUN, move |_| {
        megaflux::workload::run(config, ControlHandle::new())
            .expect("the re-run runs")
            .expect("worker 0's process has the summary")
    })
}

const MAX: Options = Options {
    strategy: None,
    recovery: None,
    pace: Pace::Max,
    timely_args: Vec::new(),
    limits: Limits::DEFAULT,
};

/// The samples of the built-in workloads, which this crate re-runs; the others are of
/// example jobs, which `tui/tests/rerun_drain.rs` re-runs with their own binaries.
fn builtin_samples() -> Vec<(std::path::PathBuf, Recording)> {
    let jobs = megaflux::workload::builtin();
    let (builtin, examples): (Vec<_>, Vec<_>) = samples()
        .into_iter()
        .map(|path| {
            let recording = Recording::read(&path).expect("a sample reads");
            (path, recording)
        })
        .partition(|(_, r)| jobs.get(&r.config.workload).is_some());
    let names: Vec<String> = examples
        .iter()
        .filter_map(|(p, _)| Some(p.file_name()?.to_string_lossy().into_owned()))
        .collect();
    assert_eq!(
        names,
        ["sessions-drain.jsonl"],
        "samples of example jobs: each needs its re-run in tui/tests/rerun_drain.rs"
    );
    builtin
}

#[test]
fn every_sample_reruns_to_its_digest() {
    for (path, recording) in builtin_samples() {
        assert!(!recording.script.is_empty(), "{}: no commands", path.display());
        let rerun = run(&path.display().to_string(), &recording, &MAX);
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
        // The same plans, moving the same bins. A `balance` plan re-runs as the map it moved
        // to (the re-run's loads differ), which its target then names.
        let moved = |s: &Summary| {
            s.migrations
                .iter()
                .map(|m| {
                    let balanced = m.target.starts_with("balance:") || m.target.starts_with("map:");
                    let target = if balanced {
                        "balance or its map"
                    } else {
                        m.target.as_str()
                    };
                    (target.to_string(), m.bins_moved)
                })
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
        "keycount-fluid.jsonl with all-at-once",
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
            cut(whole, |l| {
                l.replace(r#""chunk_bytes":1048576"#, r#""chunk_bytes":"many""#)
            }),
            "the header's job cannot be read",
        ),
    ];
    for (file, why) in cases {
        let e = Recording::read(file.path()).expect_err(why);
        assert!(e.is_bad_input(), "{e}");
        assert!(e.to_string().contains(why), "{e} (expected: {why})");
    }
}

/// The line of the fluid sample's second command (`matched` back, at time 25001).
fn second_command() -> usize {
    let text = std::fs::read_to_string(sample("keycount-fluid.jsonl")).expect("it reads");
    let at = text
        .lines()
        .position(|l| l.contains(r#""kind":"command""#) && l.contains(r#""time":25001"#));
    at.expect("the sample's second command") + 1
}

/// The whole sample, with `edit` applied to each line (numbered from 1, the header).
fn edited(edit: impl Fn(usize, &str) -> String) -> tempfile::NamedTempFile {
    let path = sample("keycount-fluid.jsonl");
    let text = std::fs::read_to_string(path).expect("it reads");
    let mut file = tempfile::NamedTempFile::new().expect("a temporary file");
    for (i, line) in text.lines().enumerate() {
        writeln!(file, "{}", edit(i + 1, line)).expect("written");
    }
    file
}

/// One unreadable line in the middle of a trace is skipped and named; the commands around
/// it are read.
#[test]
fn an_unreadable_line_is_skipped_and_named() {
    let file = edited(|n, l| {
        if n == 248 {
            "not an event".into()
        } else {
            l.to_string()
        }
    });
    let recording = Recording::read(file.path()).expect("it reads past the bad line");
    assert_eq!(recording.unreadable.lines().to_vec(), vec![248]);
    let said = recording.unreadable.to_string();
    assert!(said.starts_with("skipped 1 unreadable line: 248"), "{said}");
    assert_eq!(recording.script.len(), 2);
    let whole = Recording::read(&sample("keycount-fluid.jsonl")).expect("it reads");
    assert!(whole.unreadable.is_empty());
    // The header is never skipped.
    let file = edited(|n, l| {
        if n == 1 {
            "not a header".into()
        } else {
            l.to_string()
        }
    });
    let e = Recording::read(file.path()).expect_err("no header");
    assert!(e.to_string().contains("line 1"), "{e}");
}

/// The header's workers, however many, start no more threads than the limit; flags lift it.
#[test]
fn a_header_of_too_many_workers_is_refused() {
    let file = edited(|n, l| match n {
        1 => l.replace(r#""workers":2,"workload""#, r#""workers":100000,"workload""#),
        _ => l.to_string(),
    });
    let recording = Recording::read(file.path()).expect("it reads");
    let e = recording.rerun(&MAX).expect_err("100,000 workers");
    assert!(
        matches!(
            e,
            ReplayError::Limit(RerunLimit::Workers {
                workers: 100_000,
                max: 256
            })
        ),
        "{e}"
    );
    assert!(e.is_bad_input());
    assert!(e.to_string().contains("--max-workers"), "{e}");
    let lifted = Options {
        limits: Limits {
            max_workers: 100_000,
            ..Limits::DEFAULT
        },
        ..MAX
    };
    assert!(
        !matches!(recording.rerun(&lifted), Err(ReplayError::Limit(_))),
        "the limit is lifted"
    );
}

/// Workers per process times processes that overflow are an error naming the field.
#[test]
fn workers_times_processes_that_overflow_are_refused() {
    let file = edited(|n, l| match n {
        1 => l
            .replace(
                r#""workers":2,"workload""#,
                r#""workers":18446744073709551615,"workload""#,
            )
            .replace(r#""processes":1,"#, r#""processes":4294967295,"#),
        _ => l.to_string(),
    });
    let recording = Recording::read(file.path()).expect("it reads");
    let e = recording.rerun(&MAX).expect_err("it overflows");
    assert!(
        matches!(
            e,
            ReplayError::Limit(RerunLimit::WorkersOverflow {
                processes: 4_294_967_295,
                ..
            })
        ),
        "{e}"
    );
    assert!(e.to_string().contains("`config.workers`"), "{e}");
}

/// A run longer than the limit, and a command past it, are refused; flags lift the limit.
#[test]
fn runs_and_commands_past_the_duration_limit_are_refused() {
    let long = edited(|_, l| match l.contains(r#""kind":"summary""#) {
        true => l.replacen(r#""duration_s":4.0"#, r#""duration_s":7200.0"#, 1),
        false => l.to_string(),
    });
    let recording = Recording::read(long.path()).expect("it reads");
    let e = recording.rerun(&MAX).expect_err("two hours");
    assert!(
        matches!(e, ReplayError::Limit(RerunLimit::Duration { max: 3600, .. })),
        "{e}"
    );
    assert!(e.to_string().contains("--max-duration"), "{e}");
    let lifted = Options {
        limits: Limits {
            max_duration: std::time::Duration::from_secs(3 * 3600),
            ..Limits::DEFAULT
        },
        ..MAX
    };
    assert!(!matches!(recording.rerun(&lifted), Err(ReplayError::Limit(_))));

    let late = edited(|n, l| match n == second_command() {
        true => l.replace(r#""time":25001"#, r#""time":99999999999"#),
        false => l.to_string(),
    });
    let recording = Recording::read(late.path()).expect("it reads");
    let e = recording.rerun(&MAX).expect_err("a command at 10,000,000 s");
    assert!(
        matches!(
            e,
            ReplayError::Limit(RerunLimit::Epoch {
                epoch: 99_999_999_998,
                ..
            })
        ),
        "{e}"
    );
}

/// A `base` whose sum with a command's epoch overflows is an error naming both.
#[test]
fn a_base_that_overflows_is_refused() {
    let file = edited(|_, l| match l.contains(r#""kind":"job_started""#) {
        true => l.replace(r#""base":1"#, r#""base":18446744073709551615"#),
        false => l.to_string(),
    });
    let e = Recording::read(file.path()).expect_err("it overflows");
    assert!(e.is_bad_input());
    let said = e.to_string();
    assert!(
        said.contains("line 116") && said.contains("`base`") && said.contains("overflows"),
        "{said}"
    );
}

/// Commands whose few bytes name many bins (`0-65535`) are budgeted by the bins they name:
/// a trace of many is refused, naming the line, before the re-run holds them all.
#[test]
fn commands_naming_too_many_bins_are_refused() {
    let file = edited(|n, l| {
        if n != second_command() {
            return l.to_string();
        }
        let mut command: serde_json::Value = serde_json::from_str(l).expect("a command line");
        command["request"] = serde_json::json!({
            "command": "move_bins", "bins": "0-65535", "worker": 1, "standby": false
        });
        let line = command.to_string();
        vec![line; 70].join("\n")
    });
    let e = Recording::read(file.path()).expect_err("70 moves of 65,536 bins");
    assert!(e.is_bad_input());
    // The first command (a plan) names one bin: the 64th move goes past 2^22 bins.
    let line = format!("line {}", second_command() + 63);
    assert!(
        e.to_string().contains("more than") && e.to_string().contains(&line),
        "{e} ({line})"
    );
}

#[test]
fn commands_after_a_restart_are_left_out_and_the_restart_named() {
    // A crash recorded between the sample's two plans: the second names the restarted
    // computation's workers.
    let text = std::fs::read_to_string(sample("keycount-fluid.jsonl")).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    let second = lines
        .iter()
        .position(|l| l.contains(r#""command":"matched plan to uniform""#))
        .expect("the sample's second plan");
    let restart =
        r#"{"at_s":2.0,"process":0,"kind":"restart","generation":1,"from":20000,"lost":"1","survivors":"0"}"#;
    lines.insert(second, restart);
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(lines.join("\n").as_bytes()).unwrap();
    file.write_all(b"\n").unwrap();
    let recording = Recording::read(file.path()).expect("the trace reads");
    assert_eq!(recording.restarted, Some(("1".to_string(), 20000, 1)));
    assert_eq!(recording.script.len(), 1, "the plan before the restart is kept");
    let untouched = Recording::read(&sample("keycount-fluid.jsonl")).unwrap();
    assert_eq!(untouched.restarted, None);
    assert_eq!(untouched.script.len(), 2);
}
