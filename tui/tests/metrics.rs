//! `--metrics` through the real binaries:
//!
//! - a run's last numbers, scraped once it ended (`--metrics-linger`), agree with its
//!   summary: records in, outputs, migrations, failures and their recoveries;
//! - a real Prometheus (Debian's `prometheus`, installed by `.ci/run`) scrapes a job that
//!   reads a Kafka topic, writes a file, moves bins and loses a worker, and its HTTP API
//!   answers for the job's migrations, failures and imbalance; `promtool check metrics`
//!   accepts a scrape in which every family has values, and `promtool check rules` and
//!   Prometheus itself accept the sample alerting rules under `probe/prometheus/`;
//! - `--metrics` with `--export`, a port in use and a malformed address are refused, named.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use megaflux_testkit::{Kafka, Proc, deadline, run};
use serde_json::Value;

use common::{cluster_ports, example, megaflux, produce, summary};
use megaflux_probe::metrics::FAMILIES;

/// How long a run may take before the test calls it hung.
const RUN_LIMIT: Duration = Duration::from_secs(240);

/// `GET path` from `addr` (HTTP/1.0, one request per connection): the status and the
/// body, or `None` when nothing answers there.
fn get(addr: &str, path: &str, accept: Option<&str>) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(addr).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let accept = accept.map(|a| format!("Accept: {a}\r\n")).unwrap_or_default();
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n{accept}\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, body.to_string()))
}

/// Polls `addr`'s `/metrics` every 100 ms until a scrape satisfies `holds`; that scrape.
/// Fails naming `what` when `limit` passes first.
fn scrape_until(addr: &str, what: &str, limit: Duration, holds: impl Fn(&str) -> bool) -> String {
    let until = Instant::now() + deadline(limit);
    let mut last = None;
    while Instant::now() < until {
        if let Some((200, body)) = get(addr, "/metrics", None) {
            if holds(&body) {
                return body;
            }
            last = Some(body);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("no scrape of {addr} showed {what} within {limit:?}; the last one:\n{last:?}");
}

/// The value of the sample `name` (with its labels, as written) in a scrape.
fn value(scrape: &str, name: &str) -> f64 {
    scrape
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no sample {name} in\n{scrape}"))
}

/// The sum of every sample of the family `name` whose labels hold `label` (`""`: any).
fn sum_of(scrape: &str, name: &str, label: &str) -> f64 {
    scrape
        .lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) && l.contains(label))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

/// Whether a scrape has a line starting with `line`.
fn has(line: &'static str) -> impl Fn(&str) -> bool {
    move |scrape| scrape.lines().any(|l| l.starts_with(line))
}

/// Whether every family of a scrape has values.
fn every_family(scrape: &str) -> bool {
    FAMILIES
        .iter()
        .all(|f| scrape.lines().any(|l| l.starts_with(f) && !l.starts_with('#')))
}

/// The address the run says it serves metrics on.
fn metrics_address(job: &mut Proc) -> String {
    let line = job.wait_for_stderr("the metrics address", Duration::from_secs(60), |l| {
        l.contains("metrics on http://")
    });
    let url = line.split("http://").nth(1).expect("an address after http://");
    url.trim_end_matches("/metrics").to_string()
}

#[test]
fn the_last_numbers_agree_with_the_summary() {
    let mut job = Proc::spawn(
        "run",
        &mut megaflux(&[
            "run",
            "--headless",
            "--duration",
            "6",
            "--workers",
            "3",
            "--replicas",
            "2",
            "--rate",
            "20000",
            "--migrate",
            "fluid@1.5:pack:2",
            "--fail",
            "2@3",
            "--metrics",
            "127.0.0.1:0",
            "--metrics-linger",
            "120",
        ]),
    );
    let addr = metrics_address(&mut job);
    let last = scrape_until(&addr, "the run's end", RUN_LIMIT, has("megaflux_run_finished 1"));
    let out = job.wait(RUN_LIMIT);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let s = summary(&out);
    let n = |v: &Value| v.as_f64().unwrap_or_else(|| panic!("a number: {v}"));
    assert_eq!(value(&last, "megaflux_records_in_total"), n(&s["records_in"]));
    assert_eq!(value(&last, "megaflux_outputs_total"), n(&s["outputs"]));
    let failures = s["failures"].as_array().expect("failures").len() as f64;
    assert_eq!(failures, 1.0, "{s}");
    assert_eq!(value(&last, "megaflux_failures_total"), failures);
    let migrations = s["migrations"].as_array().expect("migrations").len() as f64;
    assert_eq!(migrations, 1.0, "{s}");
    assert_eq!(
        sum_of(&last, "megaflux_migrations_total", r#"by="command""#),
        migrations
    );
    let recoveries = s["failures"]
        .as_array()
        .expect("failures")
        .iter()
        .filter(|f| !f["recovery"].is_null())
        .count() as f64;
    assert_eq!(
        sum_of(&last, "megaflux_migrations_total", r#"by="recovery""#),
        recoveries
    );
    assert_eq!(n(&s["plans_unlisted"]["plans"]), 0.0, "{s}");
    assert_eq!(value(&last, r#"megaflux_workers{state="finished"}"#), 3.0);
    // Every replica that took over a bin of the failed worker was timed.
    assert!(value(&last, "megaflux_takeover_seconds_count") >= 1.0, "{last}");
    // What the latency windows measured is the run's latency: the summary's count of
    // records measured is the histogram's.
    assert!(value(&last, "megaflux_latency_seconds_count") > 0.0, "{last}");
}

/// A Prometheus server scraping `target` every second, with the sample alerting rules.
struct Prometheus {
    proc: Proc,
    addr: String,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    fn start(target: &str) -> Prometheus {
        let dir = tempfile::tempdir().expect("a directory");
        let config = dir.path().join("prometheus.yml");
        let rules = rules_file();
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - {}\nscrape_configs:\n  - job_name: megaflux\n    static_configs:\n      - targets: ['{target}']\n",
                rules.display()
            ),
        )
        .expect("the configuration");
        let port = cluster_ports(1)[0];
        let addr = format!("127.0.0.1:{port}");
        let mut command = Command::new("prometheus");
        command
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if which("prometheus").is_none() {
            panic!("prometheus is not installed: .ci/run installs Debian's (apt-get install prometheus)");
        }
        let mut proc = Proc::spawn("prometheus", &mut command);
        let until = Instant::now() + deadline(Duration::from_secs(60));
        while get(&addr, "/-/ready", None).is_none_or(|(status, _)| status != 200) {
            assert!(proc.running(), "prometheus ended:\n{}", proc.printed_tail());
            assert!(
                Instant::now() < until,
                "prometheus was not ready within 60 s:\n{}",
                proc.printed_tail()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        Prometheus {
            proc,
            addr,
            _dir: dir,
        }
    }

    /// The result of an instant query, once it has one with a value for which `holds` is
    /// true (polled every half second); fails naming `what` after `limit`.
    fn query_until(&mut self, query: &str, what: &str, limit: Duration, holds: impl Fn(f64) -> bool) -> f64 {
        let until = Instant::now() + deadline(limit);
        let path = format!("/api/v1/query?query={}", encode(query));
        let mut last = None;
        while Instant::now() < until {
            assert!(
                self.proc.running(),
                "prometheus ended:\n{}",
                self.proc.printed_tail()
            );
            if let Some((200, body)) = get(&self.addr, &path, None) {
                let answer: Value = serde_json::from_str(&body).expect("the API answers JSON");
                let v = answer["data"]["result"][0]["value"][1]
                    .as_str()
                    .and_then(|v| v.parse::<f64>().ok());
                if let Some(v) = v.filter(|v| holds(*v)) {
                    return v;
                }
                last = Some(body);
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        panic!("prometheus had no {what} ({query}) within {limit:?}; it last said {last:?}");
    }
}

/// `q` for a URL's query string.
fn encode(q: &str) -> String {
    q.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join(program))
        .find(|p| p.is_file())
}

/// The sample alerting rules.
fn rules_file() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../probe/prometheus/alerts.yml")
}

/// `promtool` with `args`, `input` on its stdin; its output, after it succeeded.
fn promtool(args: &[&str], input: &str) -> String {
    let mut command = Command::new("promtool");
    command
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut proc = Proc::spawn("promtool", &mut command);
    if let Some(mut stdin) = proc.stdin() {
        stdin
            .write_all(input.as_bytes())
            .expect("promtool reads the scrape");
    }
    let out = proc.wait(Duration::from_secs(60));
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "promtool {args:?} refused it: {said}\n{input}"
    );
    said
}

#[test]
fn prometheus_scrapes_a_running_job() {
    let said = promtool(&["check", "rules", &rules_file().display().to_string()], "");
    assert!(said.contains("SUCCESS"), "{said}");

    let kafka = Kafka::start();
    let dir = tempfile::tempdir().expect("a directory");
    // 300 s of views at 400 a second: the job is stopped once Prometheus has seen it all.
    let lines: Vec<String> = (0..120_000u64)
        .map(|i| format!("u{},/page/{},{i}", i * 7 % 500, i % 40))
        .collect();
    produce(kafka.address(), "views", 4, &lines);
    let url = format!("kafka://{}/views?end=now", kafka.address());
    let out = dir.path().join("out.jsonl");
    let mut command = Command::new(example("pageviews"));
    command
        .args([
            "run",
            "--headless",
            "--input",
            &url,
            "--rate",
            "400",
            "--workers",
            "3",
        ])
        .args(["--replicas", "2", "--migrate", "fluid@2:pack:2", "--fail", "2@4"])
        .args(["--metrics", "127.0.0.1:0", "--output"])
        .arg(&out)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut job = Proc::spawn("pageviews", &mut command);
    let addr = metrics_address(&mut job);
    let mut prometheus = Prometheus::start(&addr);

    let limit = Duration::from_secs(120);
    let migrations = prometheus.query_until("sum(megaflux_migrations_total)", "migrations", limit, |v| {
        v >= 1.0
    });
    assert!(migrations >= 1.0);
    prometheus.query_until("megaflux_failures_total", "the failure", limit, |v| v == 1.0);
    prometheus.query_until("megaflux_imbalance", "the imbalance", limit, |v| v >= 1.0);
    prometheus.query_until(
        r#"megaflux_migrations_total{by="recovery"}"#,
        "the failure's recovery",
        limit,
        |v| v >= 1.0,
    );
    // The rules are loaded.
    let (_, rules) = get(&prometheus.addr, "/api/v1/rules", None).expect("the rules");
    assert!(rules.contains("MegafluxImbalanced"), "{rules}");

    // A scrape in which every family has values passes promtool's checks, in the text
    // format (what promtool reads); OpenMetrics is served when asked for.
    let scrape = scrape_until(&addr, "values of every family", limit, every_family);
    assert!(
        scrape.contains(r#"megaflux_source_lag_records{partition="3"}"#),
        "{scrape}"
    );
    promtool(&["check", "metrics"], &scrape);
    let (status, open) = get(
        &addr,
        "/metrics",
        Some("application/openmetrics-text; version=1.0.0"),
    )
    .expect("a scrape");
    assert_eq!(status, 200);
    assert!(open.ends_with("# EOF\n"), "{open}");

    job.interrupt();
    let out = job.wait(RUN_LIMIT);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn metrics_in_the_wrong_place_are_refused_named() {
    // A process that sends its events elsewhere serves no metrics of its own.
    let out = run(
        "export",
        &mut megaflux(&[
            "run",
            "--headless",
            "--duration",
            "1",
            "--export",
            "127.0.0.1:9",
            "--metrics",
            "127.0.0.1:0",
        ]),
        RUN_LIMIT,
    );
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--metrics go with that process"), "{err}");

    // A port in use.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let addr = taken.local_addr().expect("its address").to_string();
    let out = run(
        "taken",
        &mut megaflux(&["run", "--headless", "--duration", "1", "--metrics", &addr]),
        RUN_LIMIT,
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("listening on {addr} for metrics")), "{err}");

    for (args, says) in [
        (vec!["run", "--metrics", "nowhere"], "give HOST:PORT"),
        (vec!["run", "--metrics-linger", "5"], "--metrics"),
        (
            vec!["run", "--metrics", "127.0.0.1:0", "--metrics-linger", "9999"],
            "is not a time in seconds",
        ),
        (
            vec!["attach", "127.0.0.1:9", "--metrics", "x:y"],
            "give HOST:PORT",
        ),
    ] {
        let out = run("bad flag", &mut megaflux(&args), RUN_LIMIT);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

/// In a cluster whose other processes `--export` to process 0, process 0's `--metrics`
/// serves the whole cluster's numbers: every worker's, adding up to the cluster's summary.
#[test]
fn process_0_serves_the_clusters_numbers() {
    let cluster = common::Cluster::new("metrics");
    let collector = format!("127.0.0.1:{}", cluster_ports(1)[0]);
    let job = [
        "run",
        "--headless",
        "--duration",
        "4",
        "--rate",
        "20000",
        "--migrate",
        "fluid@1:pack:1",
    ];
    let mut p0 = {
        let mut job = job.to_vec();
        job.extend([
            "--serve",
            &collector,
            "--metrics",
            "127.0.0.1:0",
            "--metrics-linger",
            "120",
        ]);
        cluster.spawn("0", &job, "1")
    };
    let p1 = {
        let mut job = job.to_vec();
        job.extend(["--export", &collector]);
        cluster.spawn("1", &job, "1")
    };
    let addr = metrics_address(&mut p0);
    let last = scrape_until(
        &addr,
        "the cluster run's end",
        common::CLUSTER_LIMIT,
        has("megaflux_run_finished 1"),
    );
    let outs = megaflux_testkit::wait_all(vec![p0, p1], common::CLUSTER_LIMIT);
    for out in &outs {
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let s = summary(&outs[0]);
    assert_eq!(s["processes"], 2);
    assert_eq!(
        value(&last, "megaflux_records_in_total"),
        s["records_in"].as_f64().unwrap()
    );
    assert_eq!(
        value(&last, "megaflux_outputs_total"),
        s["outputs"].as_f64().unwrap()
    );
    assert_eq!(
        value(&last, r#"megaflux_workers{state="finished"}"#),
        2.0,
        "{last}"
    );
    for worker in ["0", "1"] {
        let applied = sum_of(
            &last,
            "megaflux_records_applied_total",
            &format!(r#"worker="{worker}""#),
        );
        assert!(applied > 0.0, "worker {worker} applied nothing in\n{last}");
    }
}
