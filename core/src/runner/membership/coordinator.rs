//! Process 0's end of membership: takes one connection from each other process, beats on
//! each, and reports the processes that fall silent, drop their connection or never come.
//! In a job that restarts after a crash, a process started again for a lost place
//! ([`Frame::Join`]) is taken in: it is reported ([`Event::Join`]) and takes part in the
//! next restart order.
//!
//! A connection is served only once it proved the cluster's secret: the coordinator sends a
//! [`Frame::Challenge`], and its first frame must be a hello or join whose proof covers that
//! challenge. Until then it is one of few [`Unproven`] connections, read without blocking
//! by the accepting thread, each for at most [`HELLO_WAIT`]; one that fails is closed
//! without a word (see [`super::strangers`]). A proved one gets a thread of its own, and is
//! answered with [`Frame::Welcome`], the coordinator's own proof, once it is admitted (or
//! just before it is told why not).

use std::collections::VecDeque;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::secret::{Nonce, Secret, nonce, same};
use super::strangers::{Entry, Guesses, Step, Unproven};
use super::wire::{Frame, FrameReader, Read1, write_frame};
use super::{Event, HEARTBEAT, MembershipError, OnEvent, Restart, proofs};

/// How long a new connection has to prove the secret.
pub(super) const HELLO_WAIT: Duration = Duration::from_secs(1);
/// Connections waiting to prove the secret, at most.
const MAX_PENDING: usize = 64;
/// Connections taken from the listener per turn, at most, so that reading those already
/// taken is never starved by a flood of new ones.
const ACCEPTS_PER_TURN: usize = 16;
/// How long the accepting thread sleeps when nothing happened in a turn.
const ACCEPT_POLL: Duration = Duration::from_millis(2);
/// How long a write to a member may block (a hung member's full socket must not stall the
/// beats to the others).
const WRITE_WAIT: Duration = Duration::from_millis(200);

/// What the coordinator knows of one process.
pub(super) enum Slot {
    /// Not connected yet.
    Waiting,
    /// Connected and heard recently.
    Live(Conn),
    /// Taken in for a lost place (`--join`), and in no restart order yet.
    Joined(Conn),
    /// Said bye: nothing more is expected of it.
    Gone,
    /// Lost from a running job: a process may join in its place.
    Lost,
}

/// A member's connection: which one (a process's place may be taken by another, whose
/// connection is another), and the stream to write to.
pub(super) struct Conn {
    pub(super) id: u64,
    pub(super) stream: TcpStream,
}

impl Slot {
    /// The connection to write to, if connected.
    fn stream(&mut self) -> Option<&mut TcpStream> {
        match self {
            Slot::Live(c) | Slot::Joined(c) => Some(&mut c.stream),
            _ => None,
        }
    }

    /// Whether news of connection `id` (of none: the process never connected) is news of
    /// whoever holds this place now.
    fn held_by(&self, id: Option<u64>) -> bool {
        match (self, id) {
            (Slot::Live(c) | Slot::Joined(c), Some(id)) => c.id == id,
            (Slot::Waiting, None) => true,
            _ => false,
        }
    }
}

pub(super) struct State {
    pub(super) job: super::Settings,
    pub(super) processes: usize,
    workers: usize,
    pub(super) slots: Mutex<Vec<Slot>>,
    /// The processes of the current computation by rank, by their index at the job's start
    /// (the last restart order's survivors): which workers each process's reports may name.
    ranks: Mutex<Vec<usize>>,
    secret: Secret,
    /// Connections whose proof of the secret was wrong, for the reason a process that never
    /// came is lost.
    wrong: AtomicU64,
    pub(super) done: AtomicBool,
    pub(super) on_event: OnEvent,
    address: String,
    /// The committed frontier members learn of with the beats, if the job can restart.
    pub(super) committed: Option<Arc<AtomicU64>>,
    /// How long a member may stay silent before it counts as lost.
    pub(super) silence: Duration,
}

/// Process 0's membership: watches the other processes until dropped or finished.
pub struct Coordinator {
    state: Arc<State>,
}

impl Coordinator {
    /// Listens at `address` for the other `processes - 1` processes of the job with settings `job` (whose
    /// processes run `workers` workers each), which must connect within `wait` and prove
    /// `secret`; a member silent for `silence` is lost. With `committed`, members hear of
    /// its moves with the beats.
    pub fn start(
        address: &str,
        (job, secret): (super::Settings, Secret),
        (processes, workers): (usize, usize),
        (wait, silence): (Duration, Duration),
        committed: Option<Arc<AtomicU64>>,
        on_event: OnEvent,
    ) -> Result<Self, MembershipError> {
        let listen = |cause: String| MembershipError::Listen {
            address: address.to_string(),
            cause,
        };
        let listener = TcpListener::bind(address).map_err(|e| listen(e.to_string()))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| listen(e.to_string()))?;
        let mut slots: Vec<Slot> = (0..processes).map(|_| Slot::Waiting).collect();
        if let Some(first) = slots.first_mut() {
            *first = Slot::Gone;
        }
        let state = Arc::new(State {
            job,
            processes,
            workers,
            slots: Mutex::new(slots),
            ranks: Mutex::new((0..processes).collect()),
            secret,
            wrong: AtomicU64::new(0),
            done: AtomicBool::new(false),
            on_event,
            address: address.to_string(),
            committed,
            silence,
        });
        let accepting = Arc::clone(&state);
        spawn("megaflux-coordinator", move || accept(&accepting, listener))?;
        let beating = Arc::clone(&state);
        spawn("megaflux-beats", move || beat(&beating, Instant::now(), wait))?;
        Ok(Coordinator { state })
    }

    /// Orders the processes still here, but for those in `lost`, to restart as generation
    /// `generation` from the committed frontier `committed`; returns the order (process 0
    /// and every live member, in order).
    /// `clock_ns` is the job's clock now, for a process that joins; `end` the run's last
    /// measured epoch, if process 0 fixed it.
    pub fn restart(
        &self,
        (generation, committed, end): (u32, u64, Option<u64>),
        lost: &[usize],
        clock_ns: u64,
    ) -> Restart {
        let mut survivors = vec![0];
        if let Ok(mut slots) = self.state.slots.lock() {
            for process in lost {
                // A process that joined in a lost one's place since is not lost.
                if let Some(slot) = slots.get_mut(*process)
                    && !matches!(slot, Slot::Joined(_))
                {
                    *slot = Slot::Lost;
                }
            }
            for (process, slot) in slots.iter_mut().enumerate() {
                match std::mem::replace(slot, Slot::Gone) {
                    Slot::Live(c) | Slot::Joined(c) => {
                        survivors.push(process);
                        *slot = Slot::Live(c);
                    }
                    other => *slot = other,
                }
            }
            let frame = Frame::Restart {
                generation,
                survivors: survivors.iter().map(|p| *p as u32).collect(),
                committed,
                clock_ns,
                end,
            };
            for stream in slots.iter_mut().filter_map(Slot::stream) {
                let _ = write_frame(stream, &frame);
            }
        }
        if let Ok(mut ranks) = self.state.ranks.lock() {
            ranks.clone_from(&survivors);
        }
        Restart {
            generation,
            survivors,
            committed,
            clock_ns,
            end,
        }
    }

    /// The processes connected and in the job (not those that joined and wait to be taken
    /// in).
    pub fn live(&self) -> Vec<usize> {
        self.places(|s| matches!(s, Slot::Live(_)))
    }

    /// The processes that joined and are in no restart order yet.
    pub fn joined(&self) -> Vec<usize> {
        self.places(|s| matches!(s, Slot::Joined(_)))
    }

    /// The processes whose place is as `wanted` says.
    fn places(&self, wanted: impl Fn(&Slot) -> bool) -> Vec<usize> {
        let Ok(slots) = self.state.slots.lock() else {
            return Vec::new();
        };
        slots
            .iter()
            .enumerate()
            .filter(|(_, s)| wanted(s))
            .map(|(p, _)| p)
            .collect()
    }

    /// The processes among `survivors` lost since the order that named them was given
    /// (a place another process joined in since counts: the one named is gone).
    pub fn lost_among(&self, survivors: &[usize]) -> Vec<usize> {
        let gone = self.places(|s| matches!(s, Slot::Lost | Slot::Joined(_)));
        survivors.iter().copied().filter(|p| gone.contains(p)).collect()
    }

    /// The run ended normally here: tells every member, and stops watching.
    pub fn finish(&self) {
        self.state.done.store(true, Ordering::Release);
        if let Ok(mut slots) = self.state.slots.lock() {
            // A process that joined and was never taken in is told why it will not be.
            let refused = Frame::Refused {
                reason: "the job finished before it could take this process in".into(),
            };
            for slot in slots.iter_mut() {
                let frame = if matches!(slot, Slot::Joined(_)) {
                    &refused
                } else {
                    &Frame::Bye
                };
                if let Some(stream) = slot.stream() {
                    let _ = write_frame(stream, frame);
                }
                *slot = Slot::Gone;
            }
        }
    }
}

impl Drop for Coordinator {
    fn drop(&mut self) {
        self.state.done.store(true, Ordering::Release);
    }
}

pub(super) fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> Result<(), MembershipError> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(f)
        .map(drop)
        .map_err(|e| MembershipError::Thread(e.to_string()))
}

/// A connection that was sent its challenge and has not answered yet.
struct Challenged {
    stream: TcpStream,
    nonce: Nonce,
    reader: FrameReader,
}

/// A connection whose hello or join proved the secret.
pub(super) struct Proved {
    stream: TcpStream,
    reader: FrameReader,
    /// Its hello: whether it joins, its settings, process and processes.
    pub(super) hello: super::admit::Claim,
    /// The frames that came with it.
    early: Vec<Frame>,
    /// The nonces, the member's first, for the welcome.
    nonces: (Nonce, Nonce),
}

/// Takes connections until the coordinator is done, challenges each, and gives each that
/// proves the secret a thread of its own.
fn accept(state: &Arc<State>, listener: TcpListener) {
    let mut next_id = 0u64;
    let mut unproven = Unproven::new(MAX_PENDING, HELLO_WAIT);
    let mut guesses = Guesses::default();
    while !state.done.load(Ordering::Acquire) {
        let mut idle = true;
        for _ in 0..ACCEPTS_PER_TURN {
            let Ok((stream, peer)) = listener.accept() else {
                break;
            };
            idle = false;
            if let Some(challenged) = challenge(stream)
                && let Some(dropped) = unproven.push(peer.ip(), challenged)
            {
                let _ = dropped.stream.shutdown(Shutdown::Both);
            }
        }
        let proved = unproven.poll(
            |entry| read_hello(state, entry, &mut guesses),
            |dropped| {
                let _ = dropped.stream.shutdown(Shutdown::Both);
            },
        );
        for proved in proved {
            idle = false;
            let id = next_id;
            next_id += 1;
            let serving = Arc::clone(state);
            let _ = spawn("megaflux-member", move || serve(&serving, id, proved));
        }
        if idle {
            std::thread::sleep(ACCEPT_POLL);
        }
    }
}

/// Sends a new connection its challenge; `None` if it cannot be.
fn challenge(mut stream: TcpStream) -> Option<Challenged> {
    let nonce = nonce().ok()?;
    stream.set_nonblocking(true).ok()?;
    // A few bytes into a fresh connection's empty buffer: never blocks.
    write_frame(&mut stream, &Frame::Challenge { nonce }).ok()?;
    Some(Challenged {
        stream,
        nonce,
        reader: FrameReader::default(),
    })
}

/// Reads a challenged connection's answer without blocking: a hello or join that proves
/// `secret` over its challenge, or anything else, which is a wrong guess.
fn read_hello(state: &State, entry: &mut Entry<Challenged>, guesses: &mut Guesses) -> Step<Proved> {
    let mut wrong = |addr| {
        state.wrong.fetch_add(1, Ordering::Relaxed);
        guesses.wrong(addr)
    };
    let c = &mut entry.item;
    let mut frames = match c.reader.read(&mut c.stream) {
        Ok(Read1::Frames(frames)) if frames.is_empty() => return Step::Wait,
        Ok(Read1::Frames(frames)) => frames,
        Ok(Read1::Closed) => return Step::Drop,
        Err(_) => return wrong(entry.addr),
    };
    let claim = match frames.remove(0) {
        Frame::Hello {
            job,
            process,
            processes,
            nonce,
            proof,
        } => (false, job, process, processes, nonce, proof),
        Frame::Join {
            job,
            process,
            processes,
            nonce,
            proof,
        } => (true, job, process, processes, nonce, proof),
        _ => return wrong(entry.addr),
    };
    let (join, job, process, processes, theirs, proof) = claim;
    let expected = proofs::hello(&state.secret, join, (&c.nonce, &theirs), (process, processes));
    if !same(&expected, &proof) {
        return wrong(entry.addr);
    }
    let Ok(stream) = c.stream.try_clone() else {
        return Step::Drop;
    };
    Step::Proved(Proved {
        stream,
        reader: std::mem::take(&mut c.reader),
        hello: super::admit::Claim {
            join,
            job,
            process: process as usize,
            processes: processes as usize,
        },
        early: frames,
        nonces: (theirs, c.nonce),
    })
}

/// Serves one proved connection: welcomes it, admits it, then reads its beats, failures
/// and bye.
fn serve(state: &State, id: u64, proved: Proved) {
    let Proved {
        mut stream,
        mut reader,
        hello,
        early,
        nonces,
    } = proved;
    let ready = stream.set_nonblocking(false).is_ok()
        && stream.set_read_timeout(Some(HEARTBEAT)).is_ok()
        && stream.set_write_timeout(Some(WRITE_WAIT)).is_ok();
    if !ready {
        return;
    }
    let welcome = Frame::Welcome {
        proof: proofs::welcome(&state.secret, (&nonces.0, &nonces.1), hello.process as u32),
    };
    // Welcomed as it is admitted (a member forms no computation before; see `admit`), or
    // refused right after the welcome, which makes the refusal believable.
    let (claimed, joins) = (hello.process, hello.join);
    let arrival = super::admit::Arrival {
        id,
        stream: &stream,
        welcome: &welcome,
    };
    let process = match super::admit::admit(state, hello, &arrival) {
        Ok(process) => process,
        Err(reason) => {
            let _ = write_frame(&mut stream, &welcome);
            // The job's own process, refused (other settings): it exits, and the job cannot
            // form without it. (A place still waiting only: a duplicate of a live one
            // changes nothing.)
            if !joins {
                lose(state, claimed, None, format!("it was refused: {reason}"));
            }
            let _ = write_frame(&mut stream, &Frame::Refused { reason });
            return;
        }
    };
    let mut heard = Instant::now();
    let mut frames: VecDeque<Frame> = early.into();
    loop {
        while let Some(frame) = frames.pop_front() {
            heard = Instant::now();
            match frame {
                Frame::Failed { worker } if reports_own(state, process, worker) => {
                    (state.on_event)(Event::Failed { worker });
                }
                Frame::Bye => {
                    set_gone(state, process, id);
                    return;
                }
                _ => {}
            }
        }
        if state.done.load(Ordering::Acquire) {
            return;
        }
        let cause = match reader.read(&mut stream) {
            Ok(Read1::Frames(f)) => {
                frames.extend(f);
                if frames.is_empty() && heard.elapsed() > state.silence {
                    format!("silent for {} ms", heard.elapsed().as_millis())
                } else {
                    continue;
                }
            }
            Ok(Read1::Closed) => "its connection closed".to_string(),
            Err(e) => e.to_string(),
        };
        lose(state, process, Some(id), cause);
        return;
    }
}

/// Whether `worker` (numbered in the current computation) is one of `process`'s: a
/// process reports only its own workers' failures.
fn reports_own(state: &State, process: usize, worker: u32) -> bool {
    let per_process = state.workers.max(1);
    state
        .ranks
        .lock()
        .ok()
        .and_then(|ranks| ranks.iter().position(|p| *p == process))
        == Some(worker as usize / per_process)
}

/// Connection `id` of `process` said bye.
fn set_gone(state: &State, process: usize, id: u64) {
    if let Ok(mut slots) = state.slots.lock()
        && let Some(slot) = slots.get_mut(process)
        && slot.held_by(Some(id))
    {
        *slot = Slot::Gone;
    }
}

/// `process` is lost, unless it already said bye or the run is over.
/// `id`: the connection lost, or `None` for a process that never connected; news of a
/// connection whose place another took since is no news.
fn lose(state: &State, process: usize, id: Option<u64>, cause: String) {
    let Ok(mut slots) = state.slots.lock() else { return };
    let Some(slot) = slots.get_mut(process) else {
        return;
    };
    if !slot.held_by(id) || state.done.load(Ordering::Acquire) {
        return;
    }
    *slot = Slot::Lost;
    drop(slots);
    (state.on_event)(Event::Lost { process, cause });
}

/// Beats on every live member until done; processes that never connected within `wait`
/// are lost.
fn beat(state: &State, started: Instant, wait: Duration) {
    let mut told = 0;
    while !state.done.load(Ordering::Acquire) {
        std::thread::sleep(HEARTBEAT);
        let mut never = Vec::new();
        let committed = state
            .committed
            .as_ref()
            .map(|c| c.load(Ordering::Acquire))
            .filter(|c| *c > told);
        told = committed.unwrap_or(told);
        if let Ok(mut slots) = state.slots.lock() {
            for (process, slot) in slots.iter_mut().enumerate() {
                match slot {
                    Slot::Live(Conn { stream, .. }) | Slot::Joined(Conn { stream, .. }) => {
                        // A failed write shows up on the member's reader, as a close or silence.
                        let _ = write_frame(stream, &Frame::Beat);
                        if let Some(time) = committed {
                            let _ = write_frame(stream, &Frame::Committed { time });
                        }
                    }
                    Slot::Waiting if started.elapsed() > wait => never.push(process),
                    _ => {}
                }
            }
        }
        for process in never {
            let mut cause = format!(
                "it did not reach the coordinator at {} within {} s",
                state.address,
                wait.as_secs()
            );
            let wrong = state.wrong.load(Ordering::Relaxed);
            if wrong > 0 {
                cause.push_str(&format!(
                    " ({wrong} connection(s) did not prove the cluster secret: give every process the same --cluster-token)"
                ));
            }
            lose(state, process, None, cause);
        }
    }
}
