//! The exporter: sends this process's events to the collector of another process (process
//! 0 of a cluster hosts it). It connects with retries at the start and sends in batches;
//! events its queue had to drop are reported as [`crate::Event::Dropped`]. If the
//! connection breaks it stops (and `finish` says why): later events are dropped, counted by
//! the layer, and no longer reported.

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
const RETRY_EVERY: Duration = Duration::from_millis(200);

/// A running exporter.
pub struct Exporter {
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<Result<u64, ProbeError>>>,
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
        let conn = runtime.block_on(connect(addr, process, token))?;
        let (stop_tx, stop_rx) = oneshot::channel();
        let thread = std::thread::Builder::new()
            .name("megaflux-exporter".into())
            .spawn(move || runtime.block_on(send(conn, hello, queue, stop_rx)))
            .map_err(|e| ProbeError::io("starting the exporter's thread", e))?;
        Ok(Exporter {
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }

    /// Sends every event still queued and closes the connection. Returns the events sent,
    /// the hello included.
    pub fn finish(mut self) -> Result<u64, ProbeError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match self.thread.take().map(|t| t.join()) {
            Some(Ok(result)) => result,
            Some(Err(_)) => Err(ProbeError::Protocol("the exporter's thread panicked".into())),
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

async fn connect(
    addr: SocketAddr,
    process: u32,
    token: Option<String>,
) -> Result<Connection<TcpStream>, ProbeError> {
    let deadline = Instant::now() + CONNECT_FOR;
    let stream = loop {
        match TcpStream::connect(addr).await {
            Ok(s) => break s,
            Err(e) if Instant::now() >= deadline => {
                return Err(ProbeError::io(format!("reaching the collector at {addr}"), e));
            }
            Err(_) => tokio::time::sleep(RETRY_EVERY).await,
        }
    };
    let mut conn = Connection::new(stream);
    wire::handshake(&mut conn, addr, Role::Exporter { process }, token).await?;
    Ok(conn)
}

async fn send(
    mut conn: Connection<TcpStream>,
    hello: Stamped,
    mut queue: EventQueue,
    mut stop: oneshot::Receiver<()>,
) -> Result<u64, ProbeError> {
    let process = hello.process;
    let mut sent = 1u64;
    let mut reported = 0u64;
    conn.send(&ClientFrame::Events { events: vec![hello] }).await?;
    let mut batch = Vec::with_capacity(BATCH);
    let mut stopping = false;
    loop {
        if stopping {
            while batch.len() < BATCH
                && let Ok(e) = queue.events.try_recv()
            {
                batch.push(e);
            }
        } else {
            tokio::select! {
                n = queue.events.recv_many(&mut batch, BATCH) => if n == 0 { stopping = true },
                _ = &mut stop => stopping = true,
            }
        }
        let dropped = queue.dropped.load(Ordering::Relaxed);
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
            if stopping {
                return Ok(sent);
            }
            continue;
        }
        let events = crate::event::expand(std::mem::take(&mut batch));
        sent += events.len() as u64;
        for chunk in events.chunks(crate::collector::FRAME_EVENTS) {
            conn.send(&ClientFrame::Events {
                events: chunk.to_vec(),
            })
            .await?;
        }
    }
}
