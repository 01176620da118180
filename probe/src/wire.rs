//! The collector's TCP protocol.
//!
//! Frames are length-delimited (a 4-byte big-endian length, then that many bytes of JSON),
//! at most [`MAX_FRAME_BYTES`]. A connection opens with the client's [`ClientFrame::Hello`]
//! naming the protocol version and its role; the collector answers
//! [`ServerFrame::Welcome`] or [`ServerFrame::Refused`] (and closes). After that an exporter
//! sends events; a subscriber receives a snapshot of the job, then every event, and may
//! send commands, each answered once. A malformed, oversized or unexpected frame closes
//! that connection only.

use std::time::Duration;

use futures::StreamExt;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio_util::bytes::{Buf, Bytes, buf::Chain};
use tokio_util::codec::{FramedRead, LengthDelimitedCodec};

use megaflux::ConfigError;
use megaflux::control::Command;

use crate::error::ProbeError;
use crate::event::{Outcome, Stamped};
use crate::model::JobModel;

/// Version of this protocol.
pub const PROTOCOL_VERSION: u32 = 2;
/// The largest frame either side accepts (a snapshot of 2^16 bins fits).
pub const MAX_FRAME_BYTES: usize = 16 << 20;
/// Environment variable holding the token for commands, when `--token` is not given.
pub const TOKEN_ENV: &str = "MEGAFLUX_TOKEN";

/// What a client is.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Role {
    /// A process of the job sending its events.
    Exporter {
        /// The timely process it speaks for.
        process: u32,
    },
    /// A viewer: gets the events, may send commands.
    Subscriber,
}

/// A command a subscriber asks for.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "snake_case")]
pub enum CommandRequest {
    /// Move these bins' primaries (or, with `standby`, their standbys) to this worker in
    /// one step.
    MoveBins {
        /// The bins to move, each below the job's `bins`: written `0-3,7`, read either so
        /// or as a list of numbers.
        #[serde(with = "megaflux::bins::compact")]
        bins: Vec<usize>,
        /// Where they go: the worker's index in the whole job.
        worker: usize,
        /// Move the bins' standbys instead of their primaries.
        #[serde(default)]
        standby: bool,
    },
    /// Start a plan: `schedule` as in `--migrate` (`fluid`, `batched:8+pipelined`, ...),
    /// `target` as well (`uniform`, `pack:1`, `drain:0`, `map:...`).
    StartPlan {
        /// The schedule, as `--migrate` spells it (`fluid`, `batched:8+pipelined`, ...).
        schedule: String,
        /// The placement to move to, as `--migrate` spells it (`uniform`, `pack:1`, ...).
        target: String,
    },
    /// Drop the running plan's steps not issued yet.
    CancelPlan,
    /// Pause (`false`) or resume (`true`) writing the trace; the collector answers itself.
    Record {
        /// `true` to resume, `false` to pause.
        on: bool,
    },
    /// Fail-stop a worker's partitions now.
    Fail {
        /// The worker to fail, by its index in the whole job.
        worker: usize,
    },
    /// A failed worker serves again, empty.
    Rejoin {
        /// The failed worker to bring back, by its index in the whole job.
        worker: usize,
    },
    /// What the balancer does from now on: `off`, `suggest` or `auto`.
    Balance {
        /// The mode, as `--balance` spells it.
        mode: String,
    },
    /// Pin bins where they are (`pinned: false` frees them): no placement by load moves
    /// them.
    Pin {
        /// The bins, each below the job's `bins`, written as for `move_bins`.
        #[serde(with = "megaflux::bins::compact")]
        bins: Vec<usize>,
        /// Pin (the default), or free.
        #[serde(default = "yes")]
        pinned: bool,
    },
    /// Exclude a worker from placements by load (`excluded: false` includes it again).
    Exclude {
        /// The worker, by its index in the whole job.
        worker: usize,
        /// Exclude (the default), or include.
        #[serde(default = "yes")]
        excluded: bool,
    },
}

fn yes() -> bool {
    true
}

impl CommandRequest {
    /// The request said for people, in bounded length whatever its size (`move bins 1-3
    /// to worker 2`, `fluid plan to pack:1`).
    pub fn describe(&self) -> String {
        match self {
            CommandRequest::Record { on: true } => "resume recording".into(),
            CommandRequest::Record { on: false } => "pause recording".into(),
            CommandRequest::StartPlan { schedule, target } => {
                let cut = |s: &str| megaflux::bins::cut(s, megaflux::control::DESCRIBED_TARGET);
                format!("{} plan to {}", cut(schedule), cut(target))
            }
            CommandRequest::MoveBins {
                bins,
                worker,
                standby,
            } => Command::MoveBins {
                bins: bins.clone(),
                worker: *worker,
                standby: *standby,
            }
            .describe(),
            CommandRequest::CancelPlan => Command::CancelPlan.describe(),
            CommandRequest::Fail { worker } => Command::Fail { worker: *worker }.describe(),
            CommandRequest::Rejoin { worker } => Command::Rejoin { worker: *worker }.describe(),
            CommandRequest::Balance { mode } => {
                format!(
                    "balance {}",
                    megaflux::bins::cut(mode, megaflux::control::DESCRIBED_TARGET)
                )
            }
            CommandRequest::Pin { bins, pinned } => Command::Pin {
                bins: bins.clone(),
                pinned: *pinned,
            }
            .describe(),
            CommandRequest::Exclude { worker, excluded } => Command::Exclude {
                worker: *worker,
                excluded: *excluded,
            }
            .describe(),
        }
    }

    /// The job's command this asks for (the job checks bins and workers itself); `Record`
    /// is the collector's, and a schedule or target that does not parse is refused.
    pub fn to_command(&self) -> Result<Command, String> {
        Ok(match self.clone() {
            CommandRequest::MoveBins {
                bins,
                worker,
                standby,
            } => Command::MoveBins {
                bins,
                worker,
                standby,
            },
            CommandRequest::StartPlan { schedule, target } => Command::StartPlan {
                schedule: schedule.parse().map_err(|e: ConfigError| e.to_string())?,
                target: target.parse().map_err(|e: ConfigError| e.to_string())?,
            },
            CommandRequest::CancelPlan => Command::CancelPlan,
            CommandRequest::Record { .. } => return Err("recording is the collector's, not the job's".into()),
            CommandRequest::Fail { worker } => Command::Fail { worker },
            CommandRequest::Rejoin { worker } => Command::Rejoin { worker },
            CommandRequest::Balance { mode } => Command::Balance {
                mode: mode.parse().map_err(|e: ConfigError| e.to_string())?,
            },
            CommandRequest::Pin { bins, pinned } => Command::Pin { bins, pinned },
            CommandRequest::Exclude { worker, excluded } => Command::Exclude { worker, excluded },
        })
    }
}

/// Client to collector.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ClientFrame {
    /// The first frame of every connection; nothing else is taken before it is welcomed.
    Hello {
        /// The client's [`PROTOCOL_VERSION`]; the collector refuses another.
        protocol: u32,
        /// What the client is.
        #[serde(flatten)]
        role: Role,
        /// The collector's token, if the client holds it: exporters, commands, and every
        /// client on an address other than loopback need it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        token: Option<String>,
    },
    /// An exporter's events, in the order its process emitted them.
    Events {
        /// The events, stamped on the exporting process's clock.
        events: Vec<Stamped>,
    },
    /// A subscriber's command, answered once with a [`ServerFrame::Answer`].
    Command {
        /// The subscriber's number for the command, which the answer repeats.
        request: u64,
        /// What it asks for.
        command: CommandRequest,
    },
}

/// Collector to client. Adjacently tagged (`{"type": ..., "data": ...}`): the snapshot's
/// maps have integer keys, which an internally tagged enum cannot read back.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "data", rename_all = "snake_case")]
pub enum ServerFrame {
    /// The hello was accepted.
    Welcome {
        /// The collector's [`PROTOCOL_VERSION`].
        protocol: u32,
        /// A subscriber's number: the collector's `dropped` events name its place
        /// `subscriber N`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        subscriber: Option<u64>,
    },
    /// The hello was refused; the collector closes the connection after it.
    Refused {
        /// Why, for the client to report.
        reason: String,
    },
    /// The job as the collector knows it, sent once to a new subscriber.
    Snapshot {
        /// The collector's model at the time of the subscription.
        model: Box<JobModel>,
    },
    /// A snapshot too big for one frame, in parts: the JSON of the model, cut in `parts`
    /// pieces sent in order ([`Subscription`] puts them together).
    SnapshotPart {
        /// This piece's place, from 0.
        part: u32,
        /// How many pieces there are.
        parts: u32,
        /// This piece of the model's JSON, cut at a character boundary.
        json: String,
    },
    /// Events for a subscriber, in the collector's order, at most
    /// [`crate::collector::FRAME_EVENTS`] a frame.
    Events {
        /// The events, each stamped on its process's clock.
        events: Vec<Stamped>,
    },
    /// The answer to command `request`.
    Answer {
        /// The subscriber's number for the command, from its [`ClientFrame::Command`].
        request: u64,
        /// `applied` or `rejected` (never `received`).
        outcome: Outcome,
        /// Why it was rejected.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
}

/// A framed connection. Reading and writing have their own frame limits: a collector reads
/// little from a client it does not trust yet, and still sends it whole snapshots.
///
/// A frame is written from its own bytes, not copied into a buffer of the connection's: a
/// frame shared by every subscriber stays one copy however many of them are slow to take
/// it, and a connection keeps no buffer the size of the largest frame it ever sent.
pub struct Connection<T> {
    reader: FramedRead<ReadHalf<T>, LengthDelimitedCodec>,
    writer: WriteHalf<T>,
    /// What a send cut short (by a timeout) left unwritten: the next send writes it first,
    /// so the peer never sees half a frame followed by another.
    unsent: Option<Chain<std::io::Cursor<[u8; 4]>, Bytes>>,
}

fn codec(max: usize) -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder().max_frame_length(max).new_codec()
}

impl<T: AsyncRead + AsyncWrite + Unpin> Connection<T> {
    /// A connection over `io` that reads frames of up to [`MAX_FRAME_BYTES`].
    pub fn new(io: T) -> Self {
        Self::with_limit(io, MAX_FRAME_BYTES)
    }

    /// A connection that reads frames of at most `max` bytes (a longer one is an error
    /// before any of it is buffered).
    pub fn with_limit(io: T, max: usize) -> Self {
        let (read, write) = tokio::io::split(io);
        Connection {
            reader: FramedRead::new(read, codec(max)),
            writer: write,
            unsent: None,
        }
    }

    /// Changes the largest frame it reads (as a client is trusted more).
    pub fn set_limit(&mut self, max: usize) {
        self.reader.decoder_mut().set_max_frame_length(max);
    }

    /// Sends one frame.
    pub async fn send<F: Serialize>(&mut self, frame: &F) -> Result<(), ProbeError> {
        self.send_encoded(encode(frame)?).await
    }

    /// Sends a frame [`encode`]d before (once, for every subscriber that gets it).
    pub async fn send_encoded(&mut self, frame: Bytes) -> Result<(), ProbeError> {
        let len = u32::try_from(frame.len())
            .ok()
            .filter(|n| *n as usize <= MAX_FRAME_BYTES)
            .ok_or_else(|| {
                ProbeError::Protocol(format!(
                    "frame of {} bytes is over the limit of {MAX_FRAME_BYTES}",
                    frame.len()
                ))
            })?;
        self.write_unsent().await?;
        self.unsent = Some(std::io::Cursor::new(len.to_be_bytes()).chain(frame));
        self.write_unsent().await
    }

    /// Writes what is left of the last frame (cancel-safe: `unsent` keeps what was not
    /// written yet).
    async fn write_unsent(&mut self) -> Result<(), ProbeError> {
        if let Some(unsent) = self.unsent.as_mut() {
            let written = async {
                self.writer.write_all_buf(unsent).await?;
                self.writer.flush().await
            };
            written.await.map_err(|e| ProbeError::io("sending a frame", e))?;
            self.unsent = None;
        }
        Ok(())
    }

    /// Receives one frame and its size in bytes; `Ok(None)` when the peer closed the
    /// connection.
    pub async fn recv_sized<F: DeserializeOwned>(&mut self) -> Result<Option<(F, usize)>, ProbeError> {
        use std::io::ErrorKind::{BrokenPipe, ConnectionAborted, ConnectionReset};
        match self.reader.next().await {
            None => Ok(None),
            Some(Err(e)) if matches!(e.kind(), ConnectionReset | ConnectionAborted | BrokenPipe) => Ok(None),
            Some(Err(e)) => Err(ProbeError::Protocol(format!("bad frame: {e}"))),
            Some(Ok(bytes)) => serde_json::from_slice(&bytes)
                .map(|frame| Some((frame, bytes.len())))
                .map_err(|e| ProbeError::Protocol(format!("malformed frame: {e}"))),
        }
    }

    /// Receives one frame; `Ok(None)` when the peer closed the connection.
    ///
    /// A peer that went away abruptly (a reset) has closed the connection too: that is no
    /// protocol error.
    pub async fn recv<F: DeserializeOwned>(&mut self) -> Result<Option<F>, ProbeError> {
        Ok(self.recv_sized().await?.map(|(frame, _)| frame))
    }
}

/// `frame` as it goes on the wire (without the length), checked against
/// [`MAX_FRAME_BYTES`]. The bytes are shared: cloning them copies nothing.
pub fn encode<F: Serialize>(frame: &F) -> Result<Bytes, ProbeError> {
    let bytes =
        serde_json::to_vec(frame).map_err(|e| ProbeError::Protocol(format!("encoding a frame: {e}")))?;
    if bytes.len() > MAX_FRAME_BYTES {
        return Err(ProbeError::Protocol(format!(
            "frame of {} bytes is over the limit of {MAX_FRAME_BYTES}",
            bytes.len()
        )));
    }
    Ok(Bytes::from(bytes))
}

/// [`ServerFrame::Events`] frames carrying `events` in order, each encoded once: at most
/// `max_events` events and `max_bytes` bytes a frame. An event bigger than `max_bytes` on
/// its own cannot be sent and is left out: the second value counts those.
pub fn event_frames(events: &[Stamped], max_events: usize, max_bytes: usize) -> (Vec<EventFrame>, u64) {
    const HEAD: &[u8] = br#"{"type":"events","data":{"events":["#;
    const TAIL: &[u8] = b"]}}";
    let mut frames = Vec::new();
    let mut left_out = 0;
    let mut frame = Vec::new();
    let mut count = 0;
    let close = |frame: &mut Vec<u8>, count: &mut usize, frames: &mut Vec<EventFrame>| {
        if *count > 0 {
            frame.extend_from_slice(TAIL);
            frames.push(EventFrame {
                bytes: Bytes::from(std::mem::take(frame)),
                events: std::mem::take(count),
            });
        }
    };
    for event in events {
        let Ok(one) = serde_json::to_vec(event) else {
            left_out += 1;
            continue;
        };
        if HEAD.len() + one.len() + TAIL.len() > max_bytes {
            left_out += 1;
            continue;
        }
        if count > 0 && (count >= max_events || frame.len() + 1 + one.len() + TAIL.len() > max_bytes) {
            close(&mut frame, &mut count, &mut frames);
        }
        if count == 0 {
            frame.extend_from_slice(HEAD);
        } else {
            frame.push(b',');
        }
        frame.extend_from_slice(&one);
        count += 1;
    }
    close(&mut frame, &mut count, &mut frames);
    (frames, left_out)
}

/// An encoded [`ServerFrame::Events`] and how many events it carries.
#[derive(Clone, Debug)]
pub struct EventFrame {
    /// The frame as it goes on the wire.
    pub bytes: Bytes,
    /// Events in it.
    pub events: usize,
}

/// Says hello on a fresh connection to the collector at `addr` and checks the welcome;
/// returns the subscriber's number, if the collector gave one.
pub async fn handshake<T: AsyncRead + AsyncWrite + Unpin>(
    conn: &mut Connection<T>,
    addr: std::net::SocketAddr,
    role: Role,
    token: Option<String>,
) -> Result<Option<u64>, ProbeError> {
    conn.send(&ClientFrame::Hello {
        protocol: PROTOCOL_VERSION,
        role,
        token,
    })
    .await?;
    match conn.recv::<ServerFrame>().await? {
        Some(ServerFrame::Welcome { subscriber, .. }) => Ok(subscriber),
        Some(ServerFrame::Refused { reason }) => Err(ProbeError::Protocol(format!(
            "the collector at {addr} refused: {reason}"
        ))),
        _ => Err(ProbeError::Protocol(format!(
            "the collector at {addr} did not answer the hello"
        ))),
    }
}

/// How long connecting to a collector may take, and then its answer to the hello.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the collector may take to answer the hello, once connected.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// Connects to the collector at `addr` as `role`, within [`CONNECT_TIMEOUT`] and
/// [`HANDSHAKE_TIMEOUT`]; every error names the address. Returns the connection and the
/// subscriber's number the collector gave, if any.
pub async fn connect(
    addr: std::net::SocketAddr,
    role: Role,
    token: Option<String>,
) -> Result<(Connection<tokio::net::TcpStream>, Option<u64>), ProbeError> {
    let context = || format!("connecting to the collector at {addr}");
    let stream = match tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::TcpStream::connect(addr)).await {
        Ok(stream) => stream.map_err(|e| ProbeError::io(context(), e))?,
        Err(_) => {
            return Err(ProbeError::Protocol(format!(
                "{}: no answer within {CONNECT_TIMEOUT:?}",
                context()
            )));
        }
    };
    let mut conn = Connection::new(stream);
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake(&mut conn, addr, role, token)).await {
        Ok(shaken) => shaken.map(|id| (conn, id)).map_err(|e| match e {
            ProbeError::Io { cause, .. } => ProbeError::io(context(), cause),
            e => e,
        }),
        Err(_) => Err(ProbeError::Protocol(format!(
            "the collector at {addr} did not answer the hello within {HANDSHAKE_TIMEOUT:?}"
        ))),
    }
}

/// Opens a subscription to the collector at `addr`.
pub async fn subscribe(
    addr: std::net::SocketAddr,
    token: Option<String>,
) -> Result<Subscription, ProbeError> {
    let (conn, id) = connect(addr, Role::Subscriber, token).await?;
    let mut subscription = Subscription::new(conn);
    subscription.id = id;
    Ok(subscription)
}

/// Largest snapshot sent whole; a bigger one goes in parts of this size.
pub const SNAPSHOT_PART_BYTES: usize = 4 << 20;
/// Largest snapshot a subscriber puts together from parts.
pub const MAX_SNAPSHOT_BYTES: usize = 512 << 20;

/// The frames that carry `model` to a new subscriber, encoded: one snapshot, or its parts
/// when it would not fit one frame. The model is serialized once, and not copied first.
pub fn snapshot_frames(model: &JobModel) -> Result<Vec<Bytes>, ProbeError> {
    let json = serde_json::to_string(model).map_err(|e| ProbeError::Protocol(format!("a snapshot: {e}")))?;
    if json.len() <= SNAPSHOT_PART_BYTES {
        // `ServerFrame::Snapshot` as serde writes it, around the model's JSON.
        const HEAD: &str = r#"{"type":"snapshot","data":{"model":"#;
        let mut frame = String::with_capacity(HEAD.len() + json.len() + 2);
        frame.push_str(HEAD);
        frame.push_str(&json);
        frame.push_str("}}");
        return Ok(vec![Bytes::from(frame)]);
    }
    let mut pieces = Vec::new();
    let mut rest = json.as_str();
    while !rest.is_empty() {
        let mut end = SNAPSHOT_PART_BYTES.min(rest.len());
        while !rest.is_char_boundary(end) {
            end -= 1;
        }
        let (piece, tail) = rest.split_at(end);
        pieces.push(piece);
        rest = tail;
    }
    let parts = pieces.len() as u32;
    pieces
        .into_iter()
        .enumerate()
        .map(|(part, json)| {
            encode(&ServerFrame::SnapshotPart {
                part: part as u32,
                parts,
                json: json.to_string(),
            })
        })
        .collect()
}

/// A subscriber's connection: frames from the collector, with a snapshot sent in parts put
/// together, and commands to it.
pub struct Subscription<T = tokio::net::TcpStream> {
    conn: Connection<T>,
    /// Its number at the collector, if the collector said.
    id: Option<u64>,
    /// The parts of a snapshot so far, and how many there are.
    parts: Option<(String, u32, u32)>,
}

impl<T: AsyncRead + AsyncWrite + Unpin> Subscription<T> {
    /// A subscription over a connection that was welcomed.
    pub fn new(conn: Connection<T>) -> Self {
        Subscription {
            conn,
            id: None,
            parts: None,
        }
    }

    /// Its number at the collector (its drops are reported as those of `subscriber N`).
    pub fn id(&self) -> Option<u64> {
        self.id
    }

    /// The next frame (a snapshot in parts comes as one [`ServerFrame::Snapshot`]); `None`
    /// when the collector closed the connection.
    pub async fn recv(&mut self) -> Result<Option<ServerFrame>, ProbeError> {
        loop {
            let frame = self.conn.recv::<ServerFrame>().await?;
            let Some(ServerFrame::SnapshotPart { part, parts, json }) = frame else {
                return Ok(frame);
            };
            let (mut text, next, total) = self.parts.take().unwrap_or((String::new(), 0, parts));
            if part != next || parts != total || text.len() + json.len() > MAX_SNAPSHOT_BYTES {
                return Err(ProbeError::Protocol(format!(
                    "snapshot part {part} of {parts} out of order (expected {next} of {total}) or over {MAX_SNAPSHOT_BYTES} bytes"
                )));
            }
            text.push_str(&json);
            if part + 1 < parts {
                self.parts = Some((text, next + 1, total));
                continue;
            }
            let model = serde_json::from_str(&text)
                .map_err(|e| ProbeError::Protocol(format!("a snapshot in parts: {e}")))?;
            return Ok(Some(ServerFrame::Snapshot { model }));
        }
    }

    /// Sends a frame (a command).
    pub async fn send(&mut self, frame: &ClientFrame) -> Result<(), ProbeError> {
        self.conn.send(frame).await
    }
}

#[cfg(test)]
mod tests {
    use megaflux::control::Command;

    use crate::event::{Event, Stamped};

    /// Events framed once read back as the frames the collector used to build, in order,
    /// none over the bounds; an event too big for any frame is left out and counted.
    #[test]
    fn event_frames_read_back_within_their_bounds() {
        let event = |i: u64, text: usize| Stamped {
            at_s: i as f64,
            process: 0,
            event: Event::Dropped {
                place: "x".repeat(text),
                count: i,
            },
        };
        let events: Vec<Stamped> = (0..100).map(|i| event(i, (i as usize * 37) % 300)).collect();
        let mut with_giant = events.clone();
        with_giant.insert(50, event(1000, 5000));
        let (frames, left_out) = super::event_frames(&with_giant, 7, 1024);
        assert_eq!(left_out, 1);
        let mut back = Vec::new();
        for frame in &frames {
            assert!(
                frame.bytes.len() <= 1024 && frame.events <= 7,
                "{}",
                frame.bytes.len()
            );
            match serde_json::from_slice(&frame.bytes).unwrap() {
                super::ServerFrame::Events { events } => {
                    assert_eq!(events.len(), frame.events);
                    back.extend(events);
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(back, events);
        assert!(super::event_frames(&[], 7, 1024).0.is_empty());
    }

    /// Core logs commands in the form subscribers send them: every command it can take
    /// reads back as a request.
    #[test]
    fn core_requests_read_back_as_wire_requests() {
        let commands = [
            Command::MoveBins {
                bins: vec![1, 5],
                worker: 2,
                standby: true,
            },
            Command::StartPlan {
                schedule: "batched:4+pipelined".parse().unwrap(),
                target: "drain:1".parse().unwrap(),
            },
            Command::CancelPlan,
            Command::Fail { worker: 3 },
            Command::Rejoin { worker: 3 },
            Command::Balance {
                mode: megaflux::balance::BalanceMode::Auto,
            },
            Command::Pin {
                bins: vec![0, 1, 2, 7],
                pinned: false,
            },
            Command::Exclude {
                worker: 2,
                excluded: true,
            },
        ];
        let expected = [
            CommandRequest::MoveBins {
                bins: vec![1, 5],
                worker: 2,
                standby: true,
            },
            CommandRequest::StartPlan {
                schedule: "batched:4+pipelined".into(),
                target: "drain:1".into(),
            },
            CommandRequest::CancelPlan,
            CommandRequest::Fail { worker: 3 },
            CommandRequest::Rejoin { worker: 3 },
            CommandRequest::Balance { mode: "auto".into() },
            CommandRequest::Pin {
                bins: vec![0, 1, 2, 7],
                pinned: false,
            },
            CommandRequest::Exclude {
                worker: 2,
                excluded: true,
            },
        ];
        assert_eq!(commands.len(), expected.len());
        for (c, e) in commands.iter().zip(expected) {
            let read: CommandRequest = serde_json::from_str(&c.request()).unwrap();
            assert_eq!(read.to_command().as_ref(), Ok(c));
            assert_eq!(read, e);
        }
    }

    #[test]
    fn the_operators_commands_read_with_their_defaults_and_a_bad_mode_is_named() {
        let pin: CommandRequest = serde_json::from_str(r#"{"command":"pin","bins":"3-5"}"#).unwrap();
        assert_eq!(
            pin.to_command(),
            Ok(Command::Pin {
                bins: vec![3, 4, 5],
                pinned: true
            })
        );
        let exclude: CommandRequest = serde_json::from_str(r#"{"command":"exclude","worker":1}"#).unwrap();
        assert_eq!(
            exclude.to_command(),
            Ok(Command::Exclude {
                worker: 1,
                excluded: true
            })
        );
        let bad: CommandRequest =
            serde_json::from_str(r#"{"command":"balance","mode":"sometimes"}"#).unwrap();
        let err = bad.to_command().unwrap_err();
        assert!(
            err.contains("sometimes") && err.contains("off, suggest or auto"),
            "{err}"
        );
    }

    use super::*;

    #[test]
    fn hello_is_flat_json() {
        let hello = ClientFrame::Hello {
            protocol: PROTOCOL_VERSION,
            role: Role::Exporter { process: 1 },
            token: None,
        };
        let json = serde_json::to_string(&hello).unwrap();
        assert_eq!(
            json,
            r#"{"type":"hello","protocol":2,"role":"exporter","process":1}"#
        );
        assert_eq!(serde_json::from_str::<ClientFrame>(&json).unwrap(), hello);
    }

    /// A send cut short (its future dropped, as by a timeout, with half the frame written)
    /// is finished by the next send: the peer reads both frames whole, in order. And a
    /// frame over the limit is refused before a byte of it is written.
    #[tokio::test]
    async fn a_send_cut_short_is_finished_before_the_next_frame() {
        let (near, far) = tokio::io::duplex(1 << 10);
        let mut writer = Connection::new(near);
        let mut reader = Connection::new(far);
        let big = encode(&vec![7u8; 64 << 10]).unwrap();
        let cut = tokio::time::timeout(Duration::from_millis(50), writer.send_encoded(big)).await;
        assert!(cut.is_err(), "the peer reads nothing yet: the send waits");
        let too_big = Bytes::from(vec![0u8; MAX_FRAME_BYTES + 1]);
        assert!(writer.send_encoded(too_big).await.is_err());
        let sending = tokio::spawn(async move {
            writer.send(&"after".to_string()).await.unwrap();
            writer
        });
        assert_eq!(reader.recv::<Vec<u8>>().await.unwrap(), Some(vec![7u8; 64 << 10]));
        assert_eq!(reader.recv::<String>().await.unwrap().as_deref(), Some("after"));
        drop(sending.await.unwrap());
    }

    /// A snapshot over the part size goes in parts and is put together whole.
    #[tokio::test]
    async fn big_snapshots_go_in_parts() {
        let mut model = JobModel::new();
        for (bin, operator) in (0..1u32 << 16).flat_map(|b| [(b, "count"), (b, "sum")]) {
            model.apply(&Stamped {
                at_s: 1.0,
                process: 0,
                event: crate::event::Event::BinSize {
                    worker: 0,
                    operator: operator.into(),
                    bin,
                    keys: u64::from(bin) * 1_000_003,
                    bytes: u64::MAX - u64::from(bin),
                    standby: false,
                },
            });
        }
        let frames = snapshot_frames(&model).unwrap();
        assert!(frames.len() > 1, "{} frames", frames.len());
        let (client, server) = tokio::io::duplex(64 << 10);
        let writer = tokio::spawn(async move {
            let mut server = Connection::new(server);
            for f in frames {
                server.send_encoded(f).await.unwrap();
            }
        });
        let mut sub = Subscription::new(Connection::new(client));
        match sub.recv().await.unwrap() {
            Some(ServerFrame::Snapshot { model: got }) => assert_eq!(*got, model),
            other => panic!("{other:?}"),
        }
        writer.await.unwrap();
    }

    #[test]
    fn snapshots_read_back() {
        let mut model = JobModel::new();
        model.apply(&Stamped {
            at_s: 1.0,
            process: 1,
            event: crate::event::Event::WorkerStats {
                outputs_total: None,
                worker: 3,
                records: 5,
                applied: None,
                busy_ns: 1,
                interval_ns: 10,
            },
        });
        let frame = ServerFrame::Snapshot {
            model: Box::new(model.clone()),
        };
        let json = serde_json::to_string(&frame).unwrap();
        assert_eq!(serde_json::from_str::<ServerFrame>(&json).unwrap(), frame);
        // The snapshot encoded around the model's JSON is the same frame.
        let encoded = super::snapshot_frames(&model).unwrap();
        assert_eq!(encoded.len(), 1);
        assert_eq!(serde_json::from_slice::<ServerFrame>(&encoded[0]).unwrap(), frame);
    }
}
