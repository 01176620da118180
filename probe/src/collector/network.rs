//! The listener and one task per connection: the handshake under the pre-hello limits,
//! then an exporter's events (checked by its [`Speaker`]) or a subscriber's feed and
//! commands (checked for token and rate before the collector loop sees them).
//!
//! A connection costs at most [`Limits::hello_bytes`] and [`Limits::hello_timeout`] until
//! it is welcomed, and at most [`Limits::pending`] connections wait for that at once: the
//! rest are closed at once and counted. An error closes that connection only.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot};

use super::gate::Gate;
use super::lifecycle::Inbox;
use super::limits::{Limits, Rate, short};
use super::speaker::{JobShape, Speaker};
use crate::error::ProbeError;
use crate::event::Outcome;
use crate::model::JobModel;
use crate::wire::{ClientFrame, Connection, MAX_FRAME_BYTES, PROTOCOL_VERSION, Role, ServerFrame};

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
}

/// Accepts connections until the collector stops.
pub(super) async fn accept(listener: Listener) {
    let waiting = Arc::new(Semaphore::new(listener.limits.pending));
    let shared = Arc::new(listener);
    loop {
        match shared.listener.accept().await {
            Ok((stream, peer)) => {
                let Ok(permit) = Arc::clone(&waiting).try_acquire_owned() else {
                    // Dropping the stream closes it: nothing is read, nothing is kept.
                    shared.turned_away.fetch_add(1, Ordering::Relaxed);
                    continue;
                };
                let shared = Arc::clone(&shared);
                tokio::spawn(async move {
                    if let Err(reason) = serve(stream, &shared, permit).await {
                        let _ = shared
                            .inbox
                            .send(Inbox::Closed(format!("{peer}: {reason}")))
                            .await;
                    }
                });
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
    Exporter(Speaker),
    Subscriber { model: Box<JobModel>, feed: Feed },
}

/// One connection, from hello to close. An error is the reason it was closed.
async fn serve(stream: TcpStream, shared: &Listener, permit: OwnedSemaphorePermit) -> Result<(), String> {
    let limits = &shared.limits;
    let mut conn = Connection::with_limit(stream, limits.hello_bytes);
    let hello = match tokio::time::timeout(limits.hello_timeout, conn.recv::<ClientFrame>()).await {
        Err(_) => return Err(format!("no hello within {:?}", limits.hello_timeout)),
        Ok(hello) => hello.map_err(|e| e.to_string()),
    };
    let admitted = match admit(hello, shared).await {
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
            Admitted::Exporter(_) => None,
        },
    };
    let welcomed = match tokio::time::timeout(limits.hello_timeout, conn.send(&welcome)).await {
        Ok(sent) => sent.map_err(|e| e.to_string()),
        Err(_) => Err(format!(
            "did not take its welcome within {:?}",
            limits.hello_timeout
        )),
    };
    drop(permit);
    match admitted {
        Admitted::Exporter(speaker) => {
            let process = speaker.process();
            let result = match welcomed {
                Ok(()) => {
                    conn.set_limit(MAX_FRAME_BYTES);
                    exporter(&mut conn, &shared.inbox, speaker).await
                }
                Err(reason) => Err(reason),
            };
            let _ = shared.inbox.send(Inbox::ExporterLeft(process)).await;
            result
        }
        Admitted::Subscriber { model, feed } => {
            let id = feed.id;
            let result = match welcomed {
                Ok(()) => {
                    conn.set_limit(limits.command_bytes);
                    subscriber(&mut conn, shared, model, feed).await
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
    let holds_token = shared.gate.holds(presented.as_deref());
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
            let (reply, answer) = oneshot::channel();
            let _ = shared.inbox.send(Inbox::ExporterJoined { process, reply }).await;
            answer
                .await
                .map_err(|_| "the collector is stopping".to_string())??;
            Ok(Some(Admitted::Exporter(speaker)))
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
            let (id, model) = answer
                .await
                .map_err(|_| "the collector is stopping".to_string())??;
            let feed = Feed {
                id,
                frames,
                queued,
                holds_token,
            };
            Ok(Some(Admitted::Subscriber { model, feed }))
        }
    }
}

async fn exporter(
    conn: &mut Connection<TcpStream>,
    inbox: &mpsc::Sender<Inbox>,
    mut speaker: Speaker,
) -> Result<(), String> {
    loop {
        match conn.recv::<ClientFrame>().await.map_err(|e| e.to_string())? {
            None => return Ok(()),
            Some(ClientFrame::Events { events }) => {
                for event in &events {
                    speaker.check(event)?;
                }
                if inbox.send(Inbox::Events(events)).await.is_err() {
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
    frames: mpsc::UnboundedReceiver<ServerFrame>,
    /// Events queued in `frames` (the collector stops queueing past its bound).
    queued: Arc<AtomicUsize>,
    holds_token: bool,
}

async fn subscriber(
    conn: &mut Connection<TcpStream>,
    shared: &Listener,
    model: Box<JobModel>,
    mut feed: Feed,
) -> Result<(), String> {
    let limits = &shared.limits;
    for frame in crate::wire::snapshot_frames(model).map_err(|e| e.to_string())? {
        send(conn, &frame, limits).await?;
    }
    let mut rate = Rate::new(limits.commands_burst, limits.commands_per_s);
    loop {
        tokio::select! {
            frame = feed.frames.recv() => match frame {
                Some(frame) => {
                    send(conn, &frame, limits).await?;
                    let events = match &frame {
                        ServerFrame::Events { events } => events.len(),
                        _ => 1,
                    };
                    feed.queued.fetch_sub(events, Ordering::Relaxed);
                }
                None => return Ok(()),
            },
            incoming = conn.recv::<ClientFrame>() => match incoming.map_err(|e| e.to_string())? {
                None => return Ok(()),
                Some(ClientFrame::Command { request, command }) => {
                    // Refused here, before the collector logs anything about it.
                    let refused = if !feed.holds_token {
                        Some("commands need the collector's token".to_string())
                    } else if !rate.take() {
                        Some(format!(
                            "too many commands: at most {} at once and {} a second",
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
    match tokio::time::timeout(limits.send_timeout, conn.send(frame)).await {
        Ok(sent) => sent.map_err(|e: ProbeError| e.to_string()),
        Err(_) => Err(format!("left its feed unread for {:?}", limits.send_timeout)),
    }
}
