//! `megaflux bench` runs its matrix, prints a table and writes JSON; bad settings exit 2.

use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// A bound on `megaflux bench`: against a hang, not a judgement of speed (the small matrix
/// is eight runs of 1.5 s, each a fresh process).
const LIMIT: Duration = Duration::from_secs(600);

/// `megaflux bench` with `args`, run to its end (its runs with it) for at most [`LIMIT`].
fn bench(args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_megaflux"));
    command.arg("bench").args(args).stdin(Stdio::null());
    megaflux_testkit::run(format!("megaflux bench {}", args.join(" ")), &mut command, LIMIT)
}

#[test]
fn a_small_matrix_runs_and_writes_json() {
    let dir = tempfile::tempdir().expect("a scratch directory");
    let out = dir.path().join("bench.json");
    let run = bench(&[
        "--workloads",
        "keycount,q4",
        "--variants",
        "native,all-at-once,fluid+replicas,fail:matched",
        // 16 bins: a fluid plan of a handful of steps, usually over before the next is due.
        "--duration",
        "1.5",
        "--keys",
        "2000",
        "--rates",
        "4000",
        "--bins",
        "16",
        "--out",
        out.to_str().expect("a UTF-8 path"),
    ]);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    let table = String::from_utf8_lossy(&run.stdout);
    assert_eq!(table.lines().count(), 9, "a header and eight rows:\n{table}");
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let rows = json["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 8);
    for row in rows {
        let variant = row["variant"].as_str().unwrap();
        let migrated = variant == "all-at-once" || variant == "fluid+replicas";
        let migrations = row["summary"]["migrations"].as_array().unwrap();
        if migrated {
            // Away at 1/3 of the run (0.5 s), back to uniform at 2/3 (1.0 s). A plan that
            // comes due while another runs waits for it, and is not issued if the run ends
            // first: so the first is always there, and the second unless the first still
            // ran when the second came due (how long a plan takes is the machine's).
            assert!(matches!(migrations.len(), 1 | 2), "{variant}: {migrations:?}");
            if migrations.len() == 1 {
                let completed = migrations[0]["completed_s"].as_f64();
                assert!(
                    completed.is_none_or(|s| s > 1.0),
                    "{variant}: the plan away ended at {completed:?} s, and none went back to uniform at 1.0 s: {migrations:?}"
                );
            }
        } else {
            assert!(migrations.is_empty(), "{variant}: {migrations:?}");
        }
        let failed = variant == "fail:matched";
        assert_eq!(
            row["summary"]["failures"].as_array().unwrap().len(),
            usize::from(failed)
        );
        assert_eq!(
            row["summary"]["replicas"],
            if variant == "native" || variant == "all-at-once" {
                1
            } else {
                2
            }
        );
        assert!(row["achieved_rate"].as_f64().unwrap() > 0.0);
    }
    // The same workload gives the same output whatever the variant.
    for w in ["keycount", "q4"] {
        let digests: Vec<&serde_json::Value> = rows
            .iter()
            .filter(|r| r["workload"] == w)
            .map(|r| &r["summary"]["output_digest"])
            .collect();
        assert!(digests.windows(2).all(|d| d[0] == d[1]), "{w}: {digests:?}");
    }
}

#[test]
fn bad_matrix_settings_exit_2() {
    for args in [
        ["--variants", "slow"],
        ["--workloads", "q9"],
        ["--variants", "fail:slowly"],
        ["--epochs", "sometimes"],
    ] {
        let run = bench(&args);
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert_eq!(run.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(args[1]), "{args:?}: {stderr}");
    }
}

#[test]
fn adaptive_epochs_for_a_job_that_reads_times_fail_before_the_first_run() {
    let run = bench(&["--workloads", "hashcount,q4", "--epochs", "adaptive"]);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("q4 does not allow adaptive epochs"), "{stderr}");
}
