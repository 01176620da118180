//! What the probe's tests share: clients of the collector that ask and wait for answers, or
//! wait to be closed, each bounded by a deadline that names what it waited for; threads whose
//! result is received with a deadline; and the jobs the tests run (each test uses some).
#![allow(dead_code)]

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::Duration;

use megaflux::Bins;
use megaflux::epoch::EpochLen;
use megaflux::harness::{Idle, Pace, RunConfig};
use megaflux::summary::Summary;
use megaflux_probe::event::Outcome;
use megaflux_probe::wire::{ClientFrame, CommandRequest, Connection, ServerFrame, Subscription};
use megaflux_testkit::deadline;
use tokio::net::TcpStream;

/// How long the collector may take to answer, or to close a connection: a bound against a
/// hang, not a judgement of speed.
pub const NET: Duration = Duration::from_secs(120);

/// How long a job of the tests (a few seconds of records, in a debug build on a loaded
/// machine) may run, and a collector or exporter take to finish.
pub const RUN: Duration = Duration::from_secs(600);

/// `future`'s output; fails naming `what` if it takes longer than `limit` (times
/// `MEGAFLUX_TEST_SLACK`).
pub async fn bounded<T>(what: &str, limit: Duration, future: impl Future<Output = T>) -> T {
    let limit = deadline(limit);
    match tokio::time::timeout(limit, future).await {
        Ok(value) => value,
        Err(_) => panic!("waited {limit:?} for {what}"),
    }
}

/// A thread's result, received with a deadline rather than joined.
pub struct Background<T> {
    what: String,
    result: Receiver<std::thread::Result<T>>,
}

/// Runs `f` on a thread of its own, named `what` in failures.
pub fn background<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> Background<T> {
    let (tx, result) = channel();
    std::thread::Builder::new()
        .name(what.chars().take(60).collect())
        .spawn(move || {
            let _ = tx.send(catch_unwind(AssertUnwindSafe(f)));
        })
        .unwrap_or_else(|e| panic!("{what}: its thread did not start: {e}"));
    Background {
        what: what.to_string(),
        result,
    }
}

impl<T> Background<T> {
    /// What the thread returned; fails with its panic, or naming it if it has not returned
    /// within `limit` (times `MEGAFLUX_TEST_SLACK`).
    pub fn wait(self, limit: Duration) -> T {
        let limit = deadline(limit);
        match self.result.recv_timeout(limit) {
            Ok(Ok(value)) => value,
            Ok(Err(payload)) => {
                let message = payload
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "a panic without a message".into());
                panic!("{} panicked: {message}", self.what)
            }
            Err(RecvTimeoutError::Timeout) => panic!("waited {limit:?} for {}", self.what),
            Err(RecvTimeoutError::Disconnected) => panic!("{}: its thread vanished", self.what),
        }
    }
}

/// Reads until the collector closes `conn`; the refusal's reason, if it sent one.
pub async fn closed(mut conn: Connection<TcpStream>) -> Option<String> {
    let mut refused = None;
    let what = "the collector to close a connection it should close";
    bounded(what, NET, async {
        loop {
            match conn.recv::<ServerFrame>().await {
                Ok(Some(ServerFrame::Refused { reason })) => refused = Some(reason),
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => return,
            }
        }
    })
    .await;
    refused
}

/// Sends `commands` as requests 0, 1, ... and collects every answer: (outcome, reason).
pub async fn ask(conn: &mut Subscription, commands: Vec<CommandRequest>) -> Vec<(Outcome, String)> {
    let n = commands.len();
    let mut answers = vec![None; n];
    let exchange = async {
        for (request, command) in commands.into_iter().enumerate() {
            let frame = ClientFrame::Command {
                request: request as u64,
                command,
            };
            conn.send(&frame).await.unwrap();
        }
        while answers.iter().any(Option::is_none) {
            match conn.recv().await.unwrap() {
                Some(ServerFrame::Answer {
                    request,
                    outcome,
                    reason,
                }) => answers[request as usize] = Some((outcome, reason.unwrap_or_default())),
                Some(_) => {}
                None => panic!("the collector closed the connection"),
            }
        }
    };
    bounded(&format!("answers to {n} commands"), NET, exchange).await;
    answers.into_iter().map(Option::unwrap).collect()
}

/// A small job of two workers and 16 bins that runs for `seconds`, light enough for a debug
/// build on a loaded machine of two cores: 200 records a second in epochs of 1 ms (not
/// 100 µs), and workers that park when they have nothing to do rather than spin. A
/// spinning worker takes a core whatever the rate, and two of them starve the collector and
/// the test's clients; a job that falls behind its open loop holds the epochs not yet done
/// (20,000 records a second in epochs of 100 µs took gigabytes within a minute in the
/// attacks' test on a loaded machine, and what the job held was counted as the flood's).
pub fn job(seconds: u64) -> RunConfig {
    RunConfig {
        workload: "hashcount".into(),
        workers: 2,
        bins: Bins::new(16).unwrap(),
        params: megaflux::job::ParamValues::new().with("keys", 5_000),
        rate: 200,
        duration: Duration::from_secs(seconds),
        idle: Idle::Park,
        epoch: EpochLen::try_from(1_000).unwrap(),
        ..RunConfig::default()
    }
}

/// A job that outlasts whatever its test does to it: the test ends it with
/// `ControlHandle::stop` once done, and compares it with [`quiet_twin`].
pub fn job_until_stopped() -> RunConfig {
    job(3_000)
}

/// The run a stopped job is compared with: the same job, for the epochs it covered (its
/// summary's `duration_s`, to the microsecond as epochs close), as fast as it goes.
pub fn quiet_twin(config: RunConfig, stopped: &Summary) -> RunConfig {
    RunConfig {
        duration: Duration::from_micros((stopped.duration_s * 1e6).round() as u64),
        pace: Pace::Max,
        ..config
    }
}

/// A runtime for a test's clients, on the test's thread.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}
