//! `megaflux bench` runs its matrix, prints a table and writes JSON; bad settings exit 2.

use std::process::Command;

#[test]
fn a_small_matrix_runs_and_writes_json() {
    let out = std::env::temp_dir().join(format!("megaflux-bench-{}.json", std::process::id()));
    let run = Command::new(env!("CARGO_BIN_EXE_megaflux"))
        .args([
            "bench",
            "--workloads",
            "keycount,q4",
            "--variants",
            "native,all-at-once,fluid+replicas,fail:matched",
        ])
        // 16 bins: a fluid plan of a handful of steps finishes before the next one is due
        // even on a loaded machine (with 256, one CI run's first fluid plan outlasted the run).
        .args([
            "--duration",
            "1.5",
            "--keys",
            "2000",
            "--rates",
            "4000",
            "--bins",
            "16",
            "--out",
        ])
        .arg(&out)
        .output()
        .expect("the binary runs");
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
        assert_eq!(
            row["summary"]["migrations"].as_array().unwrap().len(),
            if migrated { 2 } else { 0 },
            "{variant}"
        );
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
    let _ = std::fs::remove_file(&out);
}

#[test]
fn bad_matrix_settings_exit_2() {
    for args in [
        ["--variants", "slow"],
        ["--workloads", "q9"],
        ["--variants", "fail:slowly"],
        ["--epochs", "sometimes"],
    ] {
        let run = Command::new(env!("CARGO_BIN_EXE_megaflux"))
            .arg("bench")
            .args(args)
            .output()
            .unwrap();
        assert_eq!(run.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&run.stderr).contains(args[1]));
    }
}

#[test]
fn adaptive_epochs_for_a_job_that_reads_times_fail_before_the_first_run() {
    let run = Command::new(env!("CARGO_BIN_EXE_megaflux"))
        .args(["bench", "--workloads", "hashcount,q4", "--epochs", "adaptive"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("q4 does not allow adaptive epochs"), "{stderr}");
}
