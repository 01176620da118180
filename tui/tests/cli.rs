//! Bad input gets a one-line error naming the bad value and exit status 2, never a panic.

use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// A bound on one run of the binary (a refusal, or a run of half a second): against a hang,
/// not a judgement of speed.
const LIMIT: Duration = Duration::from_secs(300);

/// The binary with `args` (its stdin empty, as a script's), for `env` to set more.
fn command(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_megaflux"));
    c.args(args).stdin(Stdio::null());
    c
}

/// Runs `command` to its end, for at most [`LIMIT`].
fn finished(command: &mut Command) -> Output {
    let args: Vec<String> = command
        .get_args()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    megaflux_testkit::run(format!("megaflux {}", args.join(" ")), command, LIMIT)
}

fn megaflux(args: &[&str]) -> Output {
    finished(&mut command(args))
}

fn assert_usage_error(args: &[&str], names: &str) {
    let out = megaflux(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
    assert_eq!(
        stderr.trim_end().lines().count(),
        1,
        "{args:?}: not one line: {stderr}"
    );
    assert!(stderr.contains(names), "{args:?}: {stderr} does not name {names}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(out.stdout.is_empty());
}

#[test]
fn malformed_migrations_are_rejected() {
    for (spec, names) in [
        ("fluid", "fluid"),
        ("fluid@x:uniform", "`x`"),
        ("teleport@1:uniform", "teleport"),
        ("batched:0@1:uniform", "batched:0"),
        ("fluid@1:pack:zero", "zero"),
        ("fluid@1:sideways", "sideways"),
    ] {
        assert_usage_error(&["run", "--headless", "--migrate", spec], names);
    }
}

#[test]
fn targets_that_do_not_fit_the_job_are_rejected() {
    assert_usage_error(
        &[
            "run",
            "--headless",
            "--workers",
            "2",
            "--migrate",
            "fluid@1:pack:3",
        ],
        "pack:3",
    );
    assert_usage_error(
        &[
            "run",
            "--headless",
            "--workers",
            "2",
            "--migrate",
            "fluid@1:drain:7",
        ],
        "drain:7",
    );
}

#[test]
fn unknown_workload_is_rejected() {
    assert_usage_error(&["run", "--headless", "--workload", "wordcount"], "wordcount");
    assert_usage_error(&["run", "--headless", "--workload", "q9"], "q9");
}

#[test]
fn nexmark_windows_must_fit() {
    assert_usage_error(
        &["run", "--headless", "--workload", "q5", "--slide-ms", "300"],
        "300",
    );
    assert_usage_error(
        &[
            "run",
            "--headless",
            "--workload",
            "q4",
            "--in-flight-auctions",
            "0",
        ],
        "0",
    );
}

#[test]
fn bin_counts_must_be_powers_of_two() {
    assert_usage_error(&["run", "--headless", "--bins", "100"], "100");
    assert_usage_error(&["run", "--headless", "--bins", "8"], "8");
    assert_usage_error(&["run", "--headless", "--bins", "lots"], "lots");
}

#[test]
fn other_bad_values_are_rejected() {
    assert_usage_error(&["run", "--headless", "--rate", "0"], "0");
    assert_usage_error(&["run", "--headless", "--duration", "-3"], "-3");
    assert_usage_error(
        &["run", "--headless", "--native", "--migrate", "fluid@1:pack:1"],
        "--native",
    );
    assert_usage_error(&["run", "--headless", "--", "-n", "two"], "two");
    assert_usage_error(&["run", "--headless", "--epoch-us", "300"], "300 us");
    assert_usage_error(&["run", "--headless", "--epoch-us", "0"], "0 us");
    assert_usage_error(&["run", "--headless", "--epoch-us", "1ms"], "1ms");
    assert_usage_error(&["run", "--headless", "--epochs", "sometimes"], "sometimes");
    // Q4 reads its records' times: adaptive epochs would make its answers wrong.
    assert_usage_error(
        &["run", "--headless", "--workload", "q4", "--epochs", "adaptive"],
        "q4 does not allow adaptive epochs",
    );
    // Nor in a cluster that restarts after a crash: it resends records from a committed
    // time, which an adaptive batch may straddle. (Refused before any process connects.)
    let dir = tempfile::tempdir().expect("a scratch directory");
    let hosts = dir.path().join("hosts.txt");
    std::fs::write(&hosts, "127.0.0.1:1\n127.0.0.1:2\n").expect("a temporary file");
    let hosts_arg = hosts.to_str().expect("a UTF-8 path");
    assert_usage_error(
        &[
            "run",
            "--headless",
            "--replicas",
            "2",
            "--epochs",
            "adaptive",
            "--",
            "-n",
            "2",
            "-p",
            "1",
            "-h",
            hosts_arg,
        ],
        "restarts after a crash",
    );
}

#[test]
fn bad_observer_settings_are_rejected() {
    // A non-loopback address needs a token for commands.
    let out = finished(command(&["run", "--headless", "--serve", "0.0.0.0:0"]).env_remove("MEGAFLUX_TOKEN"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("token"), "{stderr}");
    assert_usage_error(&["run", "--headless", "--serve", "localhost"], "localhost");
    assert_usage_error(&["run", "--headless", "--export", "nowhere:x"], "nowhere:x");
    assert_usage_error(
        &[
            "run",
            "--headless",
            "--export",
            "127.0.0.1:9",
            "--record",
            "t.jsonl",
        ],
        "--export",
    );
    // A trace that cannot be created: named, status 1, nothing run.
    let out = megaflux(&["run", "--headless", "--record", "/nonexistent/dir/t.jsonl"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("/nonexistent/dir/t.jsonl"), "{stderr}");
    assert!(out.stdout.is_empty());
    // An empty token protects nothing: refused before anything runs.
    let out = finished(command(&["run", "--headless", "--serve", "127.0.0.1:0"]).env("MEGAFLUX_TOKEN", ""));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("empty"), "{stderr}");
}

/// A trace already recorded is never replaced by accident: `--record` to an existing file
/// is refused (and the file kept) unless `--force` says to replace it.
#[test]
fn record_keeps_an_existing_trace_unless_forced() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kept.jsonl");
    std::fs::write(&path, "precious\n").unwrap();
    let file = path.to_str().unwrap();
    let short = ["--duration", "0.3", "--keys", "100", "--rate", "1000"];
    let out = megaflux(&[&["run", "--headless", "--record", file][..], &short].concat());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("already exists") && stderr.contains("--force"),
        "{stderr}"
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "precious\n");
    let out = megaflux(&[&["run", "--headless", "--record", file, "--force"][..], &short].concat());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(std::fs::read_to_string(&path).unwrap().starts_with('{'));
}

#[test]
fn without_a_terminal_run_goes_headless() {
    let out = megaflux(&["run", "--duration", "0.5", "--keys", "1000", "--rate", "2000"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("not a terminal"), "{stderr}");
    let last = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .unwrap_or_default()
        .to_string();
    let summary: serde_json::Value = serde_json::from_str(&last).expect("a JSON summary");
    assert_eq!(summary["duration_s"], 0.5);
}

#[test]
fn bad_replica_and_failure_flags_are_rejected() {
    for (args, names) in [
        (vec!["--replicas", "3"], "3"),
        (vec!["--fail", "x@1"], "`x`"),
        (vec!["--fail", "1"], "1"),
        (vec!["--fail", "1@-3"], "-3"),
        (vec!["--fail", "5@1"], "worker 5"),
        (vec!["--rejoin", "2@1"], "worker 2"),
        (vec!["--recovery", "slowly"], "slowly"),
        (vec!["--replicas", "2", "--workers", "1"], "--replicas 2"),
        (vec!["--replicas", "2", "--native"], "--native"),
        (vec!["--inject-panic", "4@1"], "worker 4"),
    ] {
        let mut all = vec!["run", "--headless"];
        all.extend(args);
        assert_usage_error(&all, names);
    }
}

#[test]
fn cluster_arguments_and_sizes_are_checked_before_anything_runs() {
    // Timely's own forms of -n and -p, with a process index that is not in the cluster.
    assert_usage_error(
        &["run", "--headless", "--", "-n", "2", "-p", "2"],
        "-p 2 is not a process of -n 2",
    );
    assert_usage_error(
        &["run", "--headless", "--", "-n2", "-p7"],
        "-p 7 is not a process of -n 2",
    );
    assert_usage_error(
        &["run", "--headless", "--", "--processes=x"],
        "bad timely arguments",
    );
    // The machine's memory is known where /proc/meminfo is.
    if cfg!(target_os = "linux") {
        assert_usage_error(
            &[
                "run",
                "--headless",
                "--workload",
                "hashcount",
                "--keys",
                "100000000000000",
            ],
            "more than this machine's",
        );
    }
    assert_usage_error(
        &["run", "--headless", "--", "-p", "1"],
        "-p 1 is not a process of -n 1",
    );
    assert_usage_error(
        &["run", "--headless", "--migrate", "fluid@1:map:4294967296"],
        "out of range",
    );
}

/// `attach` takes a host name; without a terminal it says it needs one; a bad address
/// names what is wrong.
#[test]
fn attach_takes_host_names_and_needs_a_terminal() {
    assert_usage_error(&["attach", "localhost:6650"], "needs a terminal");
    assert_usage_error(&["attach", "127.0.0.1:6650"], "needs a terminal");
    assert_usage_error(&["attach", "localhost"], "HOST:PORT");
    assert_usage_error(&["attach", "localhost:99999"], "HOST:PORT");
    assert_usage_error(&["attach", "no-such-host.invalid:6650"], "no-such-host.invalid");
}

#[test]
fn auto_epochs_are_adaptive_where_allowed_and_fixed_elsewhere() {
    // Each sized by a flag of its own.
    for (workload, size, epochs) in [
        ("keycount", "--keys", "adaptive epochs"),
        ("q3", "--in-flight-auctions", "adaptive epochs"),
        // 100 µs in a release build, 1000 in a debug one.
        ("q4", "--in-flight-auctions", "00 µs epochs"),
    ] {
        let out = megaflux(&[
            "run",
            "--headless",
            "--workload",
            workload,
            size,
            "1000",
            "--rate",
            "1000",
            "--duration",
            "0.5",
        ]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{workload}: {stderr}");
        let first = stderr.lines().next().unwrap_or_default();
        assert!(first.ends_with(epochs), "{workload}: {first}");
        assert_eq!(
            first.contains(", fixed "),
            workload == "q4",
            "{workload}: {first}"
        );
    }
}

/// A cluster with a host that is not loopback needs a secret, named by its flag; a short
/// one, or a token file that cannot be read, is refused before any process connects.
#[test]
fn cluster_tokens_are_checked_before_anything_connects() {
    let dir = tempfile::tempdir().expect("a scratch directory");
    let hosts = dir.path().join("hosts.txt");
    std::fs::write(&hosts, "127.0.0.1:2101\n192.0.2.7:2101\n").expect("a temporary file");
    let hosts = hosts.to_str().expect("a UTF-8 path");
    let cluster = |flags: &[&'static str]| -> Vec<String> {
        let mut args: Vec<String> = ["run", "--headless"].iter().map(ToString::to_string).collect();
        args.extend(flags.iter().map(ToString::to_string));
        args.extend(
            ["--", "-n", "2", "-p", "1", "-h", hosts]
                .iter()
                .map(ToString::to_string),
        );
        args
    };
    let check = |args: Vec<String>, names: &str| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_usage_error(&args, names);
    };
    check(cluster(&[]), "not loopback (192.0.2.7:2101)");
    check(cluster(&[]), "--cluster-token");
    check(cluster(&["--cluster-token", "short"]), "at least 16");
    check(
        cluster(&["--cluster-token-file", "/nonexistent/megaflux-token"]),
        "/nonexistent/megaflux-token",
    );
}
