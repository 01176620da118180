//! Membership over loopback: the coordinator and its members each report the other lost
//! when it drops its connection or falls silent, never when it said bye; failures a member's
//! process detects reach the coordinator; another job's process is refused; and a flood of
//! silent connections does not keep a member out; a process joins only in a lost one's place
//! of a job that restarts, and takes part in the next restart order; one waiting for a held
//! place is told when the job ends. Every connection proves the cluster's secret both ways:
//! a stranger without it takes no place and is told nothing, a flood cannot push out a
//! member being admitted, failure reports name only the reporter's own workers (numbered as
//! the current computation numbers them), and a member checks process 0's frames.

use std::io::Write;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use megaflux::failure::Failures;
use megaflux::membership::secret::{Nonce, nonce};
use megaflux::membership::wire::{Frame, FrameReader, Read1, write_frame};
use megaflux::membership::{
    Coordinator, Event, HEARTBEAT, Hello, Links, Member, OnEvent, SILENCE_LIMIT, Secret, Settings, proofs,
};
use megaflux_testkit::{deadline, wait_until};

/// The cluster's secret in these tests.
fn secret() -> Secret {
    Secret::new("membership tests' cluster secret").unwrap()
}

/// A coordinator of 3 processes of 2 workers, for `job`, that counts a member silent for
/// [`SILENCE_LIMIT`] lost; and its address.
fn coordinator(job: Settings, committed: Option<Arc<AtomicU64>>, on: OnEvent) -> (String, Coordinator) {
    coordinator_silent_after(SILENCE_LIMIT, job, committed, on)
}

/// A coordinator of 3 processes of 2 workers, for `job`, that counts a member silent for
/// `silence` lost; and its address, a free port of loopback (another one if the one picked
/// was taken before the coordinator listened on it).
fn coordinator_silent_after(
    silence: Duration,
    job: Settings,
    committed: Option<Arc<AtomicU64>>,
    on: OnEvent,
) -> (String, Coordinator) {
    let mut clashes = Vec::new();
    while clashes.len() < 20 {
        let address = free_address();
        let started = Coordinator::start(
            &address,
            (job.clone(), secret()),
            (3, 2),
            (WAIT, silence),
            committed.clone(),
            Arc::clone(&on),
        );
        match started {
            Ok(c) => return (address, c),
            Err(e) if e.to_string().contains("in use") => clashes.push(e.to_string()),
            Err(e) => panic!("the coordinator did not start at {address}: {e}"),
        }
    }
    panic!("every port picked was taken: {clashes:?}")
}

/// The test job's settings; `seed` tells jobs apart.
fn job_with(seed: u64) -> Settings {
    Settings::new().with("--workload", "test").with("--seed", seed)
}

fn job() -> Settings {
    job_with(0xfeed)
}
/// Long enough for any report on a loaded machine (a bound against a hang, times
/// `MEGAFLUX_TEST_SLACK`): a closed connection is reported within milliseconds, a silent
/// one once the silence limit has passed.
const PATIENCE: Duration = Duration::from_secs(60);
const WAIT: Duration = Duration::from_secs(30);

/// The silence limit of the tests that wait for a silent peer to be lost, stated rather
/// than the product's default: a peer that sends nothing at all is lost once this has
/// passed.
const SILENT: Duration = Duration::from_secs(1);

/// The next event on `got`, which the test waits for (`what`), within the patience.
fn next(got: &Receiver<Event>, what: &str) -> Event {
    let patience = deadline(PATIENCE);
    got.recv_timeout(patience)
        .unwrap_or_else(|e| panic!("no {what} within {patience:?} ({e})"))
}

fn events() -> (OnEvent, Receiver<Event>) {
    let (send, receive) = channel();
    let send = Mutex::new(send);
    let on: OnEvent = Arc::new(move |e| {
        if let Ok(s) = send.lock() {
            let _ = s.send(e);
        }
    });
    (on, receive)
}

fn free_address() -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

fn member(
    address: &str,
    process: usize,
    job: Settings,
    failures: Arc<Failures>,
) -> (Member, Receiver<Event>) {
    start_member(address, process, job, failures, false)
}

fn start_member(
    address: &str,
    process: usize,
    job: Settings,
    failures: Arc<Failures>,
    join: bool,
) -> (Member, Receiver<Event>) {
    start_member_with(address, (process, join), (job, secret()), failures).0
}

/// A member, and the events it reports.
type Started = (Member, Receiver<Event>);

/// A member as given, and the committed frontier and reach it links; it counts process 0
/// lost after [`SILENCE_LIMIT`] of silence.
fn start_member_with(
    address: &str,
    (process, join): (usize, bool),
    (job, secret): (Settings, Secret),
    failures: Arc<Failures>,
) -> (Started, (Arc<AtomicU64>, Arc<AtomicU64>)) {
    start_member_silent_after(SILENCE_LIMIT, address, (process, join), (job, secret), failures)
}

/// As [`start_member_with`], counting process 0 lost after `silence`.
fn start_member_silent_after(
    silence: Duration,
    address: &str,
    (process, join): (usize, bool),
    (job, secret): (Settings, Secret),
    failures: Arc<Failures>,
) -> (Started, (Arc<AtomicU64>, Arc<AtomicU64>)) {
    let (on, got) = events();
    let hello = Hello {
        job,
        process,
        processes: 3,
        join,
        secret,
    };
    let (committed, reached) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let links = Links {
        newly_failed: Arc::new(move || failures.newly_failed()),
        committed: Arc::clone(&committed),
        reached: Arc::clone(&reached),
        silence,
    };
    let member = Member::start(address.to_string(), hello, WAIT, links, on).unwrap();
    ((member, got), (committed, reached))
}

/// Reads the next frame from `s`, within the patience.
fn next_frame(s: &mut TcpStream, reader: &mut FrameReader) -> Option<Frame> {
    s.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
    let since = Instant::now();
    let patience = deadline(PATIENCE);
    let mut frames = Vec::new();
    while frames.is_empty() {
        assert!(since.elapsed() < patience, "no frame came within {patience:?}");
        match reader.read(s) {
            Ok(Read1::Frames(f)) => frames = f,
            Ok(Read1::Closed) | Err(_) => return None,
        }
    }
    Some(frames.remove(0))
}

/// The challenge a new connection to the coordinator is sent.
fn challenged(s: &mut TcpStream, reader: &mut FrameReader) -> Nonce {
    match next_frame(s, reader) {
        Some(Frame::Challenge { nonce }) => nonce,
        other => panic!("expected a challenge, got {other:?}"),
    }
}

/// A hello or join for `process`, proved with `secret` over `challenge`.
fn hello_frame(secret: &Secret, join: bool, challenge: &Nonce, process: u32) -> Frame {
    let hello = Hello {
        job: job(),
        process: process as usize,
        processes: 3,
        join,
        secret: secret.clone(),
    };
    hello.frame(challenge, nonce().unwrap())
}

/// A member that proves the secret by hand (`join`: joins), is welcomed, and then does
/// what the test says.
fn fake_joiner(address: &str, process: u32, join: bool) -> (TcpStream, FrameReader) {
    let mut s = TcpStream::connect(address).unwrap();
    let mut reader = FrameReader::default();
    let challenge = challenged(&mut s, &mut reader);
    write_frame(&mut s, &hello_frame(&secret(), join, &challenge, process)).unwrap();
    match next_frame(&mut s, &mut reader) {
        Some(Frame::Welcome { .. }) => {}
        other => panic!("expected a welcome, got {other:?}"),
    }
    (s, reader)
}

fn fake_member(address: &str, process: u32) -> TcpStream {
    fake_joiner(address, process, false).0
}

/// One end of a membership connection by hand (a member or process 0) that beats every
/// heartbeat, as a live process does, until it is dropped: then its connection closes
/// (without a bye), as a crashed process's does.
struct Beating {
    stream: Arc<Mutex<TcpStream>>,
    stop: Arc<AtomicBool>,
    beats: Option<JoinHandle<()>>,
}

impl Beating {
    /// A member by hand for `process`, welcomed, that beats.
    fn member(address: &str, process: u32) -> Self {
        Beating::on(fake_member(address, process))
    }

    /// Beats on `stream`.
    fn on(stream: TcpStream) -> Self {
        let stream = Arc::new(Mutex::new(stream));
        let stop = Arc::new(AtomicBool::new(false));
        let (beat, stopped) = (Arc::clone(&stream), Arc::clone(&stop));
        let beats = std::thread::spawn(move || {
            while !stopped.load(Ordering::Acquire) {
                if write_frame(&mut *beat.lock().unwrap(), &Frame::Beat).is_err() {
                    return;
                }
                std::thread::sleep(HEARTBEAT);
            }
        });
        Beating {
            stream,
            stop,
            beats: Some(beats),
        }
    }

    /// Sends `frame`, whole, between two beats.
    fn send(&self, frame: &Frame) {
        write_frame(&mut *self.stream.lock().unwrap(), frame).unwrap();
    }
}

impl Drop for Beating {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(beats) = self.beats.take() {
            let _ = beats.join();
        }
        if let Ok(s) = self.stream.lock() {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

fn lost(event: Event) -> (usize, String) {
    match event {
        Event::Lost { process, cause } => (process, cause),
        other => panic!("expected a loss, got {other:?}"),
    }
}

/// With a silence limit of [`SILENT`]: a member silent that long is lost.
#[test]
fn the_coordinator_reports_a_silent_member_a_closed_one_and_not_one_that_said_bye() {
    let (on, got) = events();
    let (address, _c) = coordinator_silent_after(SILENT, job(), None, on);
    // Process 1 says hello and nothing more: it hangs.
    let _hung = fake_member(&address, 1);
    // Process 2 beats, says bye, and goes, at once: a pause of the test's thread longer
    // than the short silence limit would make it silent first.
    let mut polite = fake_member(&address, 2);
    for _ in 0..5 {
        write_frame(&mut polite, &Frame::Beat).unwrap();
    }
    write_frame(&mut polite, &Frame::Bye).unwrap();
    drop(polite);
    let (process, cause) = lost(next(&got, "loss of the silent process 1"));
    assert_eq!(process, 1);
    assert!(cause.starts_with("silent for"), "{cause}");
    // Nothing else: process 2 said bye. Had the coordinator not taken it, the close (at
    // once) or the silence (after one limit) would be news by now.
    match got.recv_timeout(SILENT * 2) {
        Err(_) => {}
        Ok(event) => panic!("news of a process that said bye: {event:?}"),
    }

    let (on, got) = events();
    let (address, _c) = coordinator(job(), None, on);
    let gone = fake_member(&address, 2);
    drop(gone);
    let (process, cause) = lost(next(&got, "loss of process 2, whose connection closed"));
    assert_eq!((process, cause.as_str()), (2, "its connection closed"));
}

/// A coordinator by hand on `listener`: challenges the next member, and welcomes it with
/// a proof of `secret`, right or not.
fn fake_coordinator(listener: &TcpListener, secret: &Secret) -> (TcpStream, FrameReader) {
    let (mut s, _) = listener.accept().unwrap();
    let mut reader = FrameReader::default();
    let challenge = nonce().unwrap();
    write_frame(&mut s, &Frame::Challenge { nonce: challenge }).unwrap();
    let (theirs, process) = match next_frame(&mut s, &mut reader) {
        Some(Frame::Hello { nonce, process, .. } | Frame::Join { nonce, process, .. }) => (nonce, process),
        other => panic!("expected a hello, got {other:?}"),
    };
    let proof = proofs::welcome(secret, (&theirs, &challenge), process);
    write_frame(&mut s, &Frame::Welcome { proof }).unwrap();
    (s, reader)
}

/// A silent process 0 is lost after a silence limit of [`SILENT`]; a closed one at once
/// (with the product's limit, which no stall of the test reaches first).
#[test]
fn a_member_reports_process_0_silent_or_closed() {
    for hang in [true, false] {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let failures = Arc::new(Failures::new(6));
        let silence = if hang { SILENT } else { SILENCE_LIMIT };
        let ((_m, got), _) =
            start_member_silent_after(silence, &address, (1, false), (job(), secret()), failures);
        let (coordinator, _) = fake_coordinator(&listener, &secret());
        if !hang {
            drop(coordinator);
        }
        let what = if hang {
            "loss of a silent process 0"
        } else {
            "loss of a closed process 0"
        };
        let (process, cause) = lost(next(&got, what));
        assert_eq!(process, 0);
        if hang {
            assert!(cause.starts_with("silent for"), "{cause}");
        } else {
            assert!(!cause.starts_with("silent"), "{cause}");
        }
    }
}

#[test]
fn failures_of_other_processes_reach_the_driver_and_the_run_ends_quietly() {
    let coordinator_failures = Arc::new(Failures::new(6));
    let reported = Arc::clone(&coordinator_failures);
    let (on, got) = events();
    let on: OnEvent = Arc::new(move |e| {
        if let Event::Failed { worker } = e {
            reported.report(worker);
        }
        on(e)
    });
    let (address, c) = coordinator(job(), None, on);
    let failures1 = Arc::new(Failures::new(6));
    let (m1, got1) = member(&address, 1, job(), Arc::clone(&failures1));
    let (m2, got2) = member(&address, 2, job(), Arc::new(Failures::new(6)));
    taken_in(&c, 1);
    taken_in(&c, 2);
    // Worker 3 (of process 1) fails by itself, twice, a rejoin between.
    failures1.fail(3);
    assert_eq!(next(&got, "worker 3's failure"), Event::Failed { worker: 3 });
    assert_eq!(coordinator_failures.newly_failed(), vec![3]);
    failures1.revive(3, 10);
    failures1.fail(3);
    assert_eq!(
        next(&got, "worker 3's second failure"),
        Event::Failed { worker: 3 }
    );
    assert_eq!(coordinator_failures.newly_failed(), vec![3]);
    // The members beat while their runs go on: more than a silence limit (the product's,
    // which a starved test process does not reach) passes without news, on either side.
    let quiet = SILENCE_LIMIT + SILENCE_LIMIT / 2;
    match got.recv_timeout(quiet) {
        Err(_) => {}
        Ok(event) => panic!("news of members that beat: {event:?}"),
    }
    assert_eq!(c.live(), vec![1, 2], "both members still count");
    for (p, got) in [(1, &got1), (2, &got2)] {
        if let Ok(event) = got.try_recv() {
            panic!("process {p} had news of process 0 while it beat: {event:?}");
        }
    }
    m1.finish();
    m2.finish();
    drop((m1, m2));
    // A member that ends its run says bye: its connection's close is no loss (one would be
    // reported at once).
    match got.recv_timeout(Duration::from_secs(3)) {
        Err(_) => {}
        Ok(event) => panic!("news of members that finished: {event:?}"),
    }
    c.finish();
    assert!(got1.recv_timeout(Duration::from_secs(2)).is_err());
    assert!(got2.recv_timeout(Duration::from_secs(2)).is_err());
}

#[test]
fn another_jobs_process_is_refused_and_told_why() {
    let (on, _got) = events();
    let (address, _c) = coordinator(job(), None, on);
    let (_m, got) = member(&address, 1, job_with(0xfeed + 1), Arc::new(Failures::new(6)));
    match next(&got, "the refusal of another job's process") {
        Event::Refused { reason } => assert!(reason.contains("another job"), "{reason}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn silent_connections_and_garbage_do_not_keep_a_member_out() {
    let failures0 = Arc::new(Failures::new(6));
    let (on, got) = events();
    let (address, _c) = coordinator(job(), None, on);
    let mut crowd: Vec<TcpStream> = (0..100)
        .filter_map(|_| TcpStream::connect(&address).ok())
        .collect();
    for s in crowd.iter_mut().take(20) {
        let _ = s.write_all(&[0xff; 64]);
    }
    let failures1 = Arc::new(Failures::new(6));
    let (_m, _) = member(&address, 1, job(), Arc::clone(&failures1));
    failures1.fail(2);
    assert_eq!(
        next(&got, "worker 2's failure through the crowd"),
        Event::Failed { worker: 2 }
    );
    drop(failures0);
}

/// Waits until the coordinator counts `process` among the job's (it registers a member on
/// its own thread).
fn taken_in(c: &Coordinator, process: usize) {
    wait_until(&format!("process {process} to register"), PATIENCE, || {
        c.live().contains(&process)
    });
}

fn refused(got: &Receiver<Event>) -> String {
    match next(got, "a refusal") {
        Event::Refused { reason } => reason,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// A coordinator for a job that restarts after a crash, its address and its events.
fn restartable() -> (String, Coordinator, Receiver<Event>) {
    let (on, got) = events();
    let committed = Arc::new(AtomicU64::new(0));
    let (address, c) = coordinator(job(), Some(committed), on);
    (address, c, got)
}

#[test]
fn a_process_joins_only_in_a_lost_place_of_a_job_that_restarts() {
    // A job that does not restart takes no one in.
    let (on, _got) = events();
    let (address, _c) = coordinator(job(), None, on);
    let (_m, got) = start_member(&address, 2, job(), Arc::new(Failures::new(6)), true);
    assert!(refused(&got).contains("does not restart"));

    let (address, c, got0) = restartable();
    let (_m1, _) = member(&address, 1, job(), Arc::new(Failures::new(6)));
    taken_in(&c, 1);
    // Process 2 has not started: joining is not starting.
    let (_early, got) = start_member(&address, 2, job(), Arc::new(Failures::new(6)), true);
    assert!(refused(&got).contains("without --join"));
    let (m2, _) = member(&address, 2, job(), Arc::new(Failures::new(6)));
    taken_in(&c, 2);
    // A live place cannot be taken.
    let (_twin, got) = start_member(&address, 1, job(), Arc::new(Failures::new(6)), true);
    assert!(refused(&got).contains("still runs"));
    // Process 2 goes away; the job restarts without it.
    drop(m2);
    let (process, _) = lost(next(&got0, "loss of process 2"));
    assert_eq!(process, 2);
    let order = c.restart((1, 40, None), &[2], 7);
    assert_eq!(order.survivors, vec![0, 1]);
    // Coming back without --join is refused, and says how.
    let (_plain, got) = member(&address, 2, job(), Arc::new(Failures::new(6)));
    assert!(refused(&got).contains("--join"));
    // With it, it is taken in, and the next order counts it.
    let (_joiner, got2) = start_member(&address, 2, job(), Arc::new(Failures::new(6)), true);
    assert_eq!(next(&got0, "process 2's join"), Event::Join { process: 2 });
    assert_eq!(c.joined(), vec![2]);
    let order = c.restart((2, 55, None), &[], 9);
    assert_eq!(order.survivors, vec![0, 1, 2]);
    match next(&got2, "the restart order at the joiner") {
        Event::Restart(heard) => assert_eq!(heard, order),
        other => panic!("expected the restart order, got {other:?}"),
    }
}

#[test]
fn a_late_close_of_the_lost_connection_leaves_the_process_that_joined_alone() {
    let (address, c, got0) = restartable();
    let (_m1, _) = member(&address, 1, job(), Arc::new(Failures::new(6)));
    // It beats: only its close, not its silence, can make news of it.
    let old = Beating::member(&address, 2);
    taken_in(&c, 2);
    // Timely saw process 2 go before membership did: the restart leaves it out while its
    // membership connection is still open.
    c.restart((1, 40, None), &[2], 0);
    let (_joiner, got2) = start_member(&address, 2, job(), Arc::new(Failures::new(6)), true);
    assert_eq!(next(&got0, "process 2's join"), Event::Join { process: 2 });
    // Now the old connection closes: no news of the process in its place (a close is
    // news within milliseconds).
    drop(old);
    match got0.recv_timeout(Duration::from_secs(2)) {
        Err(_) => {}
        Ok(event) => panic!("the old connection's close was taken for the joiner's: {event:?}"),
    }
    assert_eq!(c.joined(), vec![2]);
    // The job ends before a restart takes it in: it is told so.
    c.finish();
    assert!(refused(&got2).contains("finished"));
}

#[test]
fn a_finishing_job_takes_no_process_in() {
    let (address, c, got0) = restartable();
    let (m1, _) = member(&address, 1, job(), Arc::new(Failures::new(6)));
    let (m2, _) = member(&address, 2, job(), Arc::new(Failures::new(6)));
    taken_in(&c, 1);
    taken_in(&c, 2);
    drop(m2);
    assert_eq!(lost(next(&got0, "loss of process 2")).0, 2);
    c.restart((1, 40, None), &[2], 0);
    // Process 1 ends its run: the job is finishing.
    m1.finish();
    wait_until("process 1's bye", PATIENCE, || !c.live().contains(&1));
    let (_joiner, got) = start_member(&address, 2, job(), Arc::new(Failures::new(6)), true);
    assert!(refused(&got).contains("finishing"));
}

#[test]
fn a_join_waiting_for_a_held_place_is_refused_when_the_job_ends() {
    let (address, c, _got0) = restartable();
    let (_m1, _) = member(&address, 1, job(), Arc::new(Failures::new(6)));
    taken_in(&c, 1);
    // A twin of process 1, which still runs: the coordinator waits for process 1 to go,
    // beating to the twin meanwhile.
    // It proved the secret: it hears beats while it waits, and a welcome only once its
    // verdict is in.
    let mut twin = TcpStream::connect(&address).unwrap();
    let mut reader = FrameReader::default();
    let challenge = challenged(&mut twin, &mut reader);
    write_frame(&mut twin, &hello_frame(&secret(), true, &challenge, 1)).unwrap();
    let patience = deadline(PATIENCE);
    let mut next = || -> Vec<Frame> {
        let since = Instant::now();
        loop {
            assert!(
                since.elapsed() < patience,
                "the coordinator said nothing within {patience:?}"
            );
            match reader.read(&mut twin) {
                Ok(Read1::Frames(frames)) if !frames.is_empty() => return frames,
                Ok(Read1::Frames(_)) => {}
                Ok(Read1::Closed) => panic!("closed without a word"),
                Err(e) => panic!("the connection failed: {e}"),
            }
        }
    };
    assert!(next().contains(&Frame::Beat));
    // The job ends while the twin waits: it is told so, not left to the join wait.
    drop(c);
    let reason = loop {
        if let Some(reason) = next().into_iter().find_map(|f| match f {
            Frame::Refused { reason } => Some(reason),
            _ => None,
        }) {
            break reason;
        }
    };
    assert!(reason.contains("has ended"), "{reason}");
}

/// Reads `s` until it closes; every frame it was sent.
fn all_frames(s: &mut TcpStream, reader: &mut FrameReader) -> Vec<Frame> {
    let mut frames = Vec::new();
    while let Some(frame) = next_frame(s, reader) {
        frames.push(frame);
    }
    frames
}

/// A stranger without the secret cannot take a process's place, and is told nothing: not
/// by guessing the proof, nor by any frame but a hello; the real process is then taken in.
#[test]
fn a_stranger_without_the_secret_takes_no_place_and_is_told_nothing() {
    let (on, got) = events();
    let (address, c) = coordinator(job(), None, on);
    let wrong = Secret::new("not the membership tests' secret").unwrap();
    for attempt in 0..3 {
        let mut s = TcpStream::connect(&address).unwrap();
        let mut reader = FrameReader::default();
        let challenge = challenged(&mut s, &mut reader);
        let frame = match attempt {
            0 => hello_frame(&wrong, false, &challenge, 1),
            1 => hello_frame(&Secret::none(), true, &challenge, 2),
            _ => Frame::Bye,
        };
        write_frame(&mut s, &frame).unwrap();
        assert_eq!(
            all_frames(&mut s, &mut reader),
            vec![],
            "attempt {attempt}: told something"
        );
    }
    assert!(c.live().is_empty());
    // A member with another secret is not welcomed either, and says why it may be.
    let (_other, _) = start_member_with(&address, (1, false), (job(), wrong), Arc::new(Failures::new(6)));
    std::thread::sleep(Duration::from_millis(500));
    assert!(c.live().is_empty());
    // The real process 1 is taken in.
    let (_m1, _) = member(&address, 1, job(), Arc::new(Failures::new(6)));
    taken_in(&c, 1);
    assert!(got.try_recv().is_err(), "a stranger made news");
}

/// A member trusts no coordinator that does not prove the secret: it never starts watching
/// one, and after its wait says the coordinator did not prove it.
#[test]
fn a_member_does_not_trust_a_coordinator_without_the_secret() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let (on, got) = events();
    let hello = Hello {
        job: job(),
        process: 1,
        processes: 3,
        join: false,
        secret: secret(),
    };
    let links = Links {
        newly_failed: Arc::new(Vec::new),
        committed: Arc::default(),
        reached: Arc::default(),
        silence: SILENCE_LIMIT,
    };
    let _m = Member::start(address, hello, Duration::from_secs(2), links, on).unwrap();
    // It challenges and welcomes every connection, with a proof it cannot make.
    let impostor = std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in listener.incoming() {
            let Ok(mut s) = s else { return };
            let mut reader = FrameReader::default();
            let _ = write_frame(
                &mut s,
                &Frame::Challenge {
                    nonce: nonce().unwrap(),
                },
            );
            let _ = next_frame(&mut s, &mut reader);
            let _ = write_frame(&mut s, &Frame::Welcome { proof: [7; 32] });
            held.push(s);
        }
    });
    let (process, cause) = lost(next(&got, "the member's verdict on the impostor"));
    assert_eq!(process, 0);
    assert!(cause.contains("did not prove the cluster secret"), "{cause}");
    drop(impostor);
}

/// A flood of silent connections while a process waits to join (admitted, waiting for the
/// place it takes to be lost) does not close its connection: it is taken in.
#[test]
fn a_flood_does_not_close_a_member_being_admitted() {
    let (address, c, got0) = restartable();
    let (m1, _) = member(&address, 1, job(), Arc::new(Failures::new(6)));
    taken_in(&c, 1);
    // A process joins for process 1's place, which is still held: it waits.
    let (_joiner, got) = start_member(&address, 1, job(), Arc::new(Failures::new(6)), true);
    let flood: Vec<TcpStream> = (0..300)
        .filter_map(|_| TcpStream::connect(&address).ok())
        .collect();
    drop(m1);
    assert_eq!(lost(next(&got0, "loss of process 1")).0, 1);
    assert_eq!(
        next(&got0, "the joiner's join in process 1's place"),
        Event::Join { process: 1 }
    );
    assert_eq!(c.joined(), vec![1]);
    assert!(got.try_recv().is_err(), "the joiner heard of a loss");
    drop(flood);
}

/// A process reports only its own workers' failures, numbered as the current computation
/// numbers them: after a restart without process 1, process 2 is rank 1, with workers 2
/// and 3. Reports repeated before the driver reads them are one.
#[test]
fn failure_reports_name_only_the_reporters_workers_as_renumbered() {
    let driver = Arc::new(Failures::new(6));
    let (on, got) = events();
    let reported = Arc::clone(&driver);
    let on: OnEvent = Arc::new(move |e| {
        if let Event::Failed { worker } = e {
            reported.report(worker);
        }
        on(e)
    });
    let committed = Arc::new(AtomicU64::new(0));
    let (address, c) = coordinator(job(), Some(committed), on);
    let (m1, _) = member(&address, 1, job(), Arc::new(Failures::new(6)));
    // It beats, as a live process does: however long the test takes, it is never lost.
    let p2 = Beating::member(&address, 2);
    taken_in(&c, 1);
    taken_in(&c, 2);
    // Before the restart, process 2 may name workers 4 and 5 only.
    for worker in [0, 2, 3, 6, u32::MAX, 4, 4, 4] {
        p2.send(&Frame::Failed { worker });
    }
    // Each report is news (the driver is told of each before the news goes out), and
    // the others none: they come in order, so the third is the last report there is.
    for n in 1..=3 {
        let what = format!("report {n} of worker 4's failure");
        assert_eq!(next(&got, &what), Event::Failed { worker: 4 });
    }
    assert_eq!(driver.newly_failed(), vec![4], "repeated reports are one");
    drop(m1);
    loop {
        match next(&got, "loss of process 1") {
            Event::Lost { process: 1, .. } => break,
            Event::Failed { .. } => {}
            other => panic!("expected process 1 lost, got {other:?}"),
        }
    }
    c.restart((1, 0, None), &[1], 0);
    for worker in [4, 5, 0, 3] {
        p2.send(&Frame::Failed { worker });
    }
    assert_eq!(
        next(&got, "renumbered worker 3's failure"),
        Event::Failed { worker: 3 }
    );
    // Workers 4, 5 and 0 are not process 2's any more: no news of them (reports are news
    // within milliseconds, as worker 3's was).
    match got.recv_timeout(Duration::from_secs(1)) {
        Err(_) => {}
        Ok(event) => panic!("a report of a worker not process 2's: {event:?}"),
    }
}

/// A member checks process 0's frames: a committed frontier past what its inputs reached
/// is not believed (it would drop the outputs kept for a restart), and a restart order
/// naming places the cluster does not have stops it with one clear cause.
#[test]
fn a_member_checks_process_0s_frames() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let ((_m, got), (committed, reached)) = start_member_with(
        &address,
        (1, false),
        (job(), secret()),
        Arc::new(Failures::new(6)),
    );
    // Process 0 beats, as a live one does: the member's only cause to stop is the order.
    let c = Beating::on(fake_coordinator(&listener, &secret()).0);
    reached.store(50, Ordering::Release);
    c.send(&Frame::Committed { time: u64::MAX });
    c.send(&Frame::Committed { time: 40 });
    wait_until("the believable frontier", PATIENCE, || {
        committed.load(Ordering::Acquire) == 40
    });
    c.send(&Frame::Committed { time: 51 });
    let order = Frame::Restart {
        generation: 1,
        survivors: vec![0, 1, 9],
        committed: 40,
        clock_ns: 0,
        end: None,
    };
    c.send(&order);
    let (process, cause) = lost(next(&got, "the member to stop at the order"));
    assert_eq!(process, 0);
    assert!(cause.contains("process 9 of a cluster of 3"), "{cause}");
    assert_eq!(committed.load(Ordering::Acquire), 40);
}
