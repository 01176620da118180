//! A real two-process timely cluster on loopback gives the same output digest as one process.

use std::io::Write;
use std::net::TcpListener;
use std::process::{Command, Stdio};

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

/// Two distinct free ports: both listeners are held until both ports are known.
fn free_ports() -> [u16; 2] {
    let a = TcpListener::bind("127.0.0.1:0").expect("a free port");
    let b = TcpListener::bind("127.0.0.1:0").expect("a free port");
    let port = |l: &TcpListener| l.local_addr().expect("a bound address").port();
    [port(&a), port(&b)]
}

#[test]
fn two_processes_match_one() {
    let dir = std::env::temp_dir().join(format!("megaflux-cluster-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let hostfile = dir.join("hosts.txt");
    let mut f = std::fs::File::create(&hostfile).unwrap();
    for port in free_ports() {
        writeln!(f, "127.0.0.1:{port}").unwrap();
    }
    drop(f);
    let host = hostfile.to_str().unwrap();

    let spawn = |p: &str| {
        let mut args: Vec<&str> = JOB.to_vec();
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
