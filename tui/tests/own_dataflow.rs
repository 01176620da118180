//! The README's "Your own dataflow" program, built as a crate of its own against this
//! workspace and used as a user would: on a file of skewed page views, with a migration, and
//! with two replicas, a failure and a rejoin, every view has exactly one output line and each
//! user's last count is their number of views; its trace re-runs through its own binary to
//! the same digest, and `megaflux report` draws it. The session example keeps its outputs
//! under migration and failover too.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use megaflux_testkit::Proc;

mod common;

use common::example;

/// A bound on one run of a program (a refusal, a run of under a second, a re-run at full
/// speed, a two-process cluster): against a hang, not a judgement of speed.
const RUN: Duration = Duration::from_secs(300);

/// A bound on building the README's program: its own crate on the workspace's built
/// dependencies, after whatever other cargo holds the target directory's lock is done.
const BUILD: Duration = Duration::from_secs(1200);

const VIEWS: usize = 12_000;
const USERS: usize = 300;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace holds tui/")
        .to_path_buf()
}

/// The README section's code blocks of `lang`, in order.
fn blocks(lang: &str) -> Vec<String> {
    let readme = std::fs::read_to_string(workspace().join("README.md")).expect("README.md");
    let section = readme
        .split("\n## Your own dataflow\n")
        .nth(1)
        .expect("a section \"Your own dataflow\"");
    let section = section.split("\n## ").next().unwrap_or(section);
    let fence = format!("```{lang}\n");
    section
        .split(&fence)
        .skip(1)
        .map(|b| b.split("\n```").next().unwrap_or(b).to_string() + "\n")
        .collect()
}

/// The workspace manifest's `[profile.*]` sections: the program is built with the same
/// settings, or cargo would build every dependency again beside the workspace's.
fn workspace_profiles(root: &Path) -> String {
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("Cargo.toml");
    let start = manifest
        .find("\n[profile.")
        .expect("the workspace manifest has [profile.*] sections");
    let profiles = &manifest[start..];
    assert!(
        !profiles.contains("\n[workspace"),
        "the [profile.*] sections end the workspace manifest"
    );
    profiles.to_string() + "\n"
}

/// Builds the README's program as a crate in the workspace's target directory; its binary.
fn build_readme_program() -> PathBuf {
    let toml = blocks("toml");
    let rust = blocks("rust");
    assert_eq!((toml.len(), rust.len()), (1, 1), "one Cargo.toml and one main.rs");
    let example = std::fs::read_to_string(workspace().join("tui/examples/pageviews.rs")).unwrap();
    assert_eq!(
        rust[0], example,
        "the README's program and tui/examples/pageviews.rs differ"
    );
    let root = workspace();
    let target = root.join("target");
    let dir = target.join("readme-program");
    std::fs::create_dir_all(dir.join("src")).unwrap();
    // The paths point at this checkout; the build settings are the workspace's (its crates
    // as workspace members, their dependencies as the workspace's `"*"`), so that what the workspace's tests
    // built is used again, and its lock file pins the same versions.
    let mut manifest = toml[0].replace("../megaflux/", &format!("{}/", root.display()));
    manifest.push_str("\n[workspace]\n\n");
    manifest.push_str(&workspace_profiles(&root));
    for member in ["megaflux", "megaflux-probe", "megaflux-replay", "megaflux-tui"] {
        manifest.push_str(&format!(
            "[profile.dev.package.{member}]\nopt-level = 0\ndebug = \"line-tables-only\"\n"
        ));
    }
    std::fs::write(dir.join("Cargo.toml"), manifest).unwrap();
    std::fs::write(dir.join("src/main.rs"), &rust[0]).unwrap();
    std::fs::copy(root.join("Cargo.lock"), dir.join("Cargo.lock")).unwrap();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    // The workspace's target directory (cargo does not hold it while tests run): the
    // dependencies built for the workspace are built already. Offline: the workspace's
    // build fetched every crate the lock file names, and a build must not wait on the
    // network. Within a deadline: the build waits for any other cargo holding the
    // directory's lock, and is killed with its compilers if it never ends.
    let built = megaflux_testkit::run(
        "cargo build of the README's program",
        Command::new(cargo)
            .args(["build", "--quiet", "--offline", "--manifest-path"])
            .arg(dir.join("Cargo.toml"))
            .arg("--target-dir")
            .arg(&target)
            .stdin(Stdio::null()),
        BUILD,
    );
    assert!(
        built.status.success(),
        "the README's program does not build: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    target.join("debug/pageviews")
}

/// A file of views: users drawn with Zipf-like skew (user `k` about `1/(k+1)` as often).
fn views(path: &Path) -> BTreeMap<String, u64> {
    let weights: Vec<f64> = (0..USERS).map(|k| 1.0 / (k as f64 + 1.0)).collect();
    let total: f64 = weights.iter().sum();
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let mut counts = BTreeMap::new();
    let mut text = String::new();
    for i in 0..VIEWS {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let mut draw = (state % 1_000_000) as f64 / 1e6 * total;
        let user = weights
            .iter()
            .position(|w| {
                draw -= w;
                draw < 0.0
            })
            .unwrap_or(USERS - 1);
        *counts.entry(format!("u{user}")).or_insert(0) += 1;
        text.push_str(&format!("u{user},/page/{},{}\n", state % 40, i / 8));
    }
    std::fs::write(path, text).unwrap();
    counts
}

/// Runs `binary` with `args` in `cwd` to its end, for at most [`RUN`].
fn finished(binary: &Path, args: &[&str], cwd: &Path) -> Output {
    let name = binary.file_name().unwrap_or_default().to_string_lossy();
    megaflux_testkit::run(
        format!("{name} {}", args.join(" ")),
        Command::new(binary)
            .args(args)
            .current_dir(cwd)
            .stdin(Stdio::null()),
        RUN,
    )
}

fn run(binary: &Path, args: &[&str], cwd: &Path) -> Output {
    let out = finished(binary, args, cwd);
    assert!(
        out.status.success(),
        "{} {args:?} failed ({}): {}",
        binary.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `run --headless` of the views at 20,000 a second with `extra` flags, writing `output`.
fn run_views(binary: &Path, cwd: &Path, output: &str, extra: &[&str]) -> Output {
    let mut args = vec![
        "run",
        "--headless",
        "--input",
        "views.csv",
        "--rate",
        "20000",
        "--output",
        output,
    ];
    args.extend_from_slice(extra);
    run(binary, &args, cwd)
}

/// Runs `binary` with `args` in `cwd` expecting it to fail with status 2; what it said.
fn refused(binary: &Path, args: &[&str], cwd: &Path) -> String {
    let out = finished(binary, args, cwd);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The output lines as (user, count), checked to be one per view with each user's counts
/// 1..=views exactly once.
fn check_counts(path: &Path, views: &BTreeMap<String, u64>) -> Vec<(String, u64)> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines: Vec<(String, u64)> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("`{l}` is not [user, count]: {e}")))
        .collect();
    assert_eq!(lines.len(), VIEWS, "one output line per view");
    // The file reads as a log: times are written in order, so each user's counts come in
    // order too, whichever worker emitted them (before and after a move or a takeover).
    let mut in_file: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for (user, count) in &lines {
        in_file.entry(user).or_default().push(*count);
    }
    for (user, counts) in &in_file {
        assert!(
            counts.windows(2).all(|w| w[0] < w[1]),
            "{user}'s counts out of order: {counts:?}"
        );
    }
    lines.sort();
    let mut by_user: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for (user, count) in &lines {
        by_user.entry(user).or_default().push(*count);
    }
    for (user, n) in views {
        let counts = &by_user[user.as_str()];
        assert_eq!(counts, &(1..=*n).collect::<Vec<_>>(), "{user}'s counts");
    }
    lines
}

fn digest(stdout: &[u8]) -> String {
    let text = String::from_utf8_lossy(stdout);
    let summary: serde_json::Value = serde_json::from_str(text.lines().last().expect("a summary")).unwrap();
    summary["output_digest"].as_str().unwrap().to_string()
}

#[test]
fn the_readme_program_counts_every_view_once_under_migration_and_failover() {
    let binary = build_readme_program();
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path();
    let views = views(&cwd.join("views.csv"));
    assert!(views["u0"] > 20 * views["u299"].max(1), "skewed: {views:?}");

    // Its command line is its own: no built-in workload's flags, its job by name.
    let help = run(&binary, &["run", "--help"], cwd);
    let help = String::from_utf8_lossy(&help.stdout);
    for builtin in [
        "--keys",
        "--window-ms",
        "--slide-ms",
        "--in-flight-auctions",
        "--skew",
        "--work <",
    ] {
        assert!(!help.contains(builtin), "{builtin} in {help}");
    }
    assert!(!help.contains("NEXMark") && !help.contains("keycount"), "{help}");
    assert!(help.contains("one of this binary's (pageviews)"), "{help}");

    // A migration, recorded.
    let moved = run_views(
        &binary,
        cwd,
        "moved.jsonl",
        &["--migrate", "fluid@0.2:pack:1", "--record", "trace.jsonl"],
    );
    let moved_lines = check_counts(&cwd.join("moved.jsonl"), &views);
    let summary: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&moved.stdout).lines().last().unwrap()).unwrap();
    assert_eq!(summary["workload"], "pageviews");
    assert_eq!(summary["outputs_written"], VIEWS as u64);
    assert!(
        summary["migrations"][0]["bins_moved"].as_u64().unwrap() > 0,
        "{summary}"
    );

    // Two replicas, worker 1 fails and comes back.
    let failed = run_views(
        &binary,
        cwd,
        "failed.jsonl",
        &["--replicas", "2", "--fail", "1@0.2", "--rejoin", "1@0.4"],
    );
    assert_eq!(check_counts(&cwd.join("failed.jsonl"), &views), moved_lines);
    assert_eq!(digest(&failed.stdout), digest(&moved.stdout));
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert!(stderr.contains("worker 1 failed"), "{stderr}");

    // The trace re-runs through the program's own binary to the same digest...
    let rerun = run(
        &binary,
        &["replay", "trace.jsonl", "--rerun", "--speed", "max"],
        cwd,
    );
    assert_eq!(digest(&rerun.stdout), digest(&moved.stdout));
    // ...not through one without the job, which says whose it is.
    let megaflux = env!("CARGO_BIN_EXE_megaflux");
    let said = refused(Path::new(megaflux), &["replay", "trace.jsonl", "--rerun"], cwd);
    assert!(
        said.contains("the job `pageviews`, which this binary does not have")
            && said.contains("its own `replay --rerun`"),
        "{said}"
    );
    // A changed file is not re-run.
    std::fs::write(cwd.join("views.csv"), "u1,/,0\n").unwrap();
    let said = refused(&binary, &["replay", "trace.jsonl", "--rerun"], cwd);
    assert!(said.contains("is not the file the trace read"), "{said}");

    // megaflux draws the user's trace.
    run(
        Path::new(megaflux),
        &[
            "report",
            "trace.jsonl",
            "--svg",
            "trace.svg",
            "--perfetto",
            "trace.json",
        ],
        cwd,
    );
    let svg = std::fs::read_to_string(cwd.join("trace.svg")).unwrap();
    assert!(svg.contains("pageviews"), "the drawing names the job");
    assert!(std::fs::metadata(cwd.join("trace.json")).unwrap().len() > 1000);
}

#[test]
fn sessions_close_the_same_under_migration_and_failover() {
    let binary = example("sessions");
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path();
    // 40 users click in bursts: a burst every 300 ms, gaps within bursts under 200 ms.
    let mut text = String::new();
    let mut clicks = 0;
    for t in 0..3_000u64 {
        for u in 0..40u64 {
            if (t + u * 37) % 300 < 60 && (t * 7 + u) % 13 == 0 {
                text.push_str(&format!("user{u},{t}\n"));
                clicks += 1;
            }
        }
    }
    std::fs::write(cwd.join("clicks.csv"), text).unwrap();
    let sessions = |name: &str, extra: &[&str]| -> Vec<(String, u64, u64, u64)> {
        let out = format!("{name}.jsonl");
        let mut args = vec![
            "run",
            "--headless",
            "--input",
            "clicks.csv",
            "--pace",
            "event-time",
            "--output",
            &out,
        ];
        args.extend_from_slice(extra);
        run(&binary, &args, cwd);
        let mut got: Vec<(String, u64, u64, u64)> = std::fs::read_to_string(cwd.join(&out))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        got.sort();
        got
    };
    let plain = sessions("plain", &[]);
    assert_eq!(
        plain.iter().map(|s| s.3).sum::<u64>(),
        clicks,
        "every click in one session"
    );
    assert!(plain.len() > 200, "{} sessions", plain.len());
    for w in plain.windows(2) {
        if w[0].0 == w[1].0 {
            assert!(w[0].2 < w[1].1, "{w:?}: a user's sessions do not overlap");
        }
    }
    let moved = sessions(
        "moved",
        &[
            "--migrate",
            "all-at-once@0.2:pack:1",
            "--migrate",
            "fluid@0.4:uniform",
        ],
    );
    assert_eq!(moved, plain);
    let failed = sessions(
        "failed",
        &["--replicas", "2", "--workers", "3", "--fail", "2@0.3"],
    );
    assert_eq!(failed, plain);
}

#[test]
fn a_two_process_cluster_reads_on_process_0_and_writes_every_output_there_once() {
    let binary = example("pageviews");
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path();
    let views = views(&cwd.join("views.csv"));
    let (out0, out1) = cluster_run(&binary, cwd);
    assert!(out0.status.success(), "{}", String::from_utf8_lossy(&out0.stderr));
    assert!(out1.status.success(), "{}", String::from_utf8_lossy(&out1.stderr));
    assert!(!cwd.join("elsewhere.jsonl").exists(), "only process 0 writes");
    let clustered = check_counts(&cwd.join("cluster.jsonl"), &views);
    let single = run_views(
        &binary,
        cwd,
        "single.jsonl",
        &["--epoch-us", common::CLUSTER_EPOCH_US],
    );
    assert_eq!(check_counts(&cwd.join("single.jsonl"), &views), clustered);
    assert_eq!(digest(&out0.stdout), digest(&single.stdout));
}

/// What a process says when a port it binds is taken.
const PORT_TAKEN: &str = "Address already in use";

/// Runs the views on a two-process loopback cluster of `binary` in `cwd`, process 0 writing
/// `cluster.jsonl` and process 1 (which must not write) `elsewhere.jsonl`, and waits for
/// both, within [`RUN`]. The ports were free when drawn but not held (the processes bind
/// them): a run where another test's process took one first is started again on others, a
/// few times.
fn cluster_run(binary: &Path, cwd: &Path) -> (Output, Output) {
    for _ in 0..3 {
        // What a run that found a port taken may have left.
        for file in ["cluster.jsonl", "elsewhere.jsonl"] {
            let _ = std::fs::remove_file(cwd.join(file));
        }
        let hosts = cwd.join("hosts.txt");
        let ports = common::cluster_ports(3);
        let (a, b, coordinator) = (ports[0], ports[1], ports[2]);
        std::fs::write(&hosts, format!("127.0.0.1:{a}\n127.0.0.1:{b}\n")).unwrap();
        // Every process gets the same flags; process 0 reads the input and writes the
        // output.
        let spawn = |process: &str, output: &str| {
            let mut command = Command::new(binary);
            command
                .args([
                    "run",
                    "--headless",
                    "--workers",
                    "1",
                    "--input",
                    "views.csv",
                    "--rate",
                    "20000",
                ])
                .args(["--output", output, "--migrate", "fluid@0.2:pack:1"])
                .args(["--coordinator-port", &coordinator.to_string()])
                .args(["--epoch-us", common::CLUSTER_EPOCH_US, "--"])
                .args(["-n", "2", "-p", process, "-h"])
                .arg(&hosts)
                .current_dir(cwd)
                .stdin(Stdio::null());
            Proc::spawn(format!("process {process}"), &mut command)
        };
        let procs = vec![spawn("0", "cluster.jsonl"), spawn("1", "elsewhere.jsonl")];
        // A process whose port was taken ends at once; its peer gives up waiting for it
        // after the cluster's wait (a minute).
        let outs = megaflux_testkit::wait_all(procs, RUN);
        if outs
            .iter()
            .any(|o| String::from_utf8_lossy(&o.stderr).contains(PORT_TAKEN))
        {
            continue;
        }
        let mut outs = outs.into_iter();
        let (Some(out0), Some(out1)) = (outs.next(), outs.next()) else {
            unreachable!("two processes, two outputs")
        };
        return (out0, out1);
    }
    panic!("three clusters in a row found a port taken");
}
