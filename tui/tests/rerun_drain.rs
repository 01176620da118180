//! A re-run ends as its recorded run ended, its drain included: a job whose drain completes
//! (the sessions example), one whose drain is cut by `--duration` and one stopped by SIGINT
//! in the middle of its input (the active example with `--drain all`, whose timer re-arms
//! for ever), and one whose drain reaches the job's own horizon (`Drain::For`, the active
//! example as it is). Each re-runs (`replay --rerun`) to its recorded digest and output
//! count.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use megaflux_testkit::{Proc, run};
use serde_json::Value;

mod common;

use common::{Draws, example, summary, wait_for_trace};

/// How long any run or re-run may take before the test calls it hung.
const HUNG: Duration = Duration::from_secs(300);

/// `n` page views of 50 users, `user,page,ts_ms`.
fn views(path: &Path, n: u64) {
    let text: String = (0..n)
        .map(|i| format!("u{},p{},{}\n", (i * 7) % 50, i % 13, i))
        .collect();
    std::fs::write(path, text).expect("the views are written");
}

/// Clicks of 3000 users in bursts and pauses, `user,ts_ms` (seeded): sessions close
/// within the run and after its last record.
fn clicks(path: &Path, n: u64) {
    let mut draws = Draws(3);
    let mut ts: u64 = 1_700_000_000_000;
    let mut text = String::new();
    for _ in 0..n {
        let x = draws.next();
        ts += [0, 1, 2, 5, 40][(x % 5) as usize];
        text.push_str(&format!("u{},{ts}\n", (x >> 8) % 3000));
    }
    std::fs::write(path, text).expect("the clicks are written");
}

/// The example `name` in `cwd` with `args`.
fn job(cwd: &Path, name: &str, args: &[&str]) -> Command {
    let mut c = Command::new(example(name));
    c.args(args)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// Re-runs the trace `trace` with the example `name` and checks it against `recorded`,
/// the recorded run's summary: the re-run says its digest is the same, and its own
/// summary has the recorded digest and output count. `what` names the shape. Returns what
/// the re-run printed on stderr.
fn reruns_the_same(cwd: &Path, name: &str, trace: &str, recorded: &Value, what: &str) -> String {
    // The re-run drains to the gate the recorded run ended at, counted from the base,
    // whatever the clock says (before, its --duration, the recorded run's measured seconds,
    // cut its drain at the input's end whenever the re-run kept pace; and a gate counted
    // from the input's end moves with where a run saw its file end).
    let recording = megaflux_replay::rerun::Recording::read(&cwd.join(trace)).expect("the trace reads");
    let drain = &recorded["drain"];
    let text = std::fs::read_to_string(cwd.join(trace)).expect("the trace");
    let base = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|e| e["kind"] == "job_started")
        .and_then(|e| e["base"].as_u64());
    let gate = drain["ended_at"].as_u64().zip(base).map(|(end, base)| end - base);
    assert!(
        gate.is_some(),
        "{what}: the recorded drain's end and base: {drain}"
    );
    assert_eq!(recording.config.drain_ends, gate, "{what}: {drain}");
    let out = run(
        format!("the re-run of {what}"),
        &mut job(cwd, name, &["replay", trace, "--rerun"]),
        HUNG,
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{what}: the re-run differs\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains("(same)"), "{what}\n{stdout}");
    let rerun = summary(&out);
    assert_eq!(rerun["output_digest"], recorded["output_digest"], "{what}");
    assert_eq!(rerun["outputs"], recorded["outputs"], "{what}");
    assert_eq!(rerun["records_in"], recorded["records_in"], "{what}");
    stderr.into_owned()
}

/// Runs `args` of the example `name` to its end with `--record trace.jsonl`: its summary.
fn recorded(cwd: &Path, name: &str, args: &[&str], what: &str) -> Value {
    let mut args = args.to_vec();
    args.extend(["--record", "trace.jsonl", "--force"]);
    let out = run(what.to_string(), &mut job(cwd, name, &args), HUNG);
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    summary(&out)
}

#[test]
fn a_drain_that_completes_is_repeated() {
    let dir = tempfile::tempdir().expect("a scratch directory");
    let cwd = dir.path();
    clicks(&cwd.join("clicks.csv"), 20_000);
    let what = "sessions over 20000 clicks";
    let args = [
        "run",
        "--headless",
        "--input",
        "clicks.csv",
        "--rate",
        "20000",
        "--workers",
        "2",
        // Sessions close 5 s after their last click: the last ones close in the drain
        // however late the run saw the input's end (it ends once the file's end is read).
        "--gap-ms",
        "5000",
    ];
    let s = recorded(cwd, "sessions", &args, what);
    assert_eq!(s["drain"]["cut"], false, "{what}: its drain completed");
    assert!(
        s["drain"]["ended_at"].as_u64() > s["drain"]["input_end"].as_u64().map(|t| t + 1),
        "{what}: sessions closed after the input's end: {}",
        s["drain"]
    );
    reruns_the_same(cwd, "sessions", "trace.jsonl", &s, what);
    says_where_a_shorter_drain_parts(cwd, &s);
}

/// The trace of `recorded` with its drain said to end one epoch after the input's: its
/// re-run stops there, and says its outputs first part after the input's end, at or before
/// where the recorded drain ended.
fn says_where_a_shorter_drain_parts(cwd: &Path, recorded: &Value) {
    let what = "a re-run told the drain ended one epoch after the input";
    let input_end = recorded["drain"]["input_end"].as_u64().expect("the input's end");
    let ended_at = recorded["drain"]["ended_at"].as_u64().expect("the drain's end");
    let text = std::fs::read_to_string(cwd.join("trace.jsonl")).expect("the trace");
    let shorter: String = text
        .lines()
        .map(|line| match serde_json::from_str::<Value>(line) {
            Ok(mut e) if e["kind"] == "summary" => {
                e["summary"]["drain"]["ended_at"] = (input_end + 1).into();
                format!("{e}\n")
            }
            _ => format!("{line}\n"),
        })
        .collect();
    std::fs::write(cwd.join("shorter.jsonl"), shorter).expect("the changed trace is written");
    let out = run(
        what.to_string(),
        &mut job(cwd, "sessions", &["replay", "shorter.jsonl", "--rerun"]),
        HUNG,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{what}: the outputs differ\n{stderr}");
    let span = stderr
        .split("they first part at logical times ")
        .nth(1)
        .and_then(|rest| rest.split_once(' '))
        .and_then(|(span, _)| span.split_once(".."))
        .and_then(|(from, to)| Some((from.parse::<u64>().ok()?, to.parse::<u64>().ok()?)));
    let Some((from, to)) = span else {
        panic!("{what}: no parting said\n{stderr}");
    };
    assert!(
        to > input_end + 1 && from <= ended_at,
        "{what}: they part in {from}..{to}, the input ended at {input_end} and the recorded drain at {ended_at}\n{stderr}"
    );
    assert!(
        stderr.contains(&format!(
            "the recorded run's input ended at {input_end}, its drain at {}",
            input_end + 1
        )),
        "{what}: the drains are said beside it\n{stderr}"
    );
}

#[test]
fn a_drain_cut_by_the_duration_is_repeated() {
    let dir = tempfile::tempdir().expect("a scratch directory");
    let cwd = dir.path();
    views(&cwd.join("views.csv"), 3_000);
    let what = "active with --drain all cut at 3 s";
    let args = [
        "run",
        "--headless",
        "--input",
        "views.csv",
        "--rate",
        "3000",
        "--drain",
        "all",
        "--duration",
        "3",
    ];
    let s = recorded(cwd, "active", &args, what);
    assert_eq!(s["drain"]["cut"], true, "{what}: the timer re-arms for ever");
    reruns_the_same(cwd, "active", "trace.jsonl", &s, what);
}

#[test]
fn a_run_stopped_by_sigint_in_its_input_is_repeated() {
    let dir = tempfile::tempdir().expect("a scratch directory");
    let cwd = dir.path();
    // 60 s of views at 1000/s: the stop comes long before the input's end.
    views(&cwd.join("views.csv"), 60_000);
    let what = "active stopped by SIGINT in its input";
    let trace = cwd.join("trace.jsonl");
    let mut running = Proc::spawn(
        what,
        &mut job(
            cwd,
            "active",
            &[
                "run",
                "--headless",
                "--input",
                "views.csv",
                "--rate",
                "1000",
                "--drain",
                "all",
                "--record",
                "trace.jsonl",
                "--force",
            ],
        ),
    );
    wait_for_trace(&mut running, &trace, "the first latency window", |events| {
        events.iter().any(|e| e["kind"] == "latency")
    });
    running.interrupt();
    let out = running.wait(HUNG);
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = summary(&out);
    assert!(
        s["records_in"].as_u64() < Some(60_000),
        "{what}: stopped before its input's end: {}",
        s["records_in"]
    );
    reruns_the_same(cwd, "active", "trace.jsonl", &s, what);
}

#[test]
fn a_drain_to_the_jobs_own_horizon_is_repeated() {
    let dir = tempfile::tempdir().expect("a scratch directory");
    let cwd = dir.path();
    views(&cwd.join("views.csv"), 3_000);
    let what = "active with its own drain (11 s past the input)";
    let args = ["run", "--headless", "--input", "views.csv", "--rate", "3000"];
    let s = recorded(cwd, "active", &args, what);
    // The timer re-arms for ever: the drain ends at the horizon the job gave, not for want
    // of work, and that is no cut.
    assert_eq!(s["drain"]["cut"], false, "{what}: {}", s["drain"]);
    assert!(
        s["drain"]["bins_pending"].as_u64() > Some(0),
        "{what}: {}",
        s["drain"]
    );
    reruns_the_same(cwd, "active", "trace.jsonl", &s, what);
}

/// The sessions sample (`traces/sessions-drain.jsonl`, made over `traces/sessions-clicks.csv`
/// beside it) re-runs to its recorded digest, drain included, from a copy whose recorded
/// input path is gone (as on any clone but the one that recorded it): the re-run reads the
/// file beside the trace.
#[test]
fn the_sessions_sample_reruns_to_its_digest() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../traces");
    let dir = tempfile::tempdir().expect("a scratch directory");
    let cwd = dir.path();
    std::fs::copy(root.join("sessions-clicks.csv"), cwd.join("sessions-clicks.csv"))
        .expect("the clicks copy");
    let text = std::fs::read_to_string(root.join("sessions-drain.jsonl")).expect("the sample");
    let mut recorded = None;
    let mut moved = String::new();
    for (n, line) in text.lines().enumerate() {
        let mut e: Value = serde_json::from_str(line).expect("the sample's lines are JSON");
        if n == 0 {
            e["config"]["input"]["from"] = "/gone/sessions-clicks.csv".into();
        }
        if e["kind"] == "summary" {
            recorded = Some(e["summary"].clone());
        }
        moved.push_str(&format!("{e}\n"));
    }
    std::fs::write(cwd.join("sample.jsonl"), moved).expect("the copy is written");
    let recorded = recorded.expect("the sample ends with its summary");
    assert_eq!(recorded["drain"]["cut"], false, "the sample's drain completed");
    let said = reruns_the_same(cwd, "sessions", "sample.jsonl", &recorded, "the sessions sample");
    assert!(said.contains("sessions-clicks.csv, beside the trace"), "{said}");
}
