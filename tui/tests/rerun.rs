//! `megaflux replay FILE --rerun` from the command line: the table, the exit statuses, the
//! re-run's own trace, and bad input.

use std::process::{Output, Stdio};
use std::time::Duration;

mod common;

/// A bound on one run of the binary (a refusal, a re-run at full speed or a run of 4 s):
/// against a hang, not a judgement of speed.
const LIMIT: Duration = Duration::from_secs(300);

/// `megaflux args`, run to its end for at most [`LIMIT`].
fn megaflux(args: &[&str]) -> Output {
    let mut command = common::megaflux(args);
    command.stdin(Stdio::null());
    megaflux_testkit::run(format!("megaflux {}", args.join(" ")), &mut command, LIMIT)
}

fn sample(name: &str) -> String {
    format!("{}/../traces/{name}", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn a_rerun_prints_the_comparison_and_records_itself() {
    let dir = tempfile::tempdir().expect("a scratch directory");
    let trace = dir.path().join("again.jsonl");
    let out = megaflux(&[
        "replay",
        &sample("keycount-fluid.jsonl"),
        "--rerun",
        "--speed",
        "max",
        "--strategy",
        "batched:4",
        "--record",
        trace.to_str().expect("a UTF-8 path"),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("(same)"), "{stdout}");
    let strategies = stdout
        .lines()
        .find(|l| l.trim_start().starts_with("strategy"))
        .expect("a strategy row");
    assert!(
        strategies.contains("fluid") && strategies.contains("batched:4"),
        "{strategies}"
    );
    // The re-run's trace re-runs to the same outputs in turn.
    let again = megaflux(&[
        "replay",
        trace.to_str().expect("UTF-8"),
        "--rerun",
        "--speed",
        "max",
    ]);
    assert_eq!(
        again.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
}

/// The balancer's plans are in the trace as the maps they moved to: a re-run makes the same
/// moves at the same times (its own balancer only measures) and gives the same outputs.
#[test]
fn a_rerun_moves_what_the_balancer_moved() {
    let dir = tempfile::tempdir().expect("a scratch directory");
    let trace = dir.path().join("balanced.jsonl");
    let trace = trace.to_str().expect("a UTF-8 path");
    let mut job = common::SKEWED_BALANCED.to_vec();
    job.extend(["--record", trace]);
    let run = megaflux(&job);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let recorded = std::fs::read_to_string(trace).expect("the trace");
    let logged: Vec<&str> = recorded
        .lines()
        .filter(|l| l.contains(r#""kind":"command""#) && l.contains(r#""source":"balancer""#))
        .collect();
    assert!(
        !logged.is_empty(),
        "the balancer's plan is a command in the trace"
    );
    assert!(logged.iter().all(|l| l.contains("map:")), "{logged:?}");
    let again = megaflux(&["replay", trace, "--rerun", "--speed", "max"]);
    let stdout = String::from_utf8_lossy(&again.stdout);
    assert_eq!(
        again.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&again.stderr)
    );
    assert!(stdout.contains("(same)"), "{stdout}");
    // As many plans as recorded: none of the re-run's own.
    assert!(stdout.contains("migration 1 "), "{stdout}");
    assert!(
        !stdout.contains(&format!("migration {} ", logged.len() + 1)),
        "{stdout}"
    );
}

#[test]
fn bad_input_exits_2_with_a_reason() {
    let dir = tempfile::tempdir().expect("a scratch directory");
    let cut = dir.path().join("cut.jsonl");
    let text = std::fs::read_to_string(sample("keycount-fluid.jsonl")).expect("the sample reads");
    let half: Vec<&str> = text.lines().take(200).collect();
    std::fs::write(&cut, half.join("\n") + "\n").expect("written");
    let cases: [(&[&str], &str); 4] = [
        (&["replay", "/nonexistent.jsonl", "--rerun"], "/nonexistent.jsonl"),
        (&["replay", cut.to_str().expect("UTF-8"), "--rerun"], "no summary"),
        (
            &["replay", &sample("keycount-fluid.jsonl"), "--strategy", "fluid"],
            "--rerun",
        ),
        (
            &[
                "replay",
                &sample("keycount-fluid.jsonl"),
                "--rerun",
                "--strategy",
                "sideways",
            ],
            "sideways",
        ),
    ];
    for (args, says) in cases {
        let out = megaflux(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

/// The re-run's limits refuse a trace that asks for more, before anything runs; they are
/// flags of `--rerun`.
#[test]
fn the_limits_refuse_a_trace_that_asks_for_more() {
    let trace = sample("keycount-fluid.jsonl");
    let out = megaflux(&["replay", &trace, "--rerun", "--max-workers", "1"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("more than --max-workers 1"), "{stderr}");
    let out = megaflux(&["replay", &trace, "--rerun", "--max-duration", "1"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("longer than --max-duration 1 s"), "{stderr}");
    let out = megaflux(&["replay", &trace, "--max-workers", "1"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--rerun"), "{stderr}");
}
