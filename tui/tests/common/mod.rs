//! What several of the binary's tests share: running it, reading its summary, and a
//! two-process loopback cluster.

#![allow(dead_code)] // Each test crate uses some of it.

use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// hashcount with steep skew and the balancer on `auto`, judging every second, 4 s: the job
/// whose balancer moves bins (its last four flags are the balancer's).
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
    "--duration",
    "4",
    "--balance",
    "auto",
    "--balance-every",
    "1",
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
        let ports = free_ports::<8>();
        assert!(processes < ports.len(), "at most {} processes", ports.len() - 1);
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
            dir,
            hostfile,
            addresses,
            coordinator: coordinator.to_string(),
        }
    }

    /// Starts process `process` of `job`, with `workers` workers.
    pub fn spawn(&self, process: &str, job: &[&str], workers: &str) -> Child {
        self.spawn_binary(env!("CARGO_BIN_EXE_megaflux").as_ref(), process, job, workers)
    }

    /// As [`Cluster::spawn`], with another binary that has megaflux's command line (an
    /// example of one's own dataflow, see [`example`]).
    pub fn spawn_binary(&self, binary: &Path, process: &str, job: &[&str], workers: &str) -> Child {
        self.command(binary, process, job, workers)
            .spawn()
            .expect("a cluster process starts")
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
    ) -> Vec<Child> {
        let mut job = job.to_vec();
        job.extend(["--output", out.to_str().expect("a UTF-8 path"), "--force"]);
        (0..self.addresses.len())
            .map(|p| {
                let mut command = self.command(binary, &p.to_string(), &job, "1");
                if let Some((_, point)) = failing.filter(|(f, _)| *f == p) {
                    command.env("MEGAFLUX_FAILPOINT", point);
                }
                command.spawn().expect("a cluster process starts")
            })
            .collect()
    }

    /// Runs `job` on both processes and waits for both.
    pub fn run(&self, job: &[&str], workers: &str) -> [Output; 2] {
        let p0 = self.spawn("0", job, workers);
        let p1 = self.spawn("1", job, workers);
        [
            p0.wait_with_output().expect("process 0 ends"),
            p1.wait_with_output().expect("process 1 ends"),
        ]
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
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

/// As [`wait_all`], but a process still running after `limit` is killed and the test
/// fails: a process must never wait for ever for a peer that will not come.
pub fn wait_all_within(mut children: Vec<Child>, limit: Duration) -> Vec<Output> {
    let started = Instant::now();
    while started.elapsed() < limit {
        if children.iter_mut().all(|c| matches!(c.try_wait(), Ok(Some(_)))) {
            return wait_all(children);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    for c in &mut children {
        let _ = c.kill();
    }
    let outputs = wait_all(children);
    let said: Vec<String> = outputs
        .iter()
        .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
        .collect();
    panic!("processes still ran {limit:?} later: {said:#?}");
}

/// Waits for every one of `children`, with what each printed.
pub fn wait_all(children: Vec<Child>) -> Vec<Output> {
    children
        .into_iter()
        .map(|c| c.wait_with_output().expect("a process ends"))
        .collect()
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
/// of `points` with process `victim` made to exit there (`MEGAFLUX_FAILPOINT`), within
/// `limit`. Checks that the victim exited at the point, that no survivor panicked, and
/// that the survivors' outputs are the run's without the loss. Returns process 0's summary
/// of each lossy run.
pub fn survives_failpoints(
    binary: &Path,
    cluster: &Cluster,
    job: &[&str],
    victim: usize,
    points: &[&str],
    limit: Duration,
) -> Vec<Value> {
    let base_out = cluster.dir.join("base.jsonl");
    let outputs = wait_all_within(cluster.spawn_all(binary, job, &base_out, None), limit);
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
            let mut outputs = wait_all_within(cluster.spawn_all(binary, job, &out, failing), limit);
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
