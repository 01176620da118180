//! The end of a run, however it comes: a job whose timer re-arms itself for ever
//! (`tui/examples/active.rs` with `--drain all`) ends at `--duration`, or at SIGINT or
//! SIGTERM as at `q`, with its summary and every output of the times before the end written
//! once; a second signal kills at once. And logical time means the same in every build: the
//! sessions example gives the same outputs with the default epoch as with the release
//! build's, and with a coarser epoch on an input on whole milliseconds.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use megaflux_testkit::{Proc, run};
use rustix::process::Signal;

mod common;

use common::{example, summary, wait_for_trace};

const VIEWS: u64 = 3_000;
/// How long any of these runs may take before the test calls it hung.
const HUNG: Duration = Duration::from_secs(300);

/// `VIEWS` page views of 50 users, `user,page,ts_ms`.
fn views(path: &Path) {
    let text: String = (0..VIEWS)
        .map(|i| format!("u{},p{},{}\n", (i * 7) % 50, i % 13, i))
        .collect();
    std::fs::write(path, text).unwrap();
}

fn active(cwd: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(example("active"));
    c.args(["run", "--headless", "--input", "views.csv", "--rate", "3000"])
        .args(args)
        .current_dir(cwd)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// The `views` outputs in `output`: one per view, and each user's last is their count.
fn check_views(output: &Path) -> usize {
    let text = std::fs::read_to_string(output).expect("the output file");
    let mut views = 0;
    for line in text.lines() {
        let out: serde_json::Value = serde_json::from_str(line).expect("a whole JSON line");
        if out.get("Views").is_some() {
            views += 1;
        }
    }
    assert_eq!(views, VIEWS as usize, "one output per view");
    text.lines().count()
}

/// Waits until `run` printed a stderr line containing `what`.
fn wait_for(run: &mut Proc, what: &str) {
    run.wait_for_stderr(&format!("a line with `{what}`"), HUNG, |l| l.contains(what));
}

/// Waits for `run` to end: what it printed, and its stderr's lines.
fn finished(run: Proc) -> (Output, Vec<String>) {
    let out = run.wait(HUNG);
    let lines = String::from_utf8_lossy(&out.stderr)
        .lines()
        .map(str::to_string)
        .collect();
    (out, lines)
}

#[test]
fn a_timer_that_rearms_for_ever_ends_at_the_duration_with_every_output() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path();
    views(&cwd.join("views.csv"));
    let out = run(
        "active with a 4 s duration",
        &mut active(
            cwd,
            &["--drain", "all", "--duration", "4", "--output", "active.jsonl"],
        ),
        HUNG,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let s = summary(&out);
    let lines = check_views(&cwd.join("active.jsonl"));
    assert_eq!(s["outputs_written"], lines as u64, "{stderr}");
    assert_eq!(s["outputs"], lines as u64);
    assert_eq!(s["drain"]["cut"], true, "{stderr}");
    assert!(s["drain"]["bins_pending"].as_u64().unwrap() > 0);
    assert!(s["drain"]["next_time"].as_u64().unwrap() >= s["drain"]["ended_at"].as_u64().unwrap());
    assert!(
        stderr.contains("megaflux: draining for "),
        "progress lines: {stderr}"
    );
    assert!(stderr.contains("megaflux: the drain was cut after "), "{stderr}");
}

#[test]
fn the_jobs_own_drain_ends_the_run_without_a_cut() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path();
    views(&cwd.join("views.csv"));
    let out = run(
        "active with its own drain",
        &mut active(cwd, &["--output", "active.jsonl"]),
        HUNG,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let s = summary(&out);
    check_views(&cwd.join("active.jsonl"));
    assert_eq!(s["drain"]["cut"], false, "{stderr}");
    // Eleven seconds of 100 us epochs past the last epoch.
    let (end, from) = (
        s["drain"]["ended_at"].as_u64().unwrap(),
        s["drain"]["input_end"].as_u64().unwrap(),
    );
    assert_eq!(end - from, 1 + 110_000, "{stderr}");
    assert!(!stderr.contains("was cut"), "{stderr}");
}

#[test]
fn sigint_and_sigterm_stop_a_headless_run_as_q_does() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path();
    views(&cwd.join("views.csv"));
    for (name, signal, output) in [
        ("INT", Signal::INT, "int.jsonl"),
        ("TERM", Signal::TERM, "term.jsonl"),
    ] {
        let mut run = Proc::spawn(
            format!("active stopped by SIG{name}"),
            &mut active(cwd, &["--drain", "all", "--output", output]),
        );
        wait_for(&mut run, "megaflux: draining for ");
        run.signal(signal);
        let (out, rest) = finished(run);
        assert!(out.status.success(), "SIG{name}: {rest:#?}");
        let s = summary(&out);
        let written = check_views(&cwd.join(output));
        assert_eq!(s["outputs_written"], written as u64);
        assert_eq!(s["drain"]["cut"], true);
        let said = rest.join("\n");
        assert!(said.contains(&format!("SIG{name}: stopping")), "{said}");
        assert!(said.contains("the drain was cut"), "{said}");
    }
}

#[test]
fn a_signal_in_the_measured_run_stops_it_with_its_summary() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace.jsonl");
    let mut run = Proc::spawn(
        "a keycount of 600 s stopped by SIGINT",
        &mut common::megaflux(&[
            "run",
            "--headless",
            "--workload",
            "keycount",
            "--duration",
            "600",
            "--record",
            trace.to_str().unwrap(),
        ]),
    );
    // The measured run is on: its first latency window, past the preload, is in the trace.
    wait_for_trace(&mut run, &trace, "the first latency window", |events| {
        events.iter().any(|e| e["kind"] == "latency")
    });
    run.interrupt();
    let (out, rest) = finished(run);
    assert!(out.status.success(), "{rest:#?}");
    let s = summary(&out);
    assert!(s["duration_s"].as_f64().unwrap() < 600.0, "stopped early");
    assert!(s["records_in"].as_u64().unwrap() > 0);
    assert_eq!(s.get("drain"), None, "a generated workload does not drain");
}

#[test]
fn a_second_signal_kills_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path();
    views(&cwd.join("views.csv"));
    // A stop that cannot finish soon: the drain's timer has to run first, and here it would
    // run for ever (a stop only ends a drain at its next look, but a second signal does
    // not wait for that).
    let mut run = Proc::spawn(
        "active stopped by SIGINT twice",
        &mut active(cwd, &["--drain", "all", "--output", "killed.jsonl"]),
    );
    wait_for(&mut run, "megaflux: draining for ");
    run.interrupt();
    wait_for(&mut run, "SIGINT: stopping");
    run.interrupt();
    let (out, rest) = finished(run);
    // Either the second signal killed it, or the stop was quicker: never a hang or a panic.
    match out.status.code() {
        Some(130) => assert!(rest.join("\n").contains("killed at once"), "{rest:#?}"),
        Some(0) => {
            summary(&out);
        }
        other => panic!("exit {other:?}: {rest:#?}"),
    }
}

/// The sessions example's outputs on `input`, sorted, with `extra` flags.
fn sessions(cwd: &Path, input: &str, name: &str, extra: &[&str]) -> Vec<(String, u64, u64, u64)> {
    let out = format!("{name}.jsonl");
    let mut args = vec!["run", "--headless", "--input", input, "--output", &out];
    args.extend_from_slice(extra);
    let done = run(
        format!("sessions {}", args.join(" ")),
        Command::new(example("sessions")).args(&args).current_dir(cwd),
        HUNG,
    );
    assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));
    let mut got: Vec<(String, u64, u64, u64)> = std::fs::read_to_string(cwd.join(&out))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    got.sort();
    got
}

/// Rounds of one click by each of 30 users, `apart` lines after the round before give or
/// take a few (filler clicks of other users between), the `i`-th line at event time
/// `i * ms_per_line`.
fn rounds(path: &Path, apart: u64, ms_per_line: u64) {
    let mut text = String::new();
    let mut i = 0u64;
    for round in 0..6u64 {
        for u in 0..30u64 {
            text.push_str(&format!("user{u},{}\n", i * ms_per_line));
            i += 1;
        }
        for filler in 0..(apart - 60 + (round * 17) % 100) {
            text.push_str(&format!("idle{},{}\n", filler % 500, i * ms_per_line));
            i += 1;
        }
    }
    std::fs::write(path, text).unwrap();
}

#[test]
fn the_sessions_example_means_the_same_time_in_every_build_and_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path();
    // At the default 200k records/s line i is due at 5i us, and the rounds are about
    // 200 ms (the session gap) apart: many gaps fall within an epoch of it, where a 1 ms
    // epoch and a 100 us one disagree.
    rounds(&cwd.join("clicks.csv"), 40_000, 1);
    let plain = sessions(cwd, "clicks.csv", "default", &[]);
    assert!(plain.len() > 100, "{} sessions", plain.len());
    // The release build's default epoch: the debug build under test has the same.
    assert_eq!(
        sessions(cwd, "clicks.csv", "release", &["--epoch-us", "100"]),
        plain
    );
    // Clicks due on whole milliseconds (event time 20 ms a line, 20 times faster): a coarser
    // epoch gives the same sessions, as the gap is a duration, not a number of epochs.
    rounds(&cwd.join("ms.csv"), 200, 20);
    let fine = sessions(cwd, "ms.csv", "fine", &["--pace", "event-time", "--speed", "20"]);
    let coarse = sessions(
        cwd,
        "ms.csv",
        "coarse",
        &["--pace", "event-time", "--speed", "20", "--epoch-us", "1000"],
    );
    assert!(fine.iter().any(|s| s.3 > 1) && fine.iter().any(|s| s.0 == "user0" && s.3 == 1));
    assert_eq!(coarse, fine);
}
