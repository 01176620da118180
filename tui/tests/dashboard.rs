//! The real binary in a real terminal (tmux): start `megaflux run --record`, move bin 0 to
//! worker 1, start a fluid plan to uniform, quit; then the trace shows both and the terminal
//! is back in cooked mode. And with replicas: fail a worker, watch its bins degrade, rejoin
//! it, watch them recover, quit; the trace shows all of it. And the time machine over a
//! sample trace: to the second migration, a step, faster, quit. And `attach --metrics` to a
//! headless job: the metrics it serves show the job's migration.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use megaflux_probe::event::{Event, Phase};

/// A bound on each wait for the screen, a file or the trace to show what the test waits
/// for: against a hang, not a judgement of speed.
const WAIT: Duration = Duration::from_secs(300);

/// A bound on one `tmux` command (they return at once).
const TMUX: Duration = Duration::from_secs(60);

/// How often a wait looks again at the screen or a file: capturing the pane is a process,
/// and a trace grows to megabytes.
const LOOK_EVERY: Duration = Duration::from_millis(200);

/// `tmux args`, run to its end for at most [`TMUX`].
fn tmux(args: &[&str]) -> Output {
    megaflux_testkit::run(
        format!("tmux {}", args.join(" ")),
        Command::new("tmux").args(args).stdin(Stdio::null()),
        TMUX,
    )
}

/// Waits with the kit until `condition` holds, for at most [`WAIT`], looking every
/// [`LOOK_EVERY`]; a failure names `what` and shows `shown()` (the screen, the trace).
fn wait_showing(what: &str, mut condition: impl FnMut() -> bool, shown: impl FnOnce() -> String) {
    let waited = catch_unwind(AssertUnwindSafe(|| {
        megaflux_testkit::wait_until(what, WAIT, || {
            condition() || {
                std::thread::sleep(LOOK_EVERY);
                false
            }
        })
    }));
    if waited.is_err() {
        let limit = megaflux_testkit::deadline(WAIT);
        panic!("no {what} within {limit:?}:\n{}", shown());
    }
}

/// A detached tmux session of its own, killed (with what runs in it) when it drops.
struct Session {
    name: String,
}

impl Session {
    fn start(test: &str, command: &str) -> Self {
        let name = format!("megaflux-e2e-{test}-{}", std::process::id());
        let started = tmux(&["new-session", "-d", "-s", &name, "-x", "120", "-y", "36", command]);
        assert!(
            started.status.success(),
            "tmux did not start a session (the CI script installs tmux): {}",
            String::from_utf8_lossy(&started.stderr)
        );
        Session { name }
    }

    fn screen(&self) -> String {
        let out = tmux(&["capture-pane", "-p", "-t", &self.name]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn keys(&self, keys: &[&str]) {
        for k in keys {
            let sent = tmux(&["send-keys", "-t", &self.name, k]);
            assert!(
                sent.status.success(),
                "tmux send-keys {k}: {}",
                String::from_utf8_lossy(&sent.stderr)
            );
            // Paced as a person types (each key is still read in turn without it).
            std::thread::sleep(Duration::from_millis(150));
        }
    }

    /// Waits until the screen shows `text`.
    fn wait_for(&self, text: &str) {
        wait_showing(
            &format!("`{text}` on the screen"),
            || self.screen().contains(text),
            || self.screen(),
        );
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // Never a panic out of a drop (it may run as a failed test unwinds): a kill that
        // fails (the session ended by itself) or hangs is caught.
        let name = self.name.clone();
        let _ = catch_unwind(move || tmux(&["kill-session", "-t", &name]));
    }
}

/// Waits until the file at `path` exists and its text satisfies `what`; its text.
fn wait_for_file(path: &Path, what: impl Fn(&str) -> bool) -> String {
    let mut text = String::new();
    wait_showing(
        &format!("{} ready", path.display()),
        || {
            text = std::fs::read_to_string(path).unwrap_or_default();
            what(&text)
        },
        || format!("it holds: {:?}", std::fs::read_to_string(path)),
    );
    text
}

/// `megaflux` in a tmux pane (`run --record` or `replay`); after it ends, the pane records its
/// exit status and the terminal's modes.
struct Dashboard {
    tmux: Session,
    dir: tempfile::TempDir,
    trace: PathBuf,
}

impl Dashboard {
    /// `megaflux run --record TRACE args`.
    fn start(test: &str, args: &str) -> Self {
        Self::with(test, |trace| format!("run --record {} {args}", trace.display()))
    }

    /// `megaflux` with the arguments `args` makes of the scratch trace's path.
    fn with(test: &str, args: impl FnOnce(&Path) -> String) -> Self {
        let dir = tempfile::tempdir().expect("a scratch directory");
        let trace = dir.path().join("trace.jsonl");
        let command = format!(
            "{bin} {args} 2> {err}; echo $? > {done}; stty -a > {stty}; sleep 60",
            bin = env!("CARGO_BIN_EXE_megaflux"),
            args = args(&trace),
            err = dir.path().join("stderr").display(),
            done = dir.path().join("done").display(),
            stty = dir.path().join("stty").display(),
        );
        let tmux = Session::start(test, &command);
        Dashboard { tmux, dir, trace }
    }

    /// What the run said on stderr so far.
    fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("stderr")).unwrap_or_default()
    }

    /// Quits with `q`; checks the exit status is 0 and the terminal is back in cooked mode
    /// with echo; returns the trace it recorded.
    fn quit(self) -> megaflux_probe::record::Trace {
        self.quit_only();
        megaflux_probe::record::read(&self.trace).unwrap()
    }

    /// Waits until the trace recorded so far satisfies `what`. If it never does, the failure
    /// shows the screen and the trace's last words on the run's progress (frontiers, plans,
    /// moves, commands), so that a stall seen once in CI can be told from a slow machine.
    fn wait_for_trace(&self, what: &str, holds: impl Fn(&str) -> bool) {
        wait_showing(
            &format!("{what} in the trace"),
            || holds(&std::fs::read_to_string(&self.trace).unwrap_or_default()),
            || {
                let text = std::fs::read_to_string(&self.trace).unwrap_or_default();
                let progress: Vec<&str> = text
                    .lines()
                    .filter(|l| {
                        ["frontier", "plan_", "migration", "command", "rejoin", "failure"]
                            .iter()
                            .any(|k| l.contains(&format!(r#""kind":"{k}"#)))
                    })
                    .collect();
                let tail = &progress[progress.len().saturating_sub(30)..];
                format!(
                    "screen:\n{}\nlast progress events:\n{}\nstderr:\n{}",
                    self.tmux.screen(),
                    tail.join("\n"),
                    self.stderr()
                )
            },
        );
    }

    /// Quits with `q`, and checks as [`Dashboard::quit`] does.
    fn quit_only(&self) {
        self.tmux.keys(&["q"]);
        let code = wait_for_file(&self.dir.path().join("done"), |t| t.ends_with('\n'));
        assert_eq!(code.trim(), "0", "{}", self.stderr());
        let modes = wait_for_file(&self.dir.path().join("stty"), |t| !t.is_empty());
        let words: Vec<&str> = modes.split_whitespace().collect();
        assert!(words.contains(&"icanon") && words.contains(&"echo"), "{modes}");
    }
}

#[test]
fn move_a_bin_and_run_a_plan_from_the_dashboard() {
    let dash = Dashboard::start("plan", "--keys 100000 --rate 20000 --bins 64 --duration 300");
    let tmux = &dash.tmux;
    // The bins view, with sizes from both workers; the cursor is on bin 0.
    tmux.wait_for("worker 1:");
    tmux.keys(&["m"]);
    tmux.wait_for("Move bin 0 to worker 1?");
    tmux.keys(&["1", "Enter"]);
    tmux.wait_for("applied: move bin 0 to worker 1");
    tmux.keys(&["p"]);
    tmux.wait_for("Start a plan");
    tmux.keys(&["Enter"]);
    tmux.wait_for("applied: fluid plan to uniform");
    // The trace is flushed at least every second.
    dash.wait_for_trace("the fluid plan's completion", |t| {
        t.contains(r#""kind":"plan_completed","strategy":"fluid""#)
    });
    let trace = dash.quit();
    let moved = |to: u32| {
        trace.events.iter().any(|e| {
            matches!(e.event, Event::Migration { phase: Phase::Completed, bin: 0, to: Some(t), .. } if t == to)
        })
    };
    assert!(moved(1), "bin 0 moved to worker 1");
    assert!(moved(0), "the fluid plan to uniform moved bin 0 back to worker 0");
    assert!(
        trace
            .events
            .iter()
            .any(|e| matches!(&e.event, Event::PlanCompleted { strategy, .. } if strategy == "fluid"))
    );
}

#[test]
fn fail_and_rejoin_a_worker_from_the_dashboard() {
    let dash = Dashboard::start(
        "failover",
        "--replicas 2 --keys 100000 --rate 20000 --bins 64 --duration 300",
    );
    let tmux = &dash.tmux;
    tmux.wait_for("standbys");
    tmux.keys(&["F"]);
    tmux.wait_for("Fail worker 0?");
    tmux.keys(&["1"]);
    tmux.wait_for("their standbys take over");
    tmux.keys(&["Enter"]);
    tmux.wait_for("applied: fail worker 1");
    // Two workers: every bin is left with one replica until worker 1 comes back.
    tmux.wait_for("worker 1: failed, holds nothing");
    tmux.keys(&["2"]);
    tmux.wait_for("64 bins with one replica");
    tmux.keys(&["J"]);
    tmux.wait_for("Worker 1 rejoins, empty?");
    tmux.keys(&["Enter"]);
    tmux.wait_for("applied: rejoin worker 1");
    dash.wait_for_trace("worker 1's recovery", |t| t.contains(r#""kind":"recovery""#));
    tmux.keys(&["2"]);
    tmux.wait_for("0 bins with one replica");
    let trace = dash.quit();
    let has = |f: &dyn Fn(&Event) -> bool| trace.events.iter().any(|e| f(&e.event));
    assert!(has(&|e| matches!(e, Event::Failure { worker: 1, .. })));
    assert!(has(&|e| matches!(e, Event::Takeover { worker: 0, .. })));
    assert!(has(&|e| matches!(e, Event::Rejoin { worker: 1, .. })));
    assert!(has(
        &|e| matches!(e, Event::Recovery { worker: 1, bins } if bins.len() == 64)
    ));
    // The last placement has every bin on both workers again.
    let last = trace
        .events
        .iter()
        .rev()
        .find_map(|e| match &e.event {
            Event::Placement { holders, .. } => Some(holders.clone()),
            _ => None,
        })
        .unwrap();
    assert!(
        last.split_whitespace().all(|h| h == "0/1" || h == "1/0"),
        "{last}"
    );
}

#[test]
fn replay_a_sample_trace() {
    let sample = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../traces/keycount-fluid.jsonl");
    let dash = Dashboard::with("replay", |_| format!("replay {}", sample.display()));
    let tmux = &dash.tmux;
    tmux.wait_for("event ");
    // Back to the start; a step back pauses there.
    tmux.keys(&["g", "0", "Enter", ","]);
    tmux.wait_for("⏸ 1x");
    tmux.keys(&["]", "]"]);
    tmux.wait_for("migration matched to uniform");
    let at_mark = event_number(&tmux.screen());
    tmux.keys(&["."]);
    tmux.wait_for(&format!("event {}/", at_mark + 1));
    tmux.keys(&["+", "+"]);
    tmux.wait_for("⏸ 4x");
    tmux.keys(&["5"]);
    tmux.wait_for("Finished migrations");
    // Play on to the end.
    tmux.keys(&["Space"]);
    let events = std::fs::read_to_string(&sample).unwrap().lines().count() - 1;
    tmux.wait_for(&format!("event {events}/{events}"));
    dash.quit_only();
}

/// The `event N/M` number on the replay's timeline.
fn event_number(screen: &str) -> u64 {
    let at = screen.find("event ").expect("a timeline");
    screen[at + 6..]
        .split('/')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no event number in:\n{screen}"))
}

/// `attach` to an address where no collector serves: the dashboard says why, naming the
/// address, and quitting it fails with the reason on stderr.
#[test]
fn attach_to_nothing_says_where_and_fails() {
    let (_held, port) = closed_port();
    let dir = tempfile::tempdir().expect("a scratch directory");
    let addr = format!("127.0.0.1:{port}");
    let command = format!(
        "{bin} attach {addr} 2> {err}; echo $? > {done}; sleep 60",
        bin = env!("CARGO_BIN_EXE_megaflux"),
        err = dir.path().join("stderr").display(),
        done = dir.path().join("done").display(),
    );
    let tmux = Session::start("attach", &command);
    tmux.wait_for(&format!("closed: connecting to the collector at {addr}"));
    tmux.keys(&["q"]);
    let code = wait_for_file(&dir.path().join("done"), |t| t.ends_with('\n'));
    assert_eq!(code.trim(), "1");
    let stderr = std::fs::read_to_string(dir.path().join("stderr")).unwrap();
    assert!(stderr.contains(&addr) && stderr.contains("refused"), "{stderr}");
}

/// A loopback port that refuses connections for as long as the socket returned lives: bound
/// (so that no other test takes it) but not listening.
fn closed_port() -> (tokio::net::TcpSocket, u16) {
    let socket = tokio::net::TcpSocket::new_v4().expect("a socket");
    socket
        .bind("127.0.0.1:0".parse().expect("an address"))
        .expect("a free port");
    let port = socket.local_addr().expect("a bound address").port();
    (socket, port)
}

/// `attach --metrics`: the dashboard follows a headless job, and the metrics it serves are
/// the job's, from the events it follows (a migration, records in).
#[test]
fn attach_serves_the_metrics_of_the_job_it_follows() {
    let mut job = megaflux_testkit::Proc::spawn(
        "run --serve",
        Command::new(env!("CARGO_BIN_EXE_megaflux"))
            .args([
                "run",
                "--headless",
                "--duration",
                "600",
                "--rate",
                "20000",
                "--serve",
                "127.0.0.1:0",
            ])
            .args(["--migrate", "fluid@1:pack:1"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    );
    let line = job.wait_for_stderr("the collector's address", WAIT, |l| {
        l.contains("collector serving on")
    });
    let collector = line.rsplit(' ').next().expect("an address").to_string();
    let dir = tempfile::tempdir().expect("a scratch directory");
    let err = dir.path().join("stderr");
    let command = format!(
        "{bin} attach {collector} --metrics 127.0.0.1:0 2> {err}; sleep 60",
        bin = env!("CARGO_BIN_EXE_megaflux"),
        err = err.display(),
    );
    let tmux = Session::start("attach-metrics", &command);
    tmux.wait_for("keycount");
    let said = wait_for_file(&err, |t| t.contains("metrics on http://"));
    let addr = said
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split("/metrics").next())
        .expect("the metrics address")
        .to_string();
    let last = std::cell::RefCell::new(String::new());
    wait_showing(
        "a scrape of attach's metrics with the job's migration",
        || {
            let last = &mut *last.borrow_mut();
            *last = scrape(&addr).unwrap_or_default();
            last.contains(r#"megaflux_migrations_total{strategy="fluid",by="command"} 1"#)
                && last.lines().any(|l| {
                    l.strip_prefix("megaflux_records_in_total ")
                        .and_then(|v| v.trim().parse::<u64>().ok())
                        .is_some_and(|n| n > 0)
                })
        },
        || format!("{}\n{}", last.borrow(), tmux.screen()),
    );
    tmux.keys(&["q"]);
    job.interrupt();
    let out = job.wait(WAIT);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// `GET /metrics` from `addr`, its body if it answered 200.
fn scrape(addr: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(stream, "GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    (head.split_whitespace().nth(1) == Some("200")).then(|| body.to_string())
}
