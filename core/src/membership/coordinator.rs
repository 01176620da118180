//! Process 0's end of membership: takes one connection from each other process, beats on
//! each, and reports the processes that fall silent, drop their connection or never come.
//! In a job that restarts after a crash, a process started again for a lost place
//! ([`Frame::Join`]) is taken in: it is reported ([`Event::Join`]) and takes part in the
//! next restart order.
//!
//! Connections that have not said hello yet are few and short-lived: each gets
//! [`HELLO_WAIT`] to do so, and past [`MAX_PENDING`] of them the oldest is dropped, so that a
//! flood of silent connections cannot keep a member out (a member says hello at once).

use std::collections::VecDeque;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::wire::{Frame, FrameReader, Read1, write_frame};
use super::{Event, HEARTBEAT, MembershipError, OnEvent, Restart, SILENCE_LIMIT};

/// How long a new connection has to say hello.
pub(super) const HELLO_WAIT: Duration = Duration::from_secs(1);
/// Connections waiting to say hello, at most.
const MAX_PENDING: usize = 32;
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
    pending: Mutex<VecDeque<(u64, TcpStream)>>,
    pub(super) done: AtomicBool,
    pub(super) on_event: OnEvent,
    address: String,
    /// The committed frontier members learn of with the beats, if the job can restart.
    pub(super) committed: Option<Arc<AtomicU64>>,
}

/// Process 0's membership: watches the other processes until dropped or finished.
pub struct Coordinator {
    state: Arc<State>,
}

impl Coordinator {
    /// Listens at `address` for the other `processes - 1` processes of the job with settings `job` (whose
    /// processes run `workers` workers each), which must connect within `wait`. With
    /// `committed`, members hear of its moves with the beats.
    pub fn start(
        address: &str,
        job: super::Settings,
        (processes, workers): (usize, usize),
        wait: Duration,
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
            pending: Mutex::default(),
            done: AtomicBool::new(false),
            on_event,
            address: address.to_string(),
            committed,
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

/// Takes connections until the coordinator is done; each gets a thread of its own.
fn accept(state: &Arc<State>, listener: TcpListener) {
    let mut next_id = 0u64;
    while !state.done.load(Ordering::Acquire) {
        let stream = match listener.accept() {
            Ok((stream, _)) => stream,
            Err(_) => {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
        };
        let id = next_id;
        next_id += 1;
        let ready = stream.set_nonblocking(false).is_ok()
            && stream.set_read_timeout(Some(HEARTBEAT)).is_ok()
            && stream.set_write_timeout(Some(WRITE_WAIT)).is_ok();
        let Ok(kept) = stream.try_clone() else { continue };
        if !ready {
            continue;
        }
        if let Ok(mut pending) = state.pending.lock() {
            pending.push_back((id, kept));
            while pending.len() > MAX_PENDING {
                if let Some((_, oldest)) = pending.pop_front() {
                    let _ = oldest.shutdown(Shutdown::Both);
                }
            }
        }
        let serving = Arc::clone(state);
        let _ = spawn("megaflux-member", move || serve(&serving, id, stream));
    }
}

/// Serves one connection: its hello, then its beats, failures and bye.
fn serve(state: &State, id: u64, mut stream: TcpStream) {
    let mut reader = FrameReader::default();
    let hello = super::admit::hello(state, id, &mut reader, &mut stream);
    if let Ok(mut pending) = state.pending.lock() {
        pending.retain(|(p, _)| *p != id);
    }
    let Some((process, early)) = hello else {
        return;
    };
    let mut heard = Instant::now();
    let mut frames: VecDeque<Frame> = early.into();
    loop {
        while let Some(frame) = frames.pop_front() {
            heard = Instant::now();
            match frame {
                Frame::Failed { worker } if worker as usize / state.workers.max(1) == process => {
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
                if frames.is_empty() && heard.elapsed() > SILENCE_LIMIT {
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
            let cause = format!(
                "it did not reach the coordinator at {} within {} s",
                state.address,
                wait.as_secs()
            );
            lose(state, process, None, cause);
        }
    }
}
