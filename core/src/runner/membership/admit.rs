//! Who the coordinator takes in: a process that starts with the job ([`Frame::Hello`]), or
//! one started again for a lost place of a job that restarts ([`Frame::Join`]), once it
//! proved the cluster's secret. One that cannot take the place it claims is refused with a
//! frame saying why.

use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::coordinator::{Conn, Slot, State};
use super::wire::{Frame, write_frame};
use super::{Event, HEARTBEAT};

/// How long past the peer timeout a process that joins may wait for the coordinator to see
/// the process whose place it takes go: a hung one is seen after the timeout
/// (`--peer-timeout`), a crashed one at once.
const JOIN_GRACE: Duration = Duration::from_secs(2);

/// What a proved hello or join claims.
pub(super) struct Claim {
    /// Whether it takes a lost process's place (`--join`).
    pub(super) join: bool,
    /// The job's settings as the member has them.
    pub(super) job: super::Settings,
    /// The place it claims.
    pub(super) process: usize,
    /// The processes it was started with.
    pub(super) processes: usize,
}

/// A proved connection asking for a place: its id, its stream, and the welcome it is sent
/// when it takes the place.
pub(super) struct Arrival<'a> {
    pub(super) id: u64,
    pub(super) stream: &'a TcpStream,
    pub(super) welcome: &'a Frame,
}

/// Registers a proved connection for the place its hello claims: the process, or why it
/// is refused (it holds the secret, so it is one of the job's own, and is told). Once
/// taken in, it has been sent its welcome.
pub(super) fn admit(state: &State, claim: Claim, arrival: &Arrival) -> Result<usize, String> {
    let Claim {
        join,
        job,
        process,
        processes,
    } = claim;
    let differs = if processes != state.processes {
        Some(format!(
            "-n is {processes} on process {process}, {} on process 0",
            state.processes
        ))
    } else if !job.is_plausible() {
        Some(format!("process {process} said too many settings"))
    } else {
        state.job.differs(&job, process)
    };
    let refuse = if let Some(what) = differs {
        Some(format!(
            "process {process} runs another job than process 0: {what} (every process runs the same command)"
        ))
    } else if join {
        admit_join(state, process, arrival)
    } else {
        register(state, process, arrival)
    };
    if let Some(reason) = refuse {
        tracing::warn!(target: "megaflux::membership", process, %reason, "refused a member");
        return Err(reason);
    }
    if join {
        tracing::info!(target: "megaflux::membership", process, "a process joins");
        (state.on_event)(Event::Join { process });
    }
    Ok(process)
}

/// Takes `process` in on connection `id`; why not, if it cannot be.
fn register(state: &State, process: usize, arrival: &Arrival) -> Option<String> {
    let Ok(mut slots) = state.slots.lock() else {
        return Some("the coordinator's state was poisoned".into());
    };
    match slots.get_mut(process) {
        Some(slot @ Slot::Waiting) => keep(slot, arrival, Slot::Live).err(),
        Some(_) if process == 0 => Some("process 0 is the coordinator's own".into()),
        Some(Slot::Lost) if state.committed.is_some() => Some(format!(
            "process {process} was lost from the running job: start it again with --join to take its place"
        )),
        Some(Slot::Lost) => Some(format!(
            "process {process} was lost, and the job does not restart after a crash"
        )),
        Some(_) => Some(format!("process {process} is connected already, or was lost")),
        None => Some(format!(
            "there is no process {process} in a cluster of {}",
            state.processes
        )),
    }
}

/// Why a process cannot join: not yet (`Busy`: the place is still held), or not at all.
enum Refusal {
    Busy(String),
    No(String),
}

/// Takes `process` in on connection `id` for a lost one's place (`--join`), waiting up to
/// the peer timeout and [`JOIN_GRACE`] for the coordinator to see the process whose place it
/// takes go; why not,
/// if it cannot be. A job that ends meanwhile says so at once: its process 0 is about to
/// exit, and a connection it leaves without a word reads as process 0 lost.
fn admit_join(state: &State, process: usize, arrival: &Arrival) -> Option<String> {
    let since = Instant::now();
    let mut beat = Instant::now();
    loop {
        if state.done.load(Ordering::Acquire) {
            return Some("the job has ended: it takes no process in any more".into());
        }
        match register_join(state, process, arrival) {
            Some(Refusal::Busy(_)) if since.elapsed() < state.silence + JOIN_GRACE => {
                // It hears from process 0 meanwhile, or would take it for lost.
                if beat.elapsed() >= HEARTBEAT {
                    beat = Instant::now();
                    let _ = write_frame(&mut &*arrival.stream, &Frame::Beat);
                }
                std::thread::sleep(HEARTBEAT / 5)
            }
            Some(Refusal::Busy(why) | Refusal::No(why)) => return Some(why),
            None => return None,
        }
    }
}

/// Takes `process` in on connection `id` for a lost one's place, if it can be now.
fn register_join(state: &State, process: usize, arrival: &Arrival) -> Option<Refusal> {
    let no = |why: String| Some(Refusal::No(why));
    if state.committed.is_none() {
        return no(
            "this job does not restart after a crash (process 0 said why when it started), so no process can join it".into(),
        );
    }
    let Ok(mut slots) = state.slots.lock() else {
        return no("the coordinator's state was poisoned".into());
    };
    // A process said bye: the job is finishing, and a restart now would lose its bins.
    if slots.iter().skip(1).any(|s| matches!(s, Slot::Gone)) {
        return no("the job is finishing: it takes no process in any more".into());
    }
    match slots.get_mut(process) {
        Some(slot @ Slot::Lost) => keep(slot, arrival, Slot::Joined).err().map(Refusal::No),
        Some(_) if process == 0 => no("process 0 is the coordinator's own: it cannot join".into()),
        Some(Slot::Live(_) | Slot::Joined(_)) => Some(Refusal::Busy(format!(
            "process {process} still runs in the job: only a lost process's place can be joined"
        ))),
        Some(Slot::Waiting) => no(format!(
            "the job has not started yet: start process {process} without --join"
        )),
        Some(_) => no(format!("process {process} has finished its part of the job")),
        None => no(format!(
            "there is no process {process} in a cluster of {}",
            state.processes
        )),
    }
}

/// Welcomes `arrival` and puts it in `slot`, as `as_slot` makes it. The caller holds the
/// slots' lock, and everything else written to a place (beats, committed frontiers,
/// restart orders) is written under it: the welcome is the first frame the member reads
/// after its proof, as it expects.
fn keep(slot: &mut Slot, arrival: &Arrival, as_slot: fn(Conn) -> Slot) -> Result<(), String> {
    let stream = arrival
        .stream
        .try_clone()
        .map_err(|e| format!("the coordinator cannot keep the connection: {e}"))?;
    write_frame(&mut &*arrival.stream, arrival.welcome).map_err(|e| format!("welcoming it failed: {e}"))?;
    *slot = as_slot(Conn {
        id: arrival.id,
        stream,
    });
    Ok(())
}
