//! The frames processes exchange about their liveness: a little-endian `u32` length, then a
//! bincode [`Frame`] of at most [`MAX_FRAME`] bytes. A reader keeps partial frames across
//! read timeouts, so that a slow peer's frame is never cut in two.

use std::io::{self, Read, Write};

use bincode::Options;
use serde::{Deserialize, Serialize};

use super::secret::{Nonce, Proof};

/// The largest frame body a reader takes: every frame is a few bytes; anything longer is
/// not from a megaflux process.
pub const MAX_FRAME: usize = 4096;

/// What one process tells another.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Frame {
    /// The coordinator's first frame on every connection: the nonce the member's proof of
    /// the cluster's secret covers.
    Challenge {
        /// The coordinator's nonce for this connection.
        nonce: Nonce,
    },
    /// A member's first frame: who it is, in which job, and its proof of the secret.
    Hello {
        /// The job's settings ([`super::Settings`]): a member whose differ is refused.
        job: super::Settings,
        /// The member's process index (`-p`).
        process: u32,
        /// The number of processes it was started with (`-n`).
        processes: u32,
        /// The member's nonce, which the coordinator's [`Frame::Welcome`] covers.
        nonce: Nonce,
        /// Its proof ([`super::proofs::hello`]).
        proof: Proof,
    },
    /// A member's first frame when it takes a lost process's place in a running job
    /// (`--join`): who it is, in which job, and its proof of the secret.
    Join {
        /// The job's settings.
        job: super::Settings,
        /// The process index it takes again (`-p`).
        process: u32,
        /// The number of processes it was started with (`-n`).
        processes: u32,
        /// The member's nonce, which the coordinator's [`Frame::Welcome`] covers.
        nonce: Nonce,
        /// Its proof ([`super::proofs::hello`]).
        proof: Proof,
    },
    /// The coordinator's answer to a hello or join that proved the secret: its own proof
    /// ([`super::proofs::welcome`]). A member trusts no other frame before it.
    Welcome {
        /// The coordinator's proof.
        proof: Proof,
    },
    /// The sender is alive.
    Beat,
    /// A worker of the sender's process failed without the driver knowing (its operators
    /// stopped at an armed fail point, say).
    Failed {
        /// The failed worker's index.
        worker: u32,
    },
    /// The sender's run ended normally: its connection closing next is not a loss.
    Bye,
    /// The coordinator refuses the member, and says why.
    Refused {
        /// Why.
        reason: String,
    },
    /// The coordinator's committed frontier moved: every output before `time` is written for
    /// good (members drop the outputs they kept for a restart before it).
    Committed {
        /// The committed frontier.
        time: u64,
    },
    /// The coordinator orders a restart among the survivors of a crash ([`super::Restart`]).
    Restart {
        /// The generation the survivors start.
        generation: u32,
        /// The processes that take part, by their index at the job's start, in order.
        survivors: Vec<u32>,
        /// The committed frontier the new computation starts from.
        committed: u64,
        /// The nanoseconds since the job's measured run began, on process 0, when it sent
        /// the order: a process that joins takes the job's clock from it.
        clock_ns: u64,
        /// The run's last measured epoch, if process 0 had fixed it.
        end: Option<u64>,
    },
}

/// What is wrong with bytes that came in as a frame.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// A length past [`MAX_FRAME`].
    #[error("a frame of {0} bytes (at most {MAX_FRAME}): not a megaflux process")]
    TooLong(usize),
    /// A body that is no frame.
    #[error("a frame that does not decode ({0}): not a megaflux process")]
    Garbled(String),
}

/// The frames' bincode settings; the limit bounds what a garbled length inside a body (a
/// string's, say) can make a reader allocate.
fn codec() -> impl Options {
    bincode::options()
        .with_fixint_encoding()
        .with_limit(MAX_FRAME as u64)
}

/// Writes `frame`, length first.
pub fn write_frame(out: &mut impl Write, frame: &Frame) -> io::Result<()> {
    let body = codec()
        .serialize(frame)
        .map_err(|e| io::Error::other(e.to_string()))?;
    let mut bytes = Vec::with_capacity(4 + body.len());
    bytes.extend_from_slice(&(body.len() as u32).to_le_bytes());
    bytes.extend_from_slice(&body);
    out.write_all(&bytes)?;
    out.flush()
}

/// Frames from a stream, with what came of a partial frame kept between reads.
#[derive(Default)]
pub struct FrameReader {
    buffer: Vec<u8>,
}

/// What one read gave.
#[derive(Debug)]
pub enum Read1 {
    /// Whole frames that arrived (perhaps none, when the read timed out).
    Frames(Vec<Frame>),
    /// The peer closed the connection.
    Closed,
}

impl FrameReader {
    /// Reads once from `from` (which has a read timeout) and returns the whole frames so far.
    /// A timeout is not an error: it returns no frames.
    pub fn read(&mut self, from: &mut impl Read) -> Result<Read1, ReadError> {
        let mut chunk = [0u8; 1024];
        match from.read(&mut chunk) {
            Ok(0) => return Ok(Read1::Closed),
            Ok(n) => self.buffer.extend_from_slice(&chunk[..n]),
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(ReadError::Io(e)),
        }
        let mut frames = Vec::new();
        while let Some(head) = self.buffer.get(..4) {
            let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
            if len > MAX_FRAME {
                return Err(ReadError::Frame(FrameError::TooLong(len)));
            }
            let Some(body) = self.buffer.get(4..4 + len) else {
                break;
            };
            let frame = codec()
                .deserialize(body)
                .map_err(|e| ReadError::Frame(FrameError::Garbled(e.to_string())))?;
            frames.push(frame);
            self.buffer.drain(..4 + len);
        }
        Ok(Read1::Frames(frames))
    }
}

/// Why a connection's frames stopped.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The connection failed.
    #[error("{0}")]
    Io(io::Error),
    /// The bytes are no frames.
    #[error(transparent)]
    Frame(FrameError),
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A stream that hands out its bytes in the given pieces, then times out for ever.
    struct Pieces(Vec<Vec<u8>>);

    impl Read for Pieces {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.0.is_empty() {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let piece = self.0.remove(0);
            let n = piece.len().min(buf.len());
            buf[..n].copy_from_slice(&piece[..n]);
            if n < piece.len() {
                self.0.insert(0, piece[n..].to_vec());
            }
            Ok(n)
        }
    }

    fn frames() -> Vec<Frame> {
        vec![
            Frame::Challenge { nonce: [7; 16] },
            Frame::Hello {
                job: super::super::Settings::new().with("--rate", 7),
                process: 2,
                processes: 3,
                nonce: [1; 16],
                proof: [2; 32],
            },
            Frame::Welcome { proof: [3; 32] },
            Frame::Beat,
            Frame::Join {
                job: super::super::Settings::new().with("--rate", 7),
                process: 1,
                processes: 3,
                nonce: [4; 16],
                proof: [5; 32],
            },
            Frame::Restart {
                generation: 2,
                survivors: vec![0, 2],
                committed: 40,
                clock_ns: 9,
                end: Some(3_000),
            },
            Frame::Failed { worker: 5 },
            Frame::Refused {
                reason: "another job".into(),
            },
            Frame::Bye,
        ]
    }

    proptest! {
        /// Frames cut anywhere come out whole and in order.
        #[test]
        fn frames_survive_any_cuts(cuts in proptest::collection::vec(1usize..9, 0..40)) {
            let mut bytes = Vec::new();
            for f in frames() {
                write_frame(&mut bytes, &f).unwrap();
            }
            let mut pieces = Vec::new();
            let mut rest = bytes.as_slice();
            for c in cuts {
                let c = c.min(rest.len());
                pieces.push(rest[..c].to_vec());
                rest = &rest[c..];
            }
            pieces.push(rest.to_vec());
            let mut from = Pieces(pieces);
            let mut reader = FrameReader::default();
            let mut got = Vec::new();
            for _ in 0..200 {
                match reader.read(&mut from).unwrap() {
                    Read1::Frames(f) => got.extend(f),
                    Read1::Closed => break,
                }
            }
            prop_assert_eq!(got, frames());
        }

        /// Arbitrary bytes give frames or an error, never a panic or a huge allocation.
        #[test]
        fn garbage_is_an_error_not_a_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let mut from = Pieces(vec![bytes]);
            let mut reader = FrameReader::default();
            let _ = reader.read(&mut from);
        }
    }

    #[test]
    fn a_long_length_is_refused_before_its_body_arrives() {
        let mut from = Pieces(vec![u32::MAX.to_le_bytes().to_vec()]);
        let err = FrameReader::default().read(&mut from).unwrap_err();
        assert!(err.to_string().contains("not a megaflux process"), "{err}");
    }
}
