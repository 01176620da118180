//! A process's end of membership (every process but 0): connects to the coordinator,
//! proves the cluster's secret and checks the coordinator's proof, beats, forwards its
//! workers' failures the driver does not know of, and reports process 0 lost when it falls
//! silent or its connection drops. Frames from process 0 are checked before they are acted
//! on: a restart order must name valid places, start a generation past the last order's and
//! restart from no earlier than the committed frontier process 0 said before; a committed
//! frontier cannot pass what this process's own inputs have reached.

use std::net::{TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::coordinator::spawn;
use super::secret::{Nonce, Secret, nonce, same};
use super::wire::{Frame, FrameReader, Read1, write_frame};
use super::{Event, HEARTBEAT, MembershipError, OnEvent, Restart, proofs};

/// How long one connection attempt may take.
const CONNECT_WAIT: Duration = Duration::from_millis(500);
/// How long the coordinator may take to challenge and welcome a member, once connected,
/// past the peer timeout: one that joins waits up to the timeout and a little more for the
/// place it takes to be lost.
const HANDSHAKE_GRACE: Duration = Duration::from_secs(3);
/// How often [`Member::wait_welcomed`] looks.
const WELCOME_POLL: Duration = Duration::from_millis(5);

struct State {
    done: AtomicBool,
    /// The coordinator's verdict is in: welcomed (and any refusal that came with it
    /// reported), or given up on.
    answered: AtomicBool,
    /// The connection, for writing, once made.
    writer: Mutex<Option<TcpStream>>,
}

/// A member process's membership: watches process 0 until dropped or finished.
pub struct Member {
    state: Arc<State>,
}

/// Who the member is.
pub struct Hello {
    /// The job's settings, which process 0's must equal.
    pub job: super::Settings,
    /// This process's index.
    pub process: usize,
    /// The number of processes.
    pub processes: usize,
    /// Whether it takes a lost process's place in a running job (`--join`).
    pub join: bool,
    /// The cluster's secret.
    pub secret: Secret,
}

/// The failures of this process's workers the driver has not heard of (the current
/// computation's, numbered as it numbers them).
pub type NewlyFailed = Arc<dyn Fn() -> Vec<u32> + Send + Sync>;

/// What membership reads and raises in the run.
pub struct Links {
    /// The failures to forward.
    pub newly_failed: NewlyFailed,
    /// The committed frontier, raised as the coordinator's moves.
    pub committed: Arc<AtomicU64>,
    /// How far this process's inputs have reached (every output before it may exist;
    /// none at or after it can have been written): a committed frontier past it is not
    /// believed.
    pub reached: Arc<AtomicU64>,
    /// How long process 0 may stay silent before it counts as lost.
    pub silence: Duration,
}

impl Hello {
    /// This member's first frame on a connection whose challenge is `challenge`: its hello
    /// (or join), with its nonce `ours` and its proof of the secret over both.
    pub fn frame(&self, challenge: &Nonce, ours: Nonce) -> Frame {
        let (process, processes) = (self.process as u32, self.processes as u32);
        let proof = proofs::hello(&self.secret, self.join, (challenge, &ours), (process, processes));
        let job = self.job.clone();
        if self.join {
            Frame::Join {
                job,
                process,
                processes,
                nonce: ours,
                proof,
            }
        } else {
            Frame::Hello {
                job,
                process,
                processes,
                nonce: ours,
                proof,
            }
        }
    }
}

impl Member {
    /// Connects to the coordinator at `address` (trying for `wait`) as `hello` says, and
    /// watches it from then on, as `links` say.
    pub fn start(
        address: String,
        hello: Hello,
        wait: Duration,
        links: Links,
        on_event: OnEvent,
    ) -> Result<Self, MembershipError> {
        let state = Arc::new(State {
            done: AtomicBool::new(false),
            answered: AtomicBool::new(false),
            writer: Mutex::new(None),
        });
        let running = Arc::clone(&state);
        spawn("megaflux-member", move || {
            let Some(welcomed) = connect(&running, &address, &hello, (wait, links.silence), &on_event) else {
                running.answered.store(true, Ordering::Release);
                return;
            };
            watch(&running, welcomed, (&hello, &links), &on_event);
        })?;
        Ok(Member { state })
    }

    /// Waits up to `wait` for the coordinator's verdict: once this returns, a refusal or a
    /// failure to reach process 0 has been reported. A process forms no computation before,
    /// so that one refused never joins timely's.
    pub fn wait_welcomed(&self, wait: Duration) {
        let since = Instant::now();
        while !self.state.answered.load(Ordering::Acquire) && since.elapsed() < wait {
            std::thread::sleep(WELCOME_POLL);
        }
    }

    /// The run ended normally here: says bye, and stops watching.
    pub fn finish(&self) {
        self.state.done.store(true, Ordering::Release);
        if let Ok(mut writer) = self.state.writer.lock()
            && let Some(stream) = writer.as_mut()
        {
            let _ = write_frame(stream, &Frame::Bye);
        }
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        self.state.done.store(true, Ordering::Release);
    }
}

/// A connection the coordinator welcomed: the stream, its reader and the frames that came
/// with the welcome.
struct Welcomed {
    stream: TcpStream,
    reader: FrameReader,
    early: Vec<Frame>,
}

/// Connects, proves the secret and checks the coordinator's proof; `None` (after reporting
/// why) if no coordinator that proved it was reached within `wait`.
fn connect(
    state: &State,
    address: &str,
    hello: &Hello,
    (wait, silence): (Duration, Duration),
    on_event: &OnEvent,
) -> Option<Welcomed> {
    let since = Instant::now();
    let mut last = String::from("no attempt");
    while since.elapsed() < wait {
        if state.done.load(Ordering::Acquire) {
            return None;
        }
        let resolved = address.to_socket_addrs().map(|mut a| a.next());
        let attempt = match resolved {
            Ok(Some(at)) => TcpStream::connect_timeout(&at, CONNECT_WAIT),
            Ok(None) => Err(std::io::Error::other("the name resolves to no address")),
            Err(e) => Err(e),
        };
        let handshake_wait = silence + HANDSHAKE_GRACE;
        let deadline = Instant::now() + handshake_wait.min(wait.saturating_sub(since.elapsed()));
        match attempt
            .map_err(|e| e.to_string())
            .and_then(|s| handshake(s, hello, deadline))
        {
            Ok(welcomed) => {
                if let Ok(mut slot) = state.writer.lock() {
                    *slot = welcomed.stream.try_clone().ok();
                }
                return Some(welcomed);
            }
            Err(e) => last = e,
        }
        std::thread::sleep(HEARTBEAT);
    }
    on_event(Event::Lost {
        process: 0,
        cause: format!(
            "its coordinator at {address} was not reached within {} s: {last}",
            wait.as_secs()
        ),
    });
    None
}

/// The member's side of the proofs on a new connection, until `deadline`: the challenge,
/// the hello with its proof, and the coordinator's welcome, whose proof is checked.
fn handshake(mut stream: TcpStream, hello: &Hello, deadline: Instant) -> Result<Welcomed, String> {
    let io = |e: std::io::Error| e.to_string();
    stream.set_read_timeout(Some(HEARTBEAT)).map_err(io)?;
    stream.set_write_timeout(Some(HEARTBEAT * 2)).map_err(io)?;
    stream.set_nodelay(true).map_err(io)?;
    let mut reader = FrameReader::default();
    let mut frames = Vec::new();
    let challenge = match next_frame(&mut stream, &mut reader, &mut frames, deadline)? {
        Frame::Challenge { nonce } => nonce,
        _ => return Err("what listens there sent no challenge: it is not a megaflux coordinator".into()),
    };
    let ours: Nonce = nonce().map_err(|e| e.to_string())?;
    let process = hello.process as u32;
    let first = hello.frame(&challenge, ours);
    write_frame(&mut stream, &first).map_err(io)?;
    let welcome = loop {
        let frame = next_frame(&mut stream, &mut reader, &mut frames, deadline).map_err(|e| {
            format!("{e} (the coordinator welcomes only a process that holds its cluster secret: give every process the same --cluster-token)")
        })?;
        // A join waits for its place to be lost, hearing beats meanwhile.
        if frame != Frame::Beat {
            break frame;
        }
    };
    let expected = proofs::welcome(&hello.secret, (&ours, &challenge), process);
    match welcome {
        Frame::Welcome { proof } if same(&expected, &proof) => Ok(Welcomed {
            stream,
            reader,
            early: frames,
        }),
        _ => Err(
            "what listens there did not prove the cluster secret: it is not this job's coordinator".into(),
        ),
    }
}

/// The next frame on `stream` before `deadline`; the frames after it stay in `frames`.
fn next_frame(
    stream: &mut TcpStream,
    reader: &mut FrameReader,
    frames: &mut Vec<Frame>,
    deadline: Instant,
) -> Result<Frame, String> {
    loop {
        if !frames.is_empty() {
            return Ok(frames.remove(0));
        }
        if Instant::now() >= deadline {
            return Err("the coordinator did not answer in time".into());
        }
        match reader.read(stream) {
            Ok(Read1::Frames(f)) => frames.extend(f),
            Ok(Read1::Closed) => return Err("the coordinator closed the connection".into()),
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// Beats and listens until done, process 0 says bye, or it is lost.
fn watch(state: &State, welcomed: Welcomed, (hello, links): (&Hello, &Links), on_event: &OnEvent) {
    let Welcomed {
        mut stream,
        mut reader,
        early,
    } = welcomed;
    let mut heard = Instant::now();
    let mut beat = Instant::now();
    let mut unbelieved = false;
    // The generation of the last restart order followed: each next one must be past it.
    let mut followed: Option<u32> = None;
    let mut frames = early;
    // Whatever way this ends, the verdict is in.
    let _answered = Answered(&state.answered);
    loop {
        if state.done.load(Ordering::Acquire) {
            return;
        }
        if beat.elapsed() >= HEARTBEAT {
            beat = Instant::now();
            let mut out = vec![Frame::Beat];
            out.extend(
                (links.newly_failed)()
                    .into_iter()
                    .map(|worker| Frame::Failed { worker }),
            );
            if let Ok(mut writer) = state.writer.lock()
                && let Some(w) = writer.as_mut()
            {
                for frame in &out {
                    // A failed write shows up below, as a close or silence.
                    let _ = write_frame(w, frame);
                }
            }
        }
        for frame in frames.drain(..) {
            heard = Instant::now();
            match frame {
                Frame::Bye => return,
                Frame::Refused { reason } => {
                    if !state.done.load(Ordering::Acquire) {
                        on_event(Event::Refused { reason });
                    }
                    return;
                }
                Frame::Committed { time } => {
                    let reached = links.reached.load(Ordering::Acquire);
                    if time <= reached {
                        links.committed.fetch_max(time, Ordering::AcqRel);
                    } else if !unbelieved {
                        // Kept outputs are what a restart builds on: never drop them on a
                        // word that cannot be true.
                        unbelieved = true;
                        tracing::warn!(
                            target: "megaflux::membership",
                            time,
                            reached,
                            "process 0 said outputs past this process's inputs are written: not believed"
                        );
                    }
                }
                Frame::Restart {
                    generation,
                    survivors,
                    committed,
                    clock_ns,
                    end,
                } => match order(hello, survivors).and_then(|survivors| {
                    let believed = links.committed.load(Ordering::Acquire);
                    times(followed, (generation, committed), believed).map(|()| survivors)
                }) {
                    Ok(survivors) => {
                        followed = Some(generation);
                        on_event(Event::Restart(Restart {
                            generation,
                            survivors,
                            committed,
                            clock_ns,
                            end,
                        }));
                    }
                    Err(what) => {
                        if !state.done.load(Ordering::Acquire) {
                            on_event(Event::Lost {
                                process: 0,
                                cause: format!("it sent a restart order that cannot be followed: {what}"),
                            });
                        }
                        return;
                    }
                },
                _ => {}
            }
        }
        // The frames that came with the welcome are acted on: the verdict is in.
        state.answered.store(true, Ordering::Release);
        let cause = match reader.read(&mut stream) {
            Ok(Read1::Frames(f)) => {
                frames = f;
                if !frames.is_empty() || heard.elapsed() <= links.silence {
                    continue;
                }
                format!("silent for {} ms", heard.elapsed().as_millis())
            }
            Ok(Read1::Closed) => "its connection closed".to_string(),
            Err(e) => e.to_string(),
        };
        if !state.done.load(Ordering::Acquire) {
            on_event(Event::Lost { process: 0, cause });
        }
        return;
    }
}

/// Sets its flag when dropped.
struct Answered<'a>(&'a AtomicBool);

impl Drop for Answered<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// The survivors of a restart order, if it can be followed: places of `hello`'s cluster,
/// in order, each once, process 0 first.
fn order(hello: &Hello, survivors: Vec<u32>) -> Result<Vec<usize>, String> {
    let places: Vec<usize> = survivors.iter().map(|p| *p as usize).collect();
    if let Some(p) = places.iter().find(|p| **p >= hello.processes) {
        return Err(format!(
            "it names process {p} of a cluster of {}",
            hello.processes
        ));
    }
    if places.windows(2).any(|w| w[0] >= w[1]) {
        return Err(format!("its processes {places:?} are not each once, in order"));
    }
    if places.first() != Some(&0) {
        return Err("it leaves process 0 out".into());
    }
    // One that leaves this process out is valid: one given before a joining process was
    // taken in (the next counts it), or one after process 0 lost this one (the run says so).
    Ok(places)
}

/// Whether a restart order's times can be followed: its generation past that of the order
/// followed before (`earlier`), and its committed frontier not behind the one process 0 said
/// before (`believed`): process 0's frontier only rises, and a restart from before it would
/// produce outputs again that are written already.
fn times(earlier: Option<u32>, (generation, committed): (u32, u64), believed: u64) -> Result<(), String> {
    if let Some(earlier) = earlier.filter(|e| generation <= *e) {
        return Err(format!(
            "it starts generation {generation} after generation {earlier}"
        ));
    }
    if committed < believed {
        return Err(format!(
            "it restarts from time {committed}, behind the committed frontier {believed} it said before"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_restart_order_naming_valid_places_is_followed() {
        let hello = Hello {
            job: super::super::Settings::new(),
            process: 2,
            processes: 3,
            join: false,
            secret: Secret::none(),
        };
        assert_eq!(order(&hello, vec![0, 2]), Ok(vec![0, 2]));
        assert_eq!(order(&hello, vec![0, 1]), Ok(vec![0, 1]));
        for bad in [
            vec![0, 2, 7],
            vec![0, 2, u32::MAX],
            vec![0, 2, 2],
            vec![2, 0],
            vec![1, 2],
            vec![],
        ] {
            assert!(order(&hello, bad.clone()).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn only_a_restart_order_past_the_last_one_and_the_committed_frontier_is_followed() {
        assert_eq!(times(None, (1, 40), 40), Ok(()));
        assert_eq!(times(None, (7, 0), 0), Ok(()));
        assert_eq!(times(Some(1), (2, 41), 40), Ok(()));
        let stale = times(Some(2), (2, 40), 40).unwrap_err();
        assert!(stale.contains("generation 2 after generation 2"), "{stale}");
        assert!(times(Some(3), (1, 40), 40).is_err());
        let behind = times(Some(1), (2, 39), 40).unwrap_err();
        assert!(behind.contains("behind the committed frontier 40"), "{behind}");
    }
}
