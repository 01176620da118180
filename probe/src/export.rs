//! The exporter: sends this process's events to the collector of another process (process
//! 0 of a cluster hosts it), in batches; events its queue had to drop are reported as
//! [`crate::Event::Dropped`].
//!
//! It never holds up its process for long: connecting, the handshake and every send have
//! a time limit, and so has the last flush at `finish`. If the connection breaks, it
//! connects again with backoff and says hello again (the collector takes a process's
//! events only after its hello); the events of the broken batch and those the queue drops
//! meanwhile are lost and counted.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::error::ProbeError;
use crate::event::{Event, Stamped};
use crate::layer::EventQueue;
use crate::wire::{self, ClientFrame, Connection, Role};

/// Most events per frame.
const BATCH: usize = 2048;
/// How long to keep trying to reach the collector at the start.
pub const CONNECT_FOR: Duration = Duration::from_secs(20);
/// Backoff between attempts to reach the collector: from the first to the most.
const RETRY_FIRST: Duration = Duration::from_millis(200);
const RETRY_MOST: Duration = Duration::from_secs(5);
/// How long one frame may take to send before the connection counts as broken.
pub const SEND_TIMEOUT: Duration = Duration::from_secs(10);
/// How long `finish` may take to send what is still queued.
pub const FINISH_WITHIN: Duration = Duration::from_secs(15);

/// A running exporter.
pub struct Exporter {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<Result<u64, ProbeError>>>,
}

/// Where and how to reach the collector.
#[derive(Clone)]
struct Target {
    addr: SocketAddr,
    process: u32,
    token: Option<String>,
}

impl Exporter {
    /// Connects to the collector at `addr` as process `process` and starts sending `queue`,
    /// after `hello`. Fails if the collector cannot be reached within [`CONNECT_FOR`] or
    /// refuses the connection.
    pub fn start(
        addr: SocketAddr,
        process: u32,
        token: Option<String>,
        hello: Stamped,
        queue: EventQueue,
    ) -> Result<Self, ProbeError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| ProbeError::io("starting the exporter's runtime", e))?;
        let target = Target { addr, process, token };
        let deadline = Instant::now() + CONNECT_FOR;
        let conn = runtime.block_on(connect(&target, &hello, Some(deadline)))?;
        let (stop_tx, stop_rx) = oneshot::channel();
        let thread = std::thread::Builder::new()
            .name("megaflux-exporter".into())
            .spawn(move || runtime.block_on(send(target, conn, hello, queue, stop_rx)))
            .map_err(|e| ProbeError::io("starting the exporter's thread", e))?;
        Ok(Exporter {
            addr,
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }

    /// Sends every event still queued (within [`FINISH_WITHIN`]) and closes the connection.
    /// Returns the events sent, the hellos included.
    pub fn finish(mut self) -> Result<u64, ProbeError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match self.thread.take().map(|t| t.join()) {
            Some(Ok(result)) => result,
            Some(Err(_)) => Err(ProbeError::Protocol(format!(
                "the exporter to {} panicked",
                self.addr
            ))),
            None => Ok(0),
        }
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Connects, shakes hands and sends `hello`, retrying with backoff until `deadline` (or
/// for ever without one).
async fn connect(
    target: &Target,
    hello: &Stamped,
    deadline: Option<Instant>,
) -> Result<Connection<TcpStream>, ProbeError> {
    let mut wait = RETRY_FIRST;
    loop {
        match attempt(target, hello).await {
            Ok(conn) => return Ok(conn),
            Err(e) if deadline.is_some_and(|d| Instant::now() + wait >= d) => return Err(e),
            Err(e) => {
                tracing::debug!(target: "megaflux_probe::export", error = %e, "collector not reached");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(RETRY_MOST);
            }
        }
    }
}

async fn attempt(target: &Target, hello: &Stamped) -> Result<Connection<TcpStream>, ProbeError> {
    let (mut conn, _) = wire::connect(
        target.addr,
        Role::Exporter {
            process: target.process,
        },
        target.token.clone(),
    )
    .await?;
    within(
        &mut conn,
        target.addr,
        &ClientFrame::Events {
            events: vec![hello.clone()],
        },
    )
    .await?;
    Ok(conn)
}

/// Sends one frame within [`SEND_TIMEOUT`].
async fn within(
    conn: &mut Connection<TcpStream>,
    addr: SocketAddr,
    frame: &ClientFrame,
) -> Result<(), ProbeError> {
    match tokio::time::timeout(SEND_TIMEOUT, conn.send(frame)).await {
        Ok(sent) => sent,
        Err(_) => Err(ProbeError::Protocol(format!(
            "the collector at {addr} took no events for {SEND_TIMEOUT:?}"
        ))),
    }
}

async fn send(
    target: Target,
    conn: Connection<TcpStream>,
    hello: Stamped,
    mut queue: EventQueue,
    mut stop: oneshot::Receiver<()>,
) -> Result<u64, ProbeError> {
    let process = hello.process;
    let mut conn = Some(conn);
    let mut sent = 1u64;
    // Events lost with a broken connection, reported with the queue's own drops.
    let mut lost = 0u64;
    let mut reported = 0u64;
    let mut batch = Vec::with_capacity(BATCH);
    let mut finish_by: Option<Instant> = None;
    loop {
        if finish_by.is_some() {
            while batch.len() < BATCH
                && let Ok(e) = queue.events.try_recv()
            {
                batch.push(e);
            }
        } else {
            tokio::select! {
                n = queue.events.recv_many(&mut batch, BATCH) => if n == 0 { finish_by = Some(Instant::now() + FINISH_WITHIN) },
                _ = &mut stop => finish_by = Some(Instant::now() + FINISH_WITHIN),
            }
        }
        let dropped = queue.dropped.load(Ordering::Relaxed) + lost;
        if dropped != reported {
            reported = dropped;
            batch.push(Stamped {
                at_s: batch.last().map_or(0.0, |e: &Stamped| e.at_s),
                process,
                event: Event::Dropped {
                    place: "queue".into(),
                    count: dropped,
                },
            });
        }
        if batch.is_empty() {
            if finish_by.is_some() {
                return Ok(sent);
            }
            continue;
        }
        if finish_by.is_some_and(|by| Instant::now() >= by) {
            return Err(ProbeError::Protocol(format!(
                "the collector at {} did not take this process's last events within {FINISH_WITHIN:?}",
                target.addr
            )));
        }
        let events = crate::event::expand(std::mem::take(&mut batch));
        let count = events.len() as u64;
        if conn.is_none() {
            // Reconnecting: until the job ends (which ends the attempts), then until
            // `finish_by`.
            let again = connect(&target, &hello, finish_by);
            conn = match finish_by {
                Some(_) => Some(again.await?),
                None => tokio::select! {
                    c = again => Some(c?),
                    _ = &mut stop => {
                        finish_by = Some(Instant::now() + FINISH_WITHIN);
                        None
                    }
                },
            };
            if conn.is_some() {
                sent += 1;
            }
        }
        let Some(c) = conn.as_mut() else {
            lost += count;
            continue;
        };
        let mut broken = false;
        for chunk in events.chunks(crate::collector::FRAME_EVENTS) {
            let frame = ClientFrame::Events {
                events: chunk.to_vec(),
            };
            if let Err(e) = within(c, target.addr, &frame).await {
                tracing::debug!(target: "megaflux_probe::export", error = %e, "connection broken");
                broken = true;
                break;
            }
        }
        if broken {
            conn = None;
            lost += count;
        } else {
            sent += count;
        }
    }
}
