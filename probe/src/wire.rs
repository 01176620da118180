//! The collector's TCP protocol.
//!
//! Frames are length-delimited (a 4-byte big-endian length, then that many bytes of JSON),
//! at most [`MAX_FRAME_BYTES`]. A connection opens with the client's [`ClientFrame::Hello`]
//! naming the protocol version and its role; the collector answers
//! [`ServerFrame::Welcome`] or [`ServerFrame::Refused`] (and closes). After that an exporter
//! sends events; a subscriber receives a snapshot of the job, then every event, and may
//! send commands, each answered once. A malformed, oversized or unexpected frame closes
//! that connection only.

use futures::{SinkExt, StreamExt};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncWrite, ReadHalf, WriteHalf};
use tokio_util::codec::{FramedRead, FramedWrite, LengthDelimitedCodec};

use megaflux::ConfigError;
use megaflux::control::Command;

use crate::error::ProbeError;
use crate::event::{Outcome, Stamped};
use crate::model::JobModel;

/// Version of this protocol.
pub const PROTOCOL_VERSION: u32 = 1;
/// The largest frame either side accepts (a snapshot of 2^16 bins fits).
pub const MAX_FRAME_BYTES: usize = 16 << 20;
/// Environment variable holding the token for commands, when `--token` is not given.
pub const TOKEN_ENV: &str = "MEGAFLUX_TOKEN";

/// What a client is.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Role {
    /// A process of the job sending its events.
    Exporter { process: u32 },
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
        bins: Vec<usize>,
        worker: usize,
        #[serde(default)]
        standby: bool,
    },
    /// Start a plan: `schedule` as in `--migrate` (`fluid`, `batched:8+pipelined`, ...),
    /// `target` as well (`uniform`, `pack:1`, `drain:0`, `map:...`).
    StartPlan { schedule: String, target: String },
    /// Drop the running plan's steps not issued yet.
    CancelPlan,
    /// Pause (`false`) or resume (`true`) writing the trace; the collector answers itself.
    Record { on: bool },
    /// Fail-stop a worker's partitions now.
    Fail { worker: usize },
    /// A failed worker serves again, empty.
    Rejoin { worker: usize },
}

impl CommandRequest {
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
        })
    }
}

/// Client to collector.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ClientFrame {
    Hello {
        protocol: u32,
        #[serde(flatten)]
        role: Role,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        token: Option<String>,
    },
    Events {
        events: Vec<Stamped>,
    },
    Command {
        request: u64,
        command: CommandRequest,
    },
}

/// Collector to client. Adjacently tagged (`{"type": ..., "data": ...}`): the snapshot's
/// maps have integer keys, which an internally tagged enum cannot read back.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "data", rename_all = "snake_case")]
pub enum ServerFrame {
    Welcome {
        protocol: u32,
    },
    Refused {
        reason: String,
    },
    /// The job as the collector knows it, sent once to a new subscriber.
    Snapshot {
        model: Box<JobModel>,
    },
    Events {
        events: Vec<Stamped>,
    },
    /// The answer to command `request`.
    Answer {
        request: u64,
        outcome: Outcome,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
}

/// A framed connection. Reading and writing have their own frame limits: a collector reads
/// little from a client it does not trust yet, and still sends it whole snapshots.
pub struct Connection<T> {
    reader: FramedRead<ReadHalf<T>, LengthDelimitedCodec>,
    writer: FramedWrite<WriteHalf<T>, LengthDelimitedCodec>,
}

fn codec(max: usize) -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder().max_frame_length(max).new_codec()
}

impl<T: AsyncRead + AsyncWrite + Unpin> Connection<T> {
    pub fn new(io: T) -> Self {
        Self::with_limit(io, MAX_FRAME_BYTES)
    }

    /// A connection that reads frames of at most `max` bytes (a longer one is an error
    /// before any of it is buffered).
    pub fn with_limit(io: T, max: usize) -> Self {
        let (read, write) = tokio::io::split(io);
        Connection {
            reader: FramedRead::new(read, codec(max)),
            writer: FramedWrite::new(write, codec(MAX_FRAME_BYTES)),
        }
    }

    /// Changes the largest frame it reads (as a client is trusted more).
    pub fn set_limit(&mut self, max: usize) {
        self.reader.decoder_mut().set_max_frame_length(max);
    }

    /// Sends one frame.
    pub async fn send<F: Serialize>(&mut self, frame: &F) -> Result<(), ProbeError> {
        let bytes =
            serde_json::to_vec(frame).map_err(|e| ProbeError::Protocol(format!("encoding a frame: {e}")))?;
        if bytes.len() > MAX_FRAME_BYTES {
            return Err(ProbeError::Protocol(format!(
                "frame of {} bytes is over the limit of {MAX_FRAME_BYTES}",
                bytes.len()
            )));
        }
        self.writer
            .send(tokio_util::bytes::Bytes::from(bytes))
            .await
            .map_err(|e| ProbeError::io("sending a frame", e))
    }

    /// Receives one frame; `Ok(None)` when the peer closed the connection.
    pub async fn recv<F: DeserializeOwned>(&mut self) -> Result<Option<F>, ProbeError> {
        match self.reader.next().await {
            None => Ok(None),
            Some(Err(e)) => Err(ProbeError::Protocol(format!("bad frame: {e}"))),
            Some(Ok(bytes)) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| ProbeError::Protocol(format!("malformed frame: {e}"))),
        }
    }
}

/// Says hello on a fresh connection to the collector at `addr` and checks the welcome.
pub async fn handshake<T: AsyncRead + AsyncWrite + Unpin>(
    conn: &mut Connection<T>,
    addr: std::net::SocketAddr,
    role: Role,
    token: Option<String>,
) -> Result<(), ProbeError> {
    conn.send(&ClientFrame::Hello {
        protocol: PROTOCOL_VERSION,
        role,
        token,
    })
    .await?;
    match conn.recv::<ServerFrame>().await? {
        Some(ServerFrame::Welcome { .. }) => Ok(()),
        Some(ServerFrame::Refused { reason }) => Err(ProbeError::Protocol(format!(
            "the collector at {addr} refused: {reason}"
        ))),
        _ => Err(ProbeError::Protocol(format!(
            "the collector at {addr} did not answer the hello"
        ))),
    }
}

/// Opens a subscription to the collector at `addr`.
pub async fn subscribe(
    addr: std::net::SocketAddr,
    token: Option<String>,
) -> Result<Connection<tokio::net::TcpStream>, ProbeError> {
    let stream = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| ProbeError::io(format!("connecting to the collector at {addr}"), e))?;
    let mut conn = Connection::new(stream);
    handshake(&mut conn, addr, Role::Subscriber, token).await?;
    Ok(conn)
}

#[cfg(test)]
mod tests {
    use megaflux::control::Command;

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
        ];
        for (c, e) in commands.iter().zip(expected) {
            let read: CommandRequest = serde_json::from_str(&c.request()).unwrap();
            assert_eq!(read, e);
        }
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
            r#"{"type":"hello","protocol":1,"role":"exporter","process":1}"#
        );
        assert_eq!(serde_json::from_str::<ClientFrame>(&json).unwrap(), hello);
    }

    #[test]
    fn snapshots_read_back() {
        let mut model = JobModel::new();
        model.apply(&Stamped {
            at_s: 1.0,
            process: 1,
            event: crate::event::Event::WorkerStats {
                worker: 3,
                records: 5,
                busy_ns: 1,
                interval_ns: 10,
            },
        });
        let frame = ServerFrame::Snapshot {
            model: Box::new(model),
        };
        let json = serde_json::to_string(&frame).unwrap();
        assert_eq!(serde_json::from_str::<ServerFrame>(&json).unwrap(), frame);
    }
}
