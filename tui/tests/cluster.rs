//! A real two-process timely cluster on loopback gives the same output digest as one process,
//! and process 0's collector records the events of both.

use std::io::Write;
use std::net::TcpListener;
use std::process::{Command, Stdio};

use megaflux_probe::event::{Event, Phase};
use megaflux_probe::model::JobModel;
use serde_json::Value;

const JOB: &[&str] = &[
    "run",
    "--headless",
    "--keys",
    "20000",
    "--rate",
    "20000",
    "--duration",
    "2",
    "--migrate",
    "all-at-once@0.5:pack:1",
    "--migrate",
    "matched+pipelined@1.2:uniform",
];

fn summary(stdout: &[u8]) -> Value {
    let text = String::from_utf8_lossy(stdout);
    let last = text.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|e| panic!("no JSON summary ({e}) in: {text}"))
}

/// Distinct free ports: every listener is held until all ports are known.
fn free_ports() -> [u16; 3] {
    let ls: Vec<TcpListener> = (0..3)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("a free port"))
        .collect();
    let port = |l: &TcpListener| l.local_addr().expect("a bound address").port();
    [port(&ls[0]), port(&ls[1]), port(&ls[2])]
}

#[test]
fn two_processes_match_one() {
    let dir = std::env::temp_dir().join(format!("megaflux-cluster-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let hostfile = dir.join("hosts.txt");
    let mut f = std::fs::File::create(&hostfile).unwrap();
    let [a, b, collector] = free_ports();
    for port in [a, b] {
        writeln!(f, "127.0.0.1:{port}").unwrap();
    }
    drop(f);
    let host = hostfile.to_str().unwrap();
    let trace = dir.join("trace.jsonl");
    let collector = format!("127.0.0.1:{collector}");

    let spawn = |p: &str| {
        let mut args: Vec<&str> = JOB.to_vec();
        match p {
            "0" => args.extend(["--serve", &collector, "--record", trace.to_str().unwrap()]),
            _ => args.extend(["--export", &collector]),
        }
        args.extend(["--workers", "1", "--", "-n", "2", "-p", p, "-h", host]);
        Command::new(env!("CARGO_BIN_EXE_megaflux"))
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("a cluster process starts")
    };
    let p0 = spawn("0");
    let p1 = spawn("1");
    let out0 = p0.wait_with_output().unwrap();
    let out1 = p1.wait_with_output().unwrap();
    assert!(out0.status.success(), "{}", String::from_utf8_lossy(&out0.stderr));
    assert!(out1.status.success(), "{}", String::from_utf8_lossy(&out1.stderr));
    // Timely itself may print connection retries; the summary comes from process 0 only.
    let other = String::from_utf8_lossy(&out1.stdout);
    assert!(
        !other.lines().any(|l| l.starts_with('{')),
        "only process 0 reports, but process 1 printed: {other}"
    );
    let cluster = summary(&out0.stdout);
    assert_eq!(cluster["workers"], 2);
    assert_eq!(cluster["processes"], 2);
    let migrations = cluster["migrations"].as_array().unwrap();
    assert_eq!(migrations.len(), 2);
    for m in migrations {
        assert_eq!(m["bins_moved"], 128);
        assert!(m["completed_s"].is_number(), "{m}");
        assert!(m["bytes_moved"].as_u64().unwrap() > 0);
    }

    check_trace(&trace);

    let mut single: Vec<&str> = JOB.to_vec();
    single.extend(["--workers", "2"]);
    let local = Command::new(env!("CARGO_BIN_EXE_megaflux"))
        .args(&single)
        .output()
        .unwrap();
    assert!(local.status.success());
    let local = summary(&local.stdout);
    assert_eq!(cluster["output_digest"], local["output_digest"]);
    assert_eq!(cluster["outputs"], local["outputs"]);
    assert_eq!(cluster["records_in"], local["records_in"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The trace holds both processes' state sizes and frontiers, every phase of every moved bin,
/// and bin sizes that add up to the job's state (keycount preloads each of its keys once).
fn check_trace(path: &std::path::Path) {
    let trace = megaflux_probe::record::read(path).unwrap();
    assert_eq!(trace.header.processes, 2);
    assert_eq!(trace.header.peers, 2);
    assert_eq!(trace.header.config["keys"], 20000);
    assert!(!trace.truncated);
    for process in [0, 1] {
        let of = |pred: fn(&Event) -> bool| {
            trace
                .events
                .iter()
                .any(|e| e.process == process && pred(&e.event))
        };
        assert!(
            of(|e| matches!(e, Event::Hello { .. })),
            "hello of process {process}"
        );
        assert!(
            of(|e| matches!(e, Event::BinSize { .. })),
            "bin sizes of process {process}"
        );
        assert!(
            of(|e| matches!(e, Event::Frontier { .. })),
            "frontiers of process {process}"
        );
    }
    // Every issued move went through every phase, at its time.
    let mut phases: std::collections::BTreeMap<(u32, u64), Vec<Phase>> = Default::default();
    for e in &trace.events {
        if let Event::Migration { phase, bin, time, .. } = &e.event {
            phases.entry((*bin, *time)).or_default().push(*phase);
        }
    }
    assert_eq!(phases.len(), 256, "two migrations of 128 bins");
    for (mv, seen) in &phases {
        let mut sorted = seen.clone();
        sorted.sort();
        assert_eq!(
            sorted,
            vec![
                Phase::Issued,
                Phase::Extracted,
                Phase::Received,
                Phase::Installed,
                Phase::Completed
            ],
            "bin {} at time {}",
            mv.0,
            mv.1
        );
    }
    let mut model = JobModel::new();
    trace.events.iter().for_each(|e| model.apply(e));
    assert_eq!(model.operators.len(), 1);
    let bins = model.operators.values().next().unwrap();
    assert_eq!(bins.len(), 256);
    assert!(bins.iter().all(|b| b.owner.is_some()));
    assert_eq!(bins.iter().map(|b| b.keys).sum::<u64>(), 20000);
    assert_eq!(model.dropped_total(), 0);
}
