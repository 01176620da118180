//! A process's end of membership (every process but 0): connects to the coordinator, beats,
//! forwards its workers' failures the driver does not know of, and reports process 0 lost
//! when it falls silent or its connection drops.

use std::net::{TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::coordinator::spawn;
use super::wire::{Frame, FrameReader, Read1, write_frame};
use super::{Event, HEARTBEAT, MembershipError, OnEvent, Restart, SILENCE_LIMIT};
use crate::failure::Failures;

/// How long one connection attempt may take.
const CONNECT_WAIT: Duration = Duration::from_millis(500);

struct State {
    done: AtomicBool,
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
}

impl Member {
    /// Connects to the coordinator at `address` (trying for `wait`) as `hello` says, and
    /// watches it from then on; forwards the failures `failures` detects, and raises
    /// `committed` as the coordinator's committed frontier moves.
    pub fn start(
        address: String,
        hello: Hello,
        wait: Duration,
        failures: Arc<Failures>,
        committed: Arc<AtomicU64>,
        on_event: OnEvent,
    ) -> Result<Self, MembershipError> {
        let state = Arc::new(State {
            done: AtomicBool::new(false),
            writer: Mutex::new(None),
        });
        let running = Arc::clone(&state);
        spawn("megaflux-member", move || {
            let Some(stream) = connect(&running, &address, &hello, wait, &on_event) else {
                return;
            };
            watch(&running, stream, (&failures, &committed), &on_event);
        })?;
        Ok(Member { state })
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

/// Connects and says hello; `None` (after reporting why) if the coordinator was not reached.
fn connect(
    state: &State,
    address: &str,
    hello: &Hello,
    wait: Duration,
    on_event: &OnEvent,
) -> Option<TcpStream> {
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
        match attempt.and_then(|s| {
            s.set_read_timeout(Some(HEARTBEAT))?;
            s.set_write_timeout(Some(HEARTBEAT * 2))?;
            s.set_nodelay(true)?;
            let mut w = s.try_clone()?;
            let (job, process, processes) = (hello.job.clone(), hello.process as u32, hello.processes as u32);
            let first = if hello.join {
                Frame::Join {
                    job,
                    process,
                    processes,
                }
            } else {
                Frame::Hello {
                    job,
                    process,
                    processes,
                }
            };
            write_frame(&mut w, &first)?;
            Ok((s, w))
        }) {
            Ok((stream, writer)) => {
                if let Ok(mut slot) = state.writer.lock() {
                    *slot = Some(writer);
                }
                return Some(stream);
            }
            Err(e) => last = e.to_string(),
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

/// Beats and listens until done, process 0 says bye, or it is lost.
fn watch(
    state: &State,
    mut stream: TcpStream,
    (failures, committed): (&Failures, &AtomicU64),
    on_event: &OnEvent,
) {
    let mut reader = FrameReader::default();
    let mut heard = Instant::now();
    let mut beat = Instant::now();
    loop {
        if state.done.load(Ordering::Acquire) {
            return;
        }
        if beat.elapsed() >= HEARTBEAT {
            beat = Instant::now();
            let mut frames = vec![Frame::Beat];
            frames.extend(
                failures
                    .newly_failed()
                    .into_iter()
                    .map(|worker| Frame::Failed { worker }),
            );
            if let Ok(mut writer) = state.writer.lock()
                && let Some(w) = writer.as_mut()
            {
                for frame in &frames {
                    // A failed write shows up below, as a close or silence.
                    let _ = write_frame(w, frame);
                }
            }
        }
        let cause = match reader.read(&mut stream) {
            Ok(Read1::Frames(frames)) => {
                for frame in frames {
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
                            committed.fetch_max(time, Ordering::AcqRel);
                        }
                        Frame::Restart {
                            generation,
                            survivors,
                            committed,
                            clock_ns,
                            end,
                        } => on_event(Event::Restart(Restart {
                            generation,
                            survivors: survivors.into_iter().map(|p| p as usize).collect(),
                            committed,
                            clock_ns,
                            end,
                        })),
                        _ => {}
                    }
                }
                if heard.elapsed() <= SILENCE_LIMIT {
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
