//! A job's own flags: the sessions example's `--gap-ms` is listed under the job's name in
//! `run --help` (and no built-in workload's flag is), changes its sessions, is recorded in
//! the trace header, and `replay --rerun` runs the job with it again; a flag the job does
//! not take, or a bad value, is refused naming it. The built-in workloads take theirs the
//! same way.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

mod common;

use common::{example, summary};

/// A bound on one run of a binary (a refusal, a re-run at full speed, or a run of 3 s of
/// event time at 10 times its speed): against a hang, not a judgement of speed.
const LIMIT: Duration = Duration::from_secs(300);

/// Runs `command`, named `name`, to its end for at most [`LIMIT`].
fn finished(name: String, command: &mut Command) -> Output {
    command.stdin(Stdio::null());
    megaflux_testkit::run(name, command, LIMIT)
}

fn sessions(cwd: &Path, args: &[&str]) -> Output {
    let mut command = Command::new(example("sessions"));
    command.args(args).current_dir(cwd);
    finished(format!("sessions {}", args.join(" ")), &mut command)
}

fn megaflux(args: &[&str]) -> Output {
    finished(
        format!("megaflux {}", args.join(" ")),
        &mut common::megaflux(args),
    )
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// 40 users, each clicking every 300 ms of event time for 3 s.
fn clicks(path: &Path) {
    let mut text = String::new();
    for ms in (0..3_000u64).step_by(300) {
        for user in 0..40 {
            text.push_str(&format!("user{user},{}\n", ms + user));
        }
    }
    std::fs::write(path, text).unwrap();
}

fn lines(path: &Path) -> usize {
    std::fs::read_to_string(path).unwrap().lines().count()
}

#[test]
fn a_jobs_own_flag_is_listed_recorded_and_re_run_with() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path();
    let help = sessions(cwd, &["run", "--help"]);
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(help.status.success(), "{}", stderr(&help));
    assert!(text.contains("Flags of sessions"), "{text}");
    assert!(text.contains("--gap-ms <MS>"), "{text}");
    for builtin in ["--keys", "--window-ms", "--in-flight-auctions", "--skew"] {
        assert!(!text.contains(builtin), "{builtin} in {text}");
    }

    clicks(&cwd.join("clicks.csv"));
    let run = |name: &str, extra: &[&str]| {
        let output = format!("{name}.jsonl");
        let mut args = vec![
            "run",
            "--headless",
            "--input",
            "clicks.csv",
            "--pace",
            "event-time",
            "--speed",
            "10",
            "--output",
            &output,
        ];
        args.extend_from_slice(extra);
        let out = sessions(cwd, &args);
        assert!(out.status.success(), "{}", stderr(&out));
        out
    };
    // Clicks 300 ms of event time apart, 10 times faster: 30 ms of logical time. One
    // session per user at the default 200 ms gap; each click a session of its own at 20 ms.
    run("long", &[]);
    assert_eq!(lines(&cwd.join("long.jsonl")), 40);
    let short = run("short", &["--gap-ms", "20", "--record", "short.trace"]);
    assert_eq!(lines(&cwd.join("short.jsonl")), 400);
    let recorded = summary(&short);
    assert_eq!(recorded["params"]["gap-ms"], "20", "{recorded}");
    let header: serde_json::Value = serde_json::from_str(
        std::fs::read_to_string(cwd.join("short.trace"))
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(header["config"]["params"]["gap-ms"], "20", "{header}");

    let rerun = sessions(cwd, &["replay", "short.trace", "--rerun", "--speed", "max"]);
    assert!(rerun.status.success(), "{}", stderr(&rerun));
    let again = summary(&rerun);
    assert_eq!(again["params"]["gap-ms"], "20", "{again}");
    assert_eq!(again["output_digest"], recorded["output_digest"]);

    // What the job does not take, and what its flag refuses, are named.
    let unknown = sessions(cwd, &["run", "--headless", "--input", "clicks.csv", "--gap"]);
    assert_eq!(unknown.status.code(), Some(2));
    assert!(stderr(&unknown).contains("'--gap'"), "{}", stderr(&unknown));
    let bad = sessions(
        cwd,
        &["run", "--headless", "--input", "clicks.csv", "--gap-ms", "soon"],
    );
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        stderr(&bad).contains("--gap-ms soon: invalid digit"),
        "{}",
        stderr(&bad)
    );
    let zero = sessions(
        cwd,
        &["run", "--headless", "--input", "clicks.csv", "--gap-ms", "0"],
    );
    assert_eq!(zero.status.code(), Some(2));
    assert!(stderr(&zero).contains("at least 1 ms"), "{}", stderr(&zero));
}

#[test]
fn the_builtin_workloads_take_their_own_flags_and_no_others() {
    let help = megaflux(&["run", "--help"]);
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(text.contains("Flags of keycount, hashcount"), "{text}");
    assert!(text.contains("Flags of q1, q2, q3, q4, q5, q6, q7, q8"), "{text}");
    let other = megaflux(&["run", "--headless", "--workload", "keycount", "--window-ms", "10"]);
    assert_eq!(other.status.code(), Some(2));
    assert!(
        stderr(&other)
            .contains("keycount takes no --window-ms (it takes --keys, --skew, --skew-shift, --work)"),
        "{}",
        stderr(&other)
    );
    let refused = megaflux(&["run", "--headless", "--workload", "q4", "--keys", "10"]);
    assert_eq!(refused.status.code(), Some(2));
    let said = stderr(&refused);
    assert!(
        said.contains("q4 takes no --keys (it takes --window-ms, --slide-ms, --in-flight-auctions)"),
        "{said}"
    );
    let out = megaflux(&[
        "run",
        "--headless",
        "--workload",
        "hashcount",
        "--keys",
        "500",
        "--rate",
        "2000",
        "--duration",
        "0.3",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let s = summary(&out);
    assert_eq!(s["params"]["keys"], "500", "{s}");
    assert_eq!(s["params"]["work"], "0", "{s}");
}
