//! The connections of a computation, the first as every restarted one: each process listens
//! for those after it and connects to those before it, trying again every few milliseconds
//! (timely's own cluster start tries once a second and trusts the first bytes it reads),
//! and every connection proves the cluster's secret both ways before timely runs over it.
//!
//! On a connection from process `a` to process `b` (ranks of the computation), `b` sends
//! [`MAGIC`] and a nonce; `a` answers with the generation, its rank, its nonce and its proof
//! ([`proofs::connect`]); `b` checks it and answers with its own ([`proofs::accept`]). One
//! loop drives every connection without blocking: the unproven connections to the
//! listener are few, each bounded in bytes and time ([`Unproven`]); what a stranger sends is
//! dropped without a word, and nothing it sends ends the process. The whole is bounded by
//! the caller's deadline, and given up as soon as a process is known gone.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use crate::membership::proofs;
use crate::membership::secret::{NONCE_BYTES, Nonce, PROOF_BYTES, Secret, nonce, same};
use crate::membership::strangers::{Entry, Guesses, Step, Unproven};

/// How often a process tries again to connect to another, and how long the loop sleeps
/// when nothing moved.
const RETRY: Duration = Duration::from_millis(5);
/// How long one connection attempt may take (a host that drops packets).
const CONNECT_WAIT: Duration = Duration::from_secs(1);
/// How long a connection has for its proofs, either way.
const HANDSHAKE_WAIT: Duration = Duration::from_secs(2);
/// Unproven connections to the listener, at most.
const MAX_UNPROVEN: usize = 64;
/// Connections taken from the listener per turn, at most.
const ACCEPTS_PER_TURN: usize = 16;
/// What a listener's challenge starts with: a megaflux process's timely port.
const MAGIC: [u8; 8] = *b"mflxmesh";
/// Bytes of a challenge: [`MAGIC`] and a nonce.
const CHALLENGE: usize = MAGIC.len() + NONCE_BYTES;
/// What a connection closed by its listener may mean.
const SECRET_HINT: &str = "(a process takes only connections that prove its cluster secret: give every process the same --cluster-token)";
/// Bytes of a claim: the generation, the rank, a nonce and a proof.
const CLAIM: usize = 4 + 8 + NONCE_BYTES + PROOF_BYTES;

/// Why the connections of a computation could not all be made.
#[derive(Debug, thiserror::Error)]
pub(in crate::runner::harness) enum MeshError {
    /// This process cannot listen at its address.
    #[error("cannot listen on {address}: {cause}")]
    Listen {
        /// Its address.
        address: String,
        /// The system's reason.
        cause: String,
    },
    /// Some processes did not connect, or could not be connected to, in time.
    #[error("{}", late(missing, last))]
    Late {
        /// Their ranks.
        missing: Vec<usize>,
        /// What was last seen of a connection that failed, if any did.
        last: Option<String>,
    },
    /// A process of the job went away meanwhile.
    #[error("another process went away while the cluster formed")]
    Gone,
    /// A connection failed after it was proved, or the random source did.
    #[error("{0}")]
    Io(String),
}

fn late(missing: &[usize], last: &Option<String>) -> String {
    let ranks: Vec<String> = missing.iter().map(ToString::to_string).collect();
    let mut said = format!("process {} did not connect in time", ranks.join(", "));
    if let Some(last) = last {
        said.push_str(&format!(" (last seen: {last})"));
    }
    said
}

/// Starts generation `generation` of a run among the processes at `addresses`, this one
/// at `rank`, with `workers` workers each, over connections that proved `secret`: made
/// within `wait`, given up as soon as `gone` says a process went away. Then timely runs
/// `work` over them.
pub(in crate::runner::harness) fn execute<F>(
    (addresses, generation): (&[String], u32),
    (rank, workers): (usize, usize),
    worker_config: timely::WorkerConfig,
    (wait, gone, secret): (Duration, &dyn Fn() -> bool, &Secret),
    work: F,
) -> Result<timely::communication::WorkerGuards<()>, MeshError>
where
    F: Fn(&mut timely::worker::Worker) + Send + Sync + 'static,
{
    use timely::communication::allocator::zero_copy::initialize::initialize_networking_from_sockets;
    use timely::communication::allocator::{AllocatorBuilder, ProcessBuilder};
    let sockets = Mesh::new((addresses, generation), rank, secret)?.run(wait, gone)?;
    let hooks = timely::communication::Hooks::default();
    let local = ProcessBuilder::new_typed_vector(workers, hooks.refill.clone(), hooks.spill.clone());
    let (builders, guard) = initialize_networking_from_sockets(local, sockets, rank, workers, hooks)
        .map_err(|e| MeshError::Io(e.to_string()))?;
    let builders = builders.into_iter().map(AllocatorBuilder::Tcp).collect();
    timely::execute::execute_from(builders, Box::new(guard), worker_config, work).map_err(MeshError::Io)
}

/// A connection this process makes to one before it.
enum Out {
    /// Not connected: try at this instant.
    Idle(Instant),
    /// Connected, the listener's challenge not all read yet.
    Challenged {
        stream: TcpStream,
        read: Vec<u8>,
        since: Instant,
    },
    /// The claim sent, the listener's proof not all read yet.
    Claimed {
        stream: TcpStream,
        read: Vec<u8>,
        since: Instant,
        nonces: (Nonce, Nonce),
    },
    /// Both proved.
    Done(TcpStream),
}

/// A connection to this process's listener that was sent its challenge.
struct In {
    stream: TcpStream,
    nonce: Nonce,
    read: Vec<u8>,
}

/// One computation's connections being made.
struct Mesh<'a> {
    addresses: Vec<String>,
    generation: u32,
    rank: usize,
    secret: &'a Secret,
    listener: TcpListener,
    outs: Vec<Out>,
    ins: Vec<Option<TcpStream>>,
    unproven: Unproven<In>,
    guesses: Guesses,
    last: Option<String>,
    /// Connections to the listener whose proof was wrong.
    wrong: u64,
}

impl<'a> Mesh<'a> {
    fn new(
        (addresses, generation): (&[String], u32),
        rank: usize,
        secret: &'a Secret,
    ) -> Result<Self, MeshError> {
        let first = |a: &String| a.split_whitespace().next().unwrap_or_default().to_string();
        let addresses: Vec<String> = addresses.iter().map(first).collect();
        let own = addresses.get(rank).cloned().unwrap_or_default();
        let listen = |e: std::io::Error| MeshError::Listen {
            address: own.clone(),
            cause: e.to_string(),
        };
        let listener = TcpListener::bind(&own).map_err(listen)?;
        listener.set_nonblocking(true).map_err(listen)?;
        let now = Instant::now();
        Ok(Mesh {
            generation,
            rank,
            secret,
            listener,
            outs: (0..rank).map(|_| Out::Idle(now)).collect(),
            ins: (0..addresses.len()).map(|_| None).collect(),
            addresses,
            unproven: Unproven::new(MAX_UNPROVEN, HANDSHAKE_WAIT),
            guesses: Guesses::default(),
            last: None,
            wrong: 0,
        })
    }

    /// Makes every connection within `wait`; one per other process (`None` for this one).
    fn run(mut self, wait: Duration, gone: &dyn Fn() -> bool) -> Result<Vec<Option<TcpStream>>, MeshError> {
        let deadline = Instant::now() + wait;
        loop {
            if gone() {
                return Err(MeshError::Gone);
            }
            let missing = self.missing();
            if missing.is_empty() {
                break;
            }
            if Instant::now() >= deadline {
                return Err(MeshError::Late {
                    missing,
                    last: self.last.or_else(|| {
                        (self.wrong > 0).then(|| {
                            format!(
                                "{} connection(s) to this process did not prove the cluster secret: give every process the same --cluster-token",
                                self.wrong
                            )
                        })
                    }),
                });
            }
            let moved = self.connect(deadline)? | self.accept()?;
            if !moved {
                std::thread::sleep(RETRY);
            }
        }
        let mut sockets: Vec<Option<TcpStream>> = std::mem::take(&mut self.ins);
        for (index, out) in self.outs.drain(..).enumerate() {
            if let Out::Done(stream) = out {
                sockets[index] = Some(stream);
            }
        }
        for stream in sockets.iter().flatten() {
            let io = |e: std::io::Error| MeshError::Io(e.to_string());
            stream.set_nonblocking(false).map_err(io)?;
            stream.set_read_timeout(None).map_err(io)?;
            stream.set_write_timeout(None).map_err(io)?;
            stream.set_nodelay(true).map_err(io)?;
        }
        Ok(sockets)
    }

    /// The ranks not yet connected either way.
    fn missing(&self) -> Vec<usize> {
        let out = self
            .outs
            .iter()
            .enumerate()
            .filter(|(_, o)| !matches!(o, Out::Done(_)))
            .map(|(i, _)| i);
        let ins = (self.rank + 1..self.addresses.len()).filter(|i| self.ins[*i].is_none());
        out.chain(ins).collect()
    }

    /// Moves every connection this process makes one step; whether any moved.
    fn connect(&mut self, deadline: Instant) -> Result<bool, MeshError> {
        let mut moved = false;
        for index in 0..self.outs.len() {
            let out = std::mem::replace(&mut self.outs[index], Out::Idle(Instant::now()));
            let (next, step) = self.step_out(index, out, deadline)?;
            moved |= step;
            self.outs[index] = next;
        }
        Ok(moved)
    }

    fn step_out(&mut self, to: usize, out: Out, deadline: Instant) -> Result<(Out, bool), MeshError> {
        let retry = |mesh: &mut Self, why: String| {
            mesh.last = Some(format!("{}: {why}", mesh.addresses[to]));
            (Out::Idle(Instant::now() + RETRY), true)
        };
        Ok(match out {
            Out::Idle(at) if Instant::now() < at => (Out::Idle(at), false),
            Out::Idle(_) => match self.dial(to, deadline) {
                Ok(stream) => (
                    Out::Challenged {
                        stream,
                        read: Vec::with_capacity(CHALLENGE),
                        since: Instant::now(),
                    },
                    true,
                ),
                // Not listening yet (the usual case while the cluster starts): no news.
                Err(e) if e.kind() == ErrorKind::ConnectionRefused => {
                    (Out::Idle(Instant::now() + RETRY), false)
                }
                Err(e) => retry(self, e.to_string()),
            },
            Out::Challenged {
                mut stream,
                mut read,
                since,
            } => match fill(&mut stream, &mut read, CHALLENGE) {
                Fill::More if since.elapsed() < HANDSHAKE_WAIT => {
                    (Out::Challenged { stream, read, since }, false)
                }
                Fill::More => retry(self, "it sent no challenge in time".into()),
                Fill::Closed(why) => retry(self, format!("{why} {SECRET_HINT}")),
                Fill::Full if read[..MAGIC.len()] != MAGIC => {
                    retry(self, "what listens there is not a megaflux process".into())
                }
                Fill::Full => {
                    let mut theirs = [0u8; NONCE_BYTES];
                    theirs.copy_from_slice(&read[MAGIC.len()..]);
                    let ours = nonce().map_err(|e| MeshError::Io(e.to_string()))?;
                    let ranks = (self.rank as u64, to as u64);
                    let proof = proofs::connect(self.secret, (&theirs, &ours), self.generation, ranks);
                    let mut claim = Vec::with_capacity(CLAIM);
                    claim.extend_from_slice(&self.generation.to_le_bytes());
                    claim.extend_from_slice(&(self.rank as u64).to_le_bytes());
                    claim.extend_from_slice(&ours);
                    claim.extend_from_slice(&proof);
                    // A few bytes into a fresh connection's empty buffer: never blocks.
                    match stream.write_all(&claim) {
                        Ok(()) => (
                            Out::Claimed {
                                stream,
                                read: Vec::with_capacity(PROOF_BYTES),
                                since,
                                nonces: (ours, theirs),
                            },
                            true,
                        ),
                        Err(e) => retry(self, e.to_string()),
                    }
                }
            },
            Out::Claimed {
                mut stream,
                mut read,
                since,
                nonces,
            } => match fill(&mut stream, &mut read, PROOF_BYTES) {
                Fill::More if since.elapsed() < HANDSHAKE_WAIT => (
                    Out::Claimed {
                        stream,
                        read,
                        since,
                        nonces,
                    },
                    false,
                ),
                Fill::More => retry(self, "it did not answer the proof in time".into()),
                Fill::Closed(why) => retry(
                    self,
                    format!(
                        "{why} (a process takes only connections that hold its cluster secret: give every process the same --cluster-token)"
                    ),
                ),
                Fill::Full => {
                    let ranks = (self.rank as u64, to as u64);
                    let expected =
                        proofs::accept(self.secret, (&nonces.0, &nonces.1), self.generation, ranks);
                    if same(&expected, &read) {
                        (Out::Done(stream), true)
                    } else {
                        retry(self, "what listens there did not prove the cluster secret".into())
                    }
                }
            },
            done @ Out::Done(_) => (done, false),
        })
    }

    /// A connection to process `to`, within the deadline, without blocking once made.
    fn dial(&self, to: usize, deadline: Instant) -> std::io::Result<TcpStream> {
        let address: SocketAddr = self.addresses[to]
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| std::io::Error::other("the name resolves to no address"))?;
        let left = deadline.saturating_duration_since(Instant::now());
        let stream = TcpStream::connect_timeout(&address, CONNECT_WAIT.min(left).max(RETRY))?;
        stream.set_nonblocking(true)?;
        Ok(stream)
    }

    /// Takes new connections to the listener and reads the unproven ones; whether any
    /// moved.
    fn accept(&mut self) -> Result<bool, MeshError> {
        let mut moved = false;
        for _ in 0..ACCEPTS_PER_TURN {
            let Ok((mut stream, peer)) = self.listener.accept() else {
                break;
            };
            moved = true;
            let nonce = nonce().map_err(|e| MeshError::Io(e.to_string()))?;
            let mut challenge = MAGIC.to_vec();
            challenge.extend_from_slice(&nonce);
            if stream.set_nonblocking(true).is_err() || stream.write_all(&challenge).is_err() {
                continue;
            }
            let fresh = In {
                stream,
                nonce,
                read: Vec::with_capacity(CLAIM),
            };
            if let Some(dropped) = self.unproven.push(peer.ip(), fresh) {
                let _ = dropped.stream.shutdown(Shutdown::Both);
            }
        }
        let (generation, rank, processes, secret) =
            (self.generation, self.rank, self.addresses.len(), self.secret);
        let (guesses, wrong) = (&mut self.guesses, &mut self.wrong);
        let proved = self.unproven.poll(
            |entry| read_claim(entry, (generation, rank, processes), secret, (guesses, wrong)),
            |dropped| {
                let _ = dropped.stream.shutdown(Shutdown::Both);
            },
        );
        for (from, stream) in proved {
            moved = true;
            // A later proved connection from the same process is its retry: the one before
            // was given up on its side.
            if let Some(old) = self.ins[from].replace(stream) {
                let _ = old.shutdown(Shutdown::Both);
            }
        }
        Ok(moved)
    }
}

/// Reads a challenged connection's claim without blocking: the generation, a rank after
/// this one, and a proof of the secret over both nonces, which it answers with its own.
fn read_claim(
    entry: &mut Entry<In>,
    (generation, rank, processes): (u32, usize, usize),
    secret: &Secret,
    (guesses, wrong): (&mut Guesses, &mut u64),
) -> Step<(usize, TcpStream)> {
    let c = &mut entry.item;
    match fill(&mut c.stream, &mut c.read, CLAIM) {
        Fill::More => return Step::Wait,
        Fill::Closed(_) => return Step::Drop,
        Fill::Full => {}
    }
    let word = |at: usize, n: usize| &c.read[at..at + n];
    let said_generation = u32::from_le_bytes(word(0, 4).try_into().unwrap_or_default());
    let from = u64::from_le_bytes(word(4, 8).try_into().unwrap_or_default());
    let mut theirs = [0u8; NONCE_BYTES];
    theirs.copy_from_slice(word(12, NONCE_BYTES));
    let proof = word(12 + NONCE_BYTES, PROOF_BYTES);
    let expected = proofs::connect(secret, (&c.nonce, &theirs), said_generation, (from, rank as u64));
    if !same(&expected, proof) {
        *wrong += 1;
        return guesses.wrong(entry.addr);
    }
    // Proved, but of another attempt (a process that had not given it up yet), or of a
    // place that connects the other way: not a connection of this computation.
    let from = from as usize;
    if said_generation != generation || from <= rank || from >= processes {
        return Step::Drop;
    }
    let answer = proofs::accept(
        secret,
        (&theirs, &c.nonce),
        generation,
        (from as u64, rank as u64),
    );
    match (&c.stream).write_all(&answer) {
        Ok(()) => match c.stream.try_clone() {
            Ok(stream) => Step::Proved((from, stream)),
            Err(_) => Step::Drop,
        },
        Err(_) => Step::Drop,
    }
}

/// What reading toward a fixed number of bytes gave.
enum Fill {
    /// They are all there.
    Full,
    /// Not yet.
    More,
    /// The connection closed or failed first.
    Closed(String),
}

/// Reads without blocking into `read` until it holds `want` bytes, never more.
fn fill(stream: &mut TcpStream, read: &mut Vec<u8>, want: usize) -> Fill {
    let mut chunk = [0u8; CLAIM];
    while read.len() < want {
        let room = want - read.len();
        match stream.read(&mut chunk[..room]) {
            Ok(0) => return Fill::Closed("the connection closed".into()),
            Ok(n) => read.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Fill::More,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Fill::Closed(e.to_string()),
        }
    }
    Fill::Full
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(s: &str) -> Secret {
        Secret::new(&format!("{s}: a mesh test's cluster secret")).unwrap()
    }

    fn free_addresses(n: usize) -> Vec<String> {
        let held: Vec<TcpListener> = (0..n)
            .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
            .collect();
        held.iter().map(|l| l.local_addr().unwrap().to_string()).collect()
    }

    /// Runs the mesh of every rank of `addresses` on a thread each, rank `r` with secret
    /// `secrets[r]`; what each gave.
    fn form(addresses: &[String], secrets: &[Secret], wait: Duration) -> Vec<Result<Vec<bool>, String>> {
        let ranks: Vec<_> = (0..addresses.len())
            .map(|rank| {
                let (addresses, secret) = (addresses.to_vec(), secrets[rank].clone());
                std::thread::spawn(move || {
                    let mesh = Mesh::new((&addresses, 3), rank, &secret).map_err(|e| e.to_string())?;
                    let sockets = mesh.run(wait, &|| false).map_err(|e| e.to_string())?;
                    Ok(sockets.iter().map(Option::is_some).collect())
                })
            })
            .collect();
        ranks.into_iter().map(|r| r.join().unwrap()).collect()
    }

    /// While three processes connect, strangers trickle silent connections, send 12 random
    /// bytes, and claims with a wrong proof or a wrong rank to every port: the processes
    /// connect all the same, and no stranger ends one.
    #[test]
    fn strangers_neither_stall_nor_break_the_connections() {
        let addresses = free_addresses(3);
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let attackers: Vec<_> = addresses
            .iter()
            .cloned()
            .map(|address| {
                let stop = std::sync::Arc::clone(&stop);
                std::thread::spawn(move || {
                    let mut held = Vec::new();
                    let wrong = secret("wrong");
                    while !stop.load(std::sync::atomic::Ordering::Acquire) {
                        if let Ok(mut s) = TcpStream::connect(&address) {
                            let _ = s.write_all(&[0x5a, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]);
                            held.push(s);
                        }
                        if let Ok(mut s) = TcpStream::connect(&address) {
                            let mut challenge = [0u8; CHALLENGE];
                            let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
                            if s.read_exact(&mut challenge).is_ok() {
                                let mut theirs = [0u8; NONCE_BYTES];
                                theirs.copy_from_slice(&challenge[MAGIC.len()..]);
                                let ours = [9u8; NONCE_BYTES];
                                let mut claim = 3u32.to_le_bytes().to_vec();
                                claim.extend_from_slice(&2u64.to_le_bytes());
                                claim.extend_from_slice(&ours);
                                claim.extend_from_slice(&proofs::connect(
                                    &wrong,
                                    (&theirs, &ours),
                                    3,
                                    (2, 0),
                                ));
                                let _ = s.write_all(&claim);
                            }
                            held.push(s);
                        }
                        held.extend(TcpStream::connect(&address));
                        std::thread::sleep(Duration::from_millis(5));
                    }
                })
            })
            .collect();
        let right = secret("right");
        let got = form(
            &addresses,
            &[right.clone(), right.clone(), right],
            Duration::from_secs(30),
        );
        stop.store(true, std::sync::atomic::Ordering::Release);
        for a in attackers {
            a.join().unwrap();
        }
        assert_eq!(
            got,
            vec![
                Ok(vec![false, true, true]),
                Ok(vec![true, false, true]),
                Ok(vec![true, true, false])
            ]
        );
    }

    /// A process with another secret is never connected: the others give up after their
    /// wait naming it, and it says the others did not take it.
    #[test]
    fn a_process_without_the_secret_is_not_connected() {
        let addresses = free_addresses(3);
        let right = secret("right");
        let got = form(
            &addresses,
            &[right.clone(), right, secret("wrong")],
            Duration::from_secs(3),
        );
        for listener in &got[..2] {
            let said = listener.as_ref().unwrap_err();
            assert!(
                said.starts_with("process 2 did not connect in time")
                    && said.contains("did not prove the cluster secret"),
                "{said}"
            );
        }
        let two = got[2].as_ref().unwrap_err();
        assert!(
            two.starts_with("process 0, 1 did not connect in time") && two.contains("cluster secret"),
            "{two}"
        );
    }
}
