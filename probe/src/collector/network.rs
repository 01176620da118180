//! The listener and one task per connection: the handshake under the pre-hello limits,
//! then an exporter's events (checked by its [`Speaker`]) or a subscriber's feed and
//! commands (checked for token and rate before the collector loop sees them).
//!
//! A connection costs at most [`Limits::hello_bytes`] and [`Limits::hello_timeout`] until
//! it is welcomed, and at most [`Limits::pending`] connections wait for that at once: a new
//! one closes the oldest of the address that holds the most (counted). An error closes that
//! connection only.

use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};
use tokio::task::AbortHandle;
use tokio_util::bytes::Bytes;

use megaflux::rate::evictee;

use super::addresses::{Addresses, Spend};
use super::gate::Gate;
use super::lifecycle::Inbox;
use super::limits::{EXPORTER_FRAME_BYTES, INBOX_BYTES, Limits, short};
use super::speaker::{JobShape, Speaker};
use crate::error::ProbeError;
use crate::event::Outcome;
use crate::wire::{ClientFrame, Connection, EventFrame, PROTOCOL_VERSION, Role, ServerFrame};

/// What every connection's task shares.
pub(super) struct Listener {
    pub(super) listener: TcpListener,
    pub(super) inbox: mpsc::Sender<Inbox>,
    pub(super) gate: Gate,
    pub(super) limits: Limits,
    pub(super) local_process: u32,
    /// The job as this process's hello describes it (exporters must agree).
    pub(super) shape: Option<JobShape>,
    pub(super) turned_away: Arc<AtomicU64>,
    /// What each client address has spent, across its connections.
    pub(super) addresses: Addresses,
    /// The collector's clock (this process's probe clock).
    pub(super) clock: std::time::Instant,
    /// Bytes queued for all subscribers (each task takes off what it sent).
    pub(super) queued_total: Arc<AtomicUsize>,
    /// Exporters' frames read and not taken in yet, in KiB ([`INBOX_BYTES`]).
    pub(super) inbox_bytes: Arc<tokio::sync::Semaphore>,
}

/// Connections that have not been welcomed yet, oldest first, with their client address.
/// When all [`Limits::pending`] places are taken, a new connection takes the place of the
/// oldest connection of the address that holds the most: a client that opens connections
/// and says nothing delays its own, not the others' (an exporter, a viewer) by more than
/// its rate.
#[derive(Default)]
struct Pending {
    waiting: Mutex<VecDeque<(u64, IpAddr, AbortHandle)>>,
}

impl Pending {
    /// Makes room for one more: `true` if a waiting connection had to go.
    fn make_room(&self, places: usize) -> bool {
        let mut waiting = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
        if waiting.len() < places {
            return false;
        }
        let clients = waiting.iter().map(|(_, ip, _)| *ip);
        if let Some((_, _, gone)) = evictee(clients).and_then(|i| waiting.remove(i)) {
            gone.abort();
        }
        true
    }

    fn add(&self, id: u64, ip: IpAddr, task: AbortHandle) {
        self.waiting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push_back((id, ip, task));
    }

    fn remove(&self, id: u64) {
        self.waiting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|(i, _, _)| *i != id);
    }
}

/// Takes a connection's place among the pending until dropped (welcomed, refused or gone).
struct Place {
    id: u64,
    pending: Arc<Pending>,
}

impl Drop for Place {
    fn drop(&mut self) {
        self.pending.remove(self.id);
    }
}

/// Accepts connections until the collector stops.
pub(super) async fn accept(listener: Listener) {
    let pending = Arc::new(Pending::default());
    let shared = Arc::new(listener);
    let mut next = 0u64;
    loop {
        match shared.listener.accept().await {
            Ok((stream, peer)) => {
                if pending.make_room(shared.limits.pending.max(1)) {
                    shared.turned_away.fetch_add(1, Ordering::Relaxed);
                }
                let id = next;
                next += 1;
                let place = Place {
                    id,
                    pending: Arc::clone(&pending),
                };
                let shared = Arc::clone(&shared);
                let task = tokio::spawn(async move {
                    if let Err(reason) = serve(stream, peer.ip(), &shared, place).await {
                        let _ = shared
                            .inbox
                            .send(Inbox::Closed(format!("{peer}: {reason}")))
                            .await;
                    }
                });
                pending.add(id, peer.ip(), task.abort_handle());
            }
            Err(e) => {
                tracing::warn!(target: "megaflux_probe::collector", error = %e, "accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
    }
}

/// A connection past its hello.
enum Admitted {
    Exporter(Speaker, oneshot::Receiver<String>),
    Subscriber { snapshot: Vec<Bytes>, feed: Feed },
}

/// One connection, from hello to close. An error is the reason it was closed.
async fn serve(stream: TcpStream, ip: IpAddr, shared: &Listener, place: Place) -> Result<(), String> {
    let limits = &shared.limits;
    let mut conn = Connection::with_limit(stream, limits.hello_bytes);
    let hello = match tokio::time::timeout(limits.hello_timeout, conn.recv::<ClientFrame>()).await {
        Err(_) => return Err(format!("no hello within {:?}", limits.hello_timeout)),
        Ok(hello) => hello.map_err(|e| e.to_string()),
    };
    let id = place.id;
    let admitted = match admit(hello, id, ip, shared).await {
        Ok(None) => return Ok(()),
        Ok(Some(admitted)) => admitted,
        Err(reason) => {
            let refusal = ServerFrame::Refused {
                reason: short(&reason),
            };
            let _ = tokio::time::timeout(limits.hello_timeout, conn.send(&refusal)).await;
            return Err(reason);
        }
    };
    let welcome = ServerFrame::Welcome {
        protocol: PROTOCOL_VERSION,
        subscriber: match &admitted {
            Admitted::Subscriber { feed, .. } => Some(feed.id),
            Admitted::Exporter(..) => None,
        },
    };
    let welcomed = match tokio::time::timeout(limits.hello_timeout, conn.send(&welcome)).await {
        Ok(sent) => sent.map_err(|e| e.to_string()),
        Err(_) => Err(format!(
            "did not take its welcome within {:?}",
            limits.hello_timeout
        )),
    };
    drop(place);
    match admitted {
        Admitted::Exporter(speaker, replaced) => {
            let process = speaker.process();
            let result = match welcomed {
                Ok(()) => {
                    conn.set_limit(EXPORTER_FRAME_BYTES);
                    exporter(&mut conn, shared, speaker, replaced).await
                }
                Err(reason) => Err(reason),
            };
            let _ = shared.inbox.send(Inbox::ExporterLeft(process, id)).await;
            result
        }
        Admitted::Subscriber { snapshot, feed } => {
            let id = feed.id;
            let result = match welcomed {
                Ok(()) => {
                    conn.set_limit(limits.command_bytes);
                    subscriber(&mut conn, ip, shared, snapshot, feed).await
                }
                Err(reason) => Err(reason),
            };
            let _ = shared.inbox.send(Inbox::Unsubscribe(id)).await;
            result
        }
    }
}

/// Admits the client that sent `hello`, joining it to the collector, or says why not
/// (`None`: it left first). Reads and writes nothing: whatever joined here leaves when
/// [`serve`] ends.
async fn admit(
    hello: Result<Option<ClientFrame>, String>,
    id: u64,
    ip: IpAddr,
    shared: &Listener,
) -> Result<Option<Admitted>, String> {
    let (role, presented) = match hello? {
        None => return Ok(None),
        Some(ClientFrame::Hello {
            protocol: PROTOCOL_VERSION,
            role,
            token,
        }) => (role, token),
        Some(ClientFrame::Hello { protocol, .. }) => {
            return Err(format!(
                "protocol version {protocol}; this collector speaks version {PROTOCOL_VERSION}"
            ));
        }
        Some(_) => return Err("the first frame must be a hello".into()),
    };
    // Guesses are throttled per address: a wrong token costs the next guess a wait.
    if presented.is_some()
        && let Err(wait) = shared.addresses.may_try_token(ip)
    {
        return Err(format!(
            "too many wrong tokens from {ip}: the next is checked in {:.1} s",
            wait.as_secs_f64()
        ));
    }
    let holds_token = shared.gate.holds(presented.as_deref());
    if presented.is_some() && !holds_token {
        shared.addresses.failed_token(ip);
    }
    shared.gate.admit(&role, holds_token)?;
    match role {
        Role::Exporter { process } => {
            // None may speak for this collector's own process, whose answers to commands
            // it trusts.
            if process == shared.local_process {
                return Err(format!("process {process} is this collector's own"));
            }
            let shape = shared.shape.ok_or("this collector has no job to export to")?;
            let speaker = Speaker::new(process, shape)?;
            let (replace, replaced) = oneshot::channel();
            let joined = Inbox::ExporterJoined {
                process,
                connection: id,
                replace,
            };
            let _ = shared.inbox.send(joined).await;
            Ok(Some(Admitted::Exporter(speaker, replaced)))
        }
        Role::Subscriber => {
            let (frames_tx, frames) = mpsc::unbounded_channel();
            let queued = Arc::new(AtomicUsize::new(0));
            let (reply, answer) = oneshot::channel();
            let subscribe = Inbox::Subscribe {
                frames: frames_tx,
                queued: Arc::clone(&queued),
                reply,
            };
            let _ = shared.inbox.send(subscribe).await;
            let (id, snapshot) = answer
                .await
                .map_err(|_| "the collector is stopping".to_string())??;
            let feed = Feed {
                id,
                frames,
                queued,
                holds_token,
            };
            Ok(Some(Admitted::Subscriber { snapshot, feed }))
        }
    }
}

async fn exporter(
    conn: &mut Connection<TcpStream>,
    shared: &Listener,
    mut speaker: Speaker,
    replaced: oneshot::Receiver<String>,
) -> Result<(), String> {
    let quiet = shared.limits.exporter_quiet;
    tokio::pin!(replaced);
    loop {
        let frame = tokio::select! {
            frame = tokio::time::timeout(quiet, conn.recv_sized::<ClientFrame>()) => frame,
            reason = &mut replaced => return Err(reason.unwrap_or_else(|_| "the collector is stopping".into())),
        };
        let frame = frame.map_err(|_| format!("an exporter silent for {quiet:?}"))?;
        match frame.map_err(|e| e.to_string())? {
            None => return Ok(()),
            Some((ClientFrame::Events { mut events }, size)) => {
                let now_s = shared.clock.elapsed().as_secs_f64();
                for event in &mut events {
                    speaker.check(event, now_s)?;
                }
                // Waits while exporters' frames not taken in yet fill the budget: the
                // connection is not read meanwhile.
                let kib = u32::try_from(size.div_ceil(1 << 10).min(INBOX_BYTES >> 10)).unwrap_or(u32::MAX);
                let Ok(budget) = Arc::clone(&shared.inbox_bytes).acquire_many_owned(kib).await else {
                    return Ok(());
                };
                if shared.inbox.send(Inbox::Events(events, budget)).await.is_err() {
                    return Ok(());
                }
            }
            Some(_) => return Err("an exporter may only send events".into()),
        }
    }
}

/// A subscriber's side of the fan-out.
struct Feed {
    id: u64,
    frames: mpsc::UnboundedReceiver<EventFrame>,
    /// Bytes queued in `frames` (the collector stops queueing past its bound).
    queued: Arc<AtomicUsize>,
    holds_token: bool,
}

async fn subscriber(
    conn: &mut Connection<TcpStream>,
    ip: IpAddr,
    shared: &Listener,
    snapshot: Vec<Bytes>,
    mut feed: Feed,
) -> Result<(), String> {
    let limits = &shared.limits;
    for frame in snapshot {
        send_encoded(conn, frame, limits).await?;
    }
    loop {
        tokio::select! {
            frame = feed.frames.recv() => match frame {
                Some(frame) => {
                    let size = frame.bytes.len();
                    send_encoded(conn, frame.bytes, limits).await?;
                    // Both counts, or neither: the collector takes what is left off the total
                    // when the subscriber goes (`Subscriber::release`).
                    let mine = feed.queued.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |q| Some(q.saturating_sub(size)));
                    let taken = mine.map_or(0, |q| q.min(size));
                    let _ = shared.queued_total.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| Some(t.saturating_sub(taken)));
                }
                None => return Ok(()),
            },
            incoming = conn.recv::<ClientFrame>() => match incoming.map_err(|e| e.to_string())? {
                None => return Ok(()),
                Some(ClientFrame::Command { request, command }) => {
                    // Refused here, before the collector logs anything about it; the address
                    // pays, whichever of its connections asks.
                    let spend = loop {
                        match shared.addresses.command(ip, feed.holds_token) {
                            Spend::Wait(wait) => tokio::time::sleep(wait).await,
                            spend => break spend,
                        }
                    };
                    let refused = if !feed.holds_token {
                        Some("commands need the collector's token".to_string())
                    } else if spend == Spend::Refuse {
                        Some(format!(
                            "too many commands from {ip}: at most {} at once and {} a second",
                            limits.commands_burst, limits.commands_per_s
                        ))
                    } else {
                        None
                    };
                    if let Some(reason) = refused {
                        let answer = ServerFrame::Answer { request, outcome: Outcome::Rejected, reason: Some(reason) };
                        send(conn, &answer, limits).await?;
                        continue;
                    }
                    let msg = Inbox::Command { subscriber: feed.id, request, command };
                    if shared.inbox.send(msg).await.is_err() {
                        return Ok(());
                    }
                }
                Some(_) => return Err("a subscriber may only send commands".into()),
            },
        }
    }
}

/// Sends `frame` to a subscriber, which must take it within [`Limits::send_timeout`].
async fn send(conn: &mut Connection<TcpStream>, frame: &ServerFrame, limits: &Limits) -> Result<(), String> {
    let frame = crate::wire::encode(frame).map_err(|e| e.to_string())?;
    send_encoded(conn, frame, limits).await
}

/// Sends a frame encoded before, within [`Limits::send_timeout`].
async fn send_encoded(conn: &mut Connection<TcpStream>, frame: Bytes, limits: &Limits) -> Result<(), String> {
    match tokio::time::timeout(limits.send_timeout, conn.send_encoded(frame)).await {
        Ok(sent) => sent.map_err(|e: ProbeError| e.to_string()),
        Err(_) => Err(format!("left its feed unread for {:?}", limits.send_timeout)),
    }
}
