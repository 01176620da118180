//! What several of the binary's tests share: running it, reading its summary and its
//! trace, and a loopback cluster whose processes are [`Proc`]s: each in a process group of
//! its own, read as it runs, killed with its group when dropped, and waited for only with a
//! deadline.

#![allow(dead_code)] // Each test crate uses some of it.

use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::Duration;

use megaflux_testkit::{Proc, wait_all, wait_until_every};
use serde_json::Value;

/// hashcount with steep skew and the balancer on `auto`, judging every second, 4 s: the job
/// whose balancer moves bins (its last six flags are the balancer's).
pub const SKEWED_BALANCED: &[&str] = &[
    "run",
    "--headless",
    "--workload",
    "hashcount",
    "--keys",
    "20000",
    "--skew",
    "zipf:1.5",
    "--rate",
    "20000",
    // The balancer weighs busy time: the skew must cost CPU, not only records (without
    // work per record, a record's cost is mostly the activation's fixed part).
    "--work",
    "2000",
    "--duration",
    "4",
    "--balance",
    "auto",
    "--balance-every",
    "1",
    "--balance-threshold",
    "1.1",
];

/// keycount with a standby per bin, 3 s: the cluster tests' job that survives a lost process.
pub const REPLICATED_KEYCOUNT: &[&str] = &[
    "run",
    "--headless",
    "--keys",
    "20000",
    "--rate",
    "20000",
    "--duration",
    "3",
    "--replicas",
    "2",
];

/// How long a cluster run of a debug build may take on a loaded machine before the test
/// calls it hung: a bound against hangs, not a judgement of speed.
pub const CLUSTER_LIMIT: Duration = Duration::from_secs(300);

/// The line a cluster process says on stderr once its computation formed.
pub const FORMED: &str = "megaflux: cluster formed";

/// The line a surviving cluster process says on stderr once it restarted.
pub const RESTARTED: &str = "megaflux: cluster restarted";

/// The binary with `args`, its output captured.
pub fn megaflux(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_megaflux"));
    c.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
    c
}

/// The JSON summary on the last line of a run's stdout.
pub fn summary(out: &Output) -> Value {
    let text = String::from_utf8_lossy(&out.stdout);
    let last = text.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|e| {
        panic!(
            "no JSON summary ({e}): {text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// `N` distinct free loopback ports: every listener is held until all ports are known.
pub fn free_ports<const N: usize>() -> [u16; N] {
    let listeners: Vec<TcpListener> = (0..N)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("a free port"))
        .collect();
    std::array::from_fn(|i| listeners[i].local_addr().expect("a bound address").port())
}

/// The lowest port the kernel hands out by itself (to `bind` on port 0 and to every
/// outgoing connection), if it says.
fn ephemeral_low() -> Option<u16> {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    range.split_whitespace().next()?.parse().ok()
}

/// `n` distinct loopback ports free now, for a cluster's processes (or a collector) to
/// listen on. A port of [`free_ports`] is released before the process that is to listen on
/// it starts, and meanwhile any outgoing connection on the machine (the cluster's own among
/// them) may be given it: these are taken below the kernel's own range where it has one, so
/// that only a listener can hold them, and each is checked by listening on it while the
/// others are held. Tests of one binary start from different places.
pub fn cluster_ports(n: usize) -> Vec<u16> {
    const FIRST: u16 = 10_000;
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let Some(low) = ephemeral_low().filter(|low| *low >= FIRST + 2_000) else {
        let listeners: Vec<TcpListener> = (0..n)
            .map(|_| TcpListener::bind("127.0.0.1:0").expect("a free port"))
            .collect();
        return listeners
            .iter()
            .map(|l| l.local_addr().expect("a bound address").port())
            .collect();
    };
    let span = low - FIRST;
    // Other test binaries (and other checkouts' tests) start elsewhere.
    let base = (std::process::id() % u32::from(span)) as u16;
    let mut held = Vec::new();
    for _ in 0..span {
        let offset = NEXT.fetch_add(1, Ordering::Relaxed) % span;
        let port = FIRST + (base + offset) % span;
        if let Ok(listener) = TcpListener::bind(("127.0.0.1", port)) {
            held.push(listener);
            if held.len() == n {
                return held
                    .iter()
                    .map(|l| l.local_addr().expect("a bound address").port())
                    .collect();
            }
        }
    }
    panic!("no {n} free ports between {FIRST} and {low}");
}

/// A seeded generator (xorshift) of kill moments, victims and a stranger's bytes: the same
/// sequence every run, printed with each failure.
pub struct Draws(pub u64);

impl Draws {
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// `N` bytes drawn.
    pub fn bytes<const N: usize>(&mut self) -> [u8; N] {
        let mut b = [0u8; N];
        for x in &mut b {
            *x = self.next() as u8;
        }
        b
    }
}

/// The epoch of the tests' clusters, in microseconds, unless a job names its own.
pub const CLUSTER_EPOCH_US: &str = "1000";

/// The secret the test clusters prove (see `megaflux run --cluster-token`).
pub const CLUSTER_TOKEN: &str = "megaflux test clusters' secret";

/// A loopback cluster (two processes unless told): a scratch directory, and the host file
/// timely reads.
pub struct Cluster {
    /// The cluster's name in its directory and in its processes' names.
    pub name: String,
    pub dir: PathBuf,
    pub hostfile: PathBuf,
    pub addresses: Vec<String>,
    /// Process 0's membership port: a free one, rather than its timely port + 1000, which
    /// another test's cluster might hold.
    pub coordinator: String,
}

impl Cluster {
    pub fn new(name: &str) -> Self {
        Cluster::of(name, 2)
    }

    /// A cluster of `processes` processes.
    pub fn of(name: &str, processes: usize) -> Self {
        let dir = std::env::temp_dir().join(format!("megaflux-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a scratch directory");
        let ports = cluster_ports(processes + 1);
        let coordinator = ports[processes];
        let addresses: Vec<String> = ports[..processes]
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        let hostfile = dir.join("hosts.txt");
        let mut f = std::fs::File::create(&hostfile).expect("a host file");
        for a in &addresses {
            writeln!(f, "{a}").expect("the host file is written");
        }
        Cluster {
            name: name.to_string(),
            dir,
            hostfile,
            addresses,
            coordinator: coordinator.to_string(),
        }
    }

    /// The name of process `process` in failures: `process 1 of crash-keycount`.
    pub fn process_name(&self, process: &str) -> String {
        format!("process {process} of {}", self.name)
    }

    /// Starts process `process` of `job`, with `workers` workers.
    pub fn spawn(&self, process: &str, job: &[&str], workers: &str) -> Proc {
        self.spawn_binary(env!("CARGO_BIN_EXE_megaflux").as_ref(), process, job, workers)
    }

    /// As [`Cluster::spawn`], with another binary that has megaflux's command line (an
    /// example of one's own dataflow, see [`example`]).
    pub fn spawn_binary(&self, binary: &Path, process: &str, job: &[&str], workers: &str) -> Proc {
        Proc::spawn(
            self.process_name(process),
            &mut self.command(binary, process, job, workers),
        )
    }

    /// The command [`Cluster::spawn_binary`] starts, to start it with more settings.
    pub fn command(&self, binary: &Path, process: &str, job: &[&str], workers: &str) -> Command {
        let mut args = job.to_vec();
        let host = self.hostfile.to_str().expect("a UTF-8 path");
        args.extend(["--workers", workers, "--coordinator-port", &self.coordinator]);
        if !job.contains(&"--epoch-us") {
            // Epochs of 1 ms: several clusters of a debug build share CI's two cores, and
            // what these tests check does not depend on the epoch.
            args.extend(["--epoch-us", CLUSTER_EPOCH_US]);
        }
        let n = self.addresses.len().to_string();
        args.extend(["--", "-n", &n, "-p", process, "-h", host]);
        let mut command = Command::new(binary);
        command.args(&args).stdout(Stdio::piped()).stderr(Stdio::piped());
        // Every connection between the processes proves this secret, as on real hosts.
        command.env("MEGAFLUX_CLUSTER_TOKEN", CLUSTER_TOKEN);
        command
    }

    /// Starts every process of `job` with `binary`, one worker each, writing `--output` to
    /// `out`; with `failing`, that process is made to exit at that `MEGAFLUX_FAILPOINT`.
    pub fn spawn_all(
        &self,
        binary: &Path,
        job: &[&str],
        out: &Path,
        failing: Option<(usize, &str)>,
    ) -> Vec<Proc> {
        let mut job = job.to_vec();
        job.extend(["--output", out.to_str().expect("a UTF-8 path"), "--force"]);
        (0..self.addresses.len())
            .map(|p| {
                let mut command = self.command(binary, &p.to_string(), &job, "1");
                if let Some((_, point)) = failing.filter(|(f, _)| *f == p) {
                    command.env("MEGAFLUX_FAILPOINT", point);
                }
                Proc::spawn(self.process_name(&p.to_string()), &mut command)
            })
            .collect()
    }

    /// Runs `job` on both processes of a two-process cluster and waits for both, for at
    /// most [`CLUSTER_LIMIT`].
    pub fn run(&self, job: &[&str], workers: &str) -> [Output; 2] {
        let procs = vec![self.spawn("0", job, workers), self.spawn("1", job, workers)];
        let [p0, p1]: [Output; 2] = wait_all(procs, CLUSTER_LIMIT).try_into().expect("two outputs");
        [p0, p1]
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Waits until every one of `procs` said its cluster formed ([`FORMED`]): a process killed
/// after this is lost by a running job, not by one still forming. Fails naming the process
/// if one ends first or stays silent for [`CLUSTER_LIMIT`].
pub fn formed(procs: &mut [Proc]) {
    for p in procs {
        p.wait_for_stderr("the cluster formed", CLUSTER_LIMIT, |l| l.starts_with(FORMED));
    }
}

/// Waits until `survivor` said its cluster restarted ([`RESTARTED`]).
pub fn restarted(survivor: &mut Proc) {
    survivor.wait_for_stderr("the cluster restarted", CLUSTER_LIMIT, |l| {
        l.starts_with(RESTARTED)
    });
}

/// The events of the trace at `path` recorded so far (every whole line after the header;
/// none if there is no file yet).
pub fn trace_events(path: &Path) -> Vec<Value> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    // A last line without its newline is still being written.
    let whole = text.rfind('\n').map_or("", |i| &text[..i]);
    whole
        .lines()
        .skip(1)
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .collect()
}

/// Waits until the events `recorder` (a process started with `--record trace`) wrote to
/// `trace` satisfy `done`, for at most [`CLUSTER_LIMIT`]. Fails naming `what`, with what
/// the recorder printed and the trace's plans and restarts so far, if the recorder ends
/// first or the deadline passes.
pub fn wait_for_trace(recorder: &mut Proc, trace: &Path, what: &str, done: impl Fn(&[Value]) -> bool) {
    let mut seen = false;
    let waited = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // Each look reads the whole trace: a few a second leave the cores to the cluster.
        wait_until_every(what, CLUSTER_LIMIT, Duration::from_millis(200), || {
            seen = done(&trace_events(trace));
            seen || !recorder.running()
        })
    }));
    if seen {
        return;
    }
    let failure = match waited {
        Err(e) => e
            .downcast_ref::<String>()
            .cloned()
            .unwrap_or_else(|| format!("waited for {what}")),
        Ok(()) => format!("{} ended before {what}", recorder.name()),
    };
    let events = trace_events(trace);
    let told: Vec<String> = events
        .iter()
        .filter(|e| {
            let kind = e["kind"].as_str().unwrap_or_default();
            kind.starts_with("plan_") || ["restart", "join", "lost", "balance"].contains(&kind)
        })
        .map(Value::to_string)
        .collect();
    panic!(
        "{failure}\n--- {} events in {}; its plans and restarts ---\n{}\n{}",
        events.len(),
        trace.display(),
        told.join("\n"),
        recorder.printed_tail()
    );
}

/// The `plan_started` events, among `events`, of the plans that then completed
/// uncancelled. Their `purpose` is `migration` for a `--migrate`, a balancer's plan (its
/// `target` starts `balance`) and the plans after a restart (`standbys lost in a crash
/// (restart 1)`, `balanced onto process 2 that joined (restart 1)`); `recovery` and
/// `rebalance` are a failed worker's.
pub fn completed_plans(events: &[Value]) -> Vec<&Value> {
    let mut running: std::collections::HashMap<u64, &Value> = Default::default();
    let mut completed = Vec::new();
    for e in events {
        let id = e["id"].as_u64();
        match (e["kind"].as_str(), id) {
            (Some("plan_started"), Some(id)) => {
                running.insert(id, e);
            }
            (Some("plan_completed"), Some(id)) => {
                if let Some(started) = running.remove(&id)
                    && e["cancelled"] != true
                {
                    completed.push(started);
                }
            }
            _ => {}
        }
    }
    completed
}

/// Whether `plan` (a `plan_started` event) was made for `purpose`.
pub fn made_for(plan: &Value, purpose: &str) -> bool {
    plan["purpose"].as_str().unwrap_or("migration") == purpose
}

/// Stops a cluster run as `q` does: SIGINT to process 0, which ends the job on every
/// process at the same epoch, each with every output of the times before it.
pub fn stop(process_0: &mut Proc) {
    process_0.interrupt();
}

/// The `--duration` of a run of exactly the epochs of the run `summary` sums up (one
/// stopped by [`stop`] covers fewer than its `--duration`), with epochs of `epoch_us`.
pub fn same_epochs(summary: &Value, epoch_us: u64) -> String {
    let ran_s = summary["duration_s"].as_f64().expect("the run's duration");
    let epochs = (ran_s * 1e6 / epoch_us as f64).round();
    // Half an epoch more: the seconds' decimal is never a hair short of the last epoch.
    format!("{}", (epochs + 0.5) * epoch_us as f64 / 1e6)
}

/// `job` with its `--duration` set to `secs` (added if it has none).
pub fn with_duration<'a>(job: &[&'a str], secs: &'a str) -> Vec<&'a str> {
    let mut job = job.to_vec();
    match job.iter().position(|a| *a == "--duration") {
        Some(i) => job[i + 1] = secs,
        None => job.extend(["--duration", secs]),
    }
    job
}

/// The example `name` (`tui/examples/`), which cargo builds next to the tests' binaries.
pub fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test's path");
    let dir = exe.parent().and_then(Path::parent).expect("target/debug");
    dir.join("examples").join(name)
}

/// The lines of the file at `path`, sorted.
pub fn sorted_lines(path: &std::path::Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).expect("the output file");
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    lines.sort_unstable();
    lines
}

/// Checks a run that lost processes against `base`, the summary of the same run without
/// the loss: every process of `outputs` exited 0, and process 0's summary has the same
/// digest, outputs and records in, and its `--output` file at `out` the lines `base_lines`
/// (sorted). `what` names the run in failures. Returns process 0's summary.
pub fn assert_same_outputs(
    outputs: &[Output],
    base: &Value,
    (out, base_lines): (&Path, &[String]),
    what: &str,
) -> Value {
    for o in outputs {
        assert!(
            o.status.success(),
            "{what}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let s = summary(&outputs[0]);
    assert_eq!(s["output_digest"], base["output_digest"], "{what}");
    assert_eq!(s["outputs"], base["outputs"], "{what}");
    assert_eq!(
        s["records_in"], base["records_in"],
        "{what}: every record counted once"
    );
    assert_eq!(sorted_lines(out), base_lines, "{what}: the output file");
    s
}

/// Runs `job` on every process of `cluster` with `binary`, once as it is and once for each
/// of `points` with process `victim` made to exit there (`MEGAFLUX_FAILPOINT`), each run
/// within `limit`. Checks that the victim exited at the point, that no survivor panicked,
/// and that the survivors' outputs are the run's without the loss. Returns process 0's
/// summary of each lossy run.
pub fn survives_failpoints(
    binary: &Path,
    cluster: &Cluster,
    job: &[&str],
    victim: usize,
    points: &[&str],
    limit: Duration,
) -> Vec<Value> {
    let base_out = cluster.dir.join("base.jsonl");
    let outputs = wait_all(cluster.spawn_all(binary, job, &base_out, None), limit);
    for o in &outputs {
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let base = summary(&outputs[0]);
    let base_lines = sorted_lines(&base_out);
    assert!(!base_lines.is_empty(), "the job wrote outputs");
    points
        .iter()
        .map(|point| {
            let out = cluster.dir.join(format!("{point}.jsonl"));
            let failing = Some((victim, *point));
            let mut outputs = wait_all(cluster.spawn_all(binary, job, &out, failing), limit);
            let lost = outputs.remove(victim);
            let said = String::from_utf8_lossy(&lost.stderr);
            assert!(
                said.contains(point),
                "{point}: process {victim} exited elsewhere: {said}"
            );
            for o in &outputs {
                let stderr = String::from_utf8_lossy(&o.stderr);
                assert!(!stderr.contains("panicked"), "{point}: {stderr}");
            }
            assert_same_outputs(&outputs, &base, (&out, &base_lines), point)
        })
        .collect()
}

/// Runs `job` with `binary` on every process of `cluster` (one worker each; process 0 with
/// `first` too), kills process `victim` with kill -9 `after` every process said the cluster
/// formed, and waits for the others: each exits 0 and process 0's summary has that one
/// crash. Returns process 0's summary.
pub fn survives_one_kill(
    cluster: &Cluster,
    (binary, job, first): (&Path, &[&str], &[&str]),
    victim: usize,
    after: Duration,
) -> Value {
    let mut procs: Vec<Proc> = (0..cluster.addresses.len())
        .map(|p| {
            let job = if p == 0 {
                [job, first].concat()
            } else {
                job.to_vec()
            };
            let p = p.to_string();
            Proc::spawn(
                cluster.process_name(&p),
                &mut cluster.command(binary, &p, &job, "1"),
            )
        })
        .collect();
    formed(&mut procs);
    std::thread::sleep(after);
    let mut killed = procs.remove(victim);
    assert!(
        killed.running(),
        "it ended before the kill\n{}",
        killed.printed_tail()
    );
    killed.kill();
    drop(killed);
    let outputs = wait_all(procs, CLUSTER_LIMIT);
    for o in &outputs {
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let s = summary(&outputs[0]);
    assert_eq!(s["crashes"].as_array().map(Vec::len), Some(1), "{s}");
    s
}

/// The outputs in the PostgreSQL table `table` at `url`, as JSON text, sorted.
pub fn table_values(url: &str, table: &str) -> Vec<String> {
    let mut client = postgres::Client::connect(url, postgres::NoTls).expect("the test connects");
    let mut values: Vec<String> = client
        .query(&format!("SELECT output FROM {table}"), &[])
        .expect("the table is read")
        .iter()
        .map(|r| r.get::<_, Value>(0).to_string())
        .collect();
    values.sort_unstable();
    values
}

/// The lines of an output file as a table's JSONB reads them back, sorted.
pub fn file_values(path: &Path) -> Vec<String> {
    let mut values: Vec<String> = sorted_lines(path)
        .iter()
        .map(|l| serde_json::from_str::<Value>(l).expect("a JSON line").to_string())
        .collect();
    values.sort_unstable();
    values
}

/// Creates `topic` with `partitions` partitions on the broker and appends `lines[k]` to
/// partition `k % partitions`, in order: read in turn, one message per partition, the
/// partitions give the lines back in their order.
pub fn produce(broker: &str, topic: &str, partitions: i32, lines: &[String]) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        use rskafka::client::ClientBuilder;
        use rskafka::client::partition::{Compression, UnknownTopicHandling};
        use rskafka::record::Record;
        let client = ClientBuilder::new(vec![broker.to_string()])
            .build()
            .await
            .expect("the test connects to the broker");
        let exists = client
            .list_topics()
            .await
            .expect("topics")
            .iter()
            .any(|t| t.name == topic);
        if !exists {
            client
                .controller_client()
                .expect("a controller")
                .create_topic(topic, partitions, 1, 5_000)
                .await
                .expect("the topic is created");
        }
        for p in 0..partitions {
            let records: Vec<Record> = lines
                .iter()
                .skip(p as usize)
                .step_by(partitions as usize)
                .map(|l| Record {
                    key: None,
                    value: Some(l.clone().into_bytes()),
                    headers: Default::default(),
                    timestamp: chrono_now(),
                })
                .collect();
            let pc = client
                .partition_client(topic, p, UnknownTopicHandling::Retry)
                .await
                .expect("a partition client");
            for chunk in records.chunks(1000) {
                pc.produce(chunk.to_vec(), Compression::NoCompression)
                    .await
                    .expect("the messages are produced");
            }
        }
    });
}

fn chrono_now() -> rskafka::chrono::DateTime<rskafka::chrono::Utc> {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    rskafka::chrono::DateTime::from_timestamp_millis(ms).expect("a time")
}
