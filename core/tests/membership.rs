//! Membership over loopback: the coordinator and its members each report the other lost
//! when it drops its connection or falls silent, never when it said bye; failures a member's
//! process detects reach the coordinator; another job's process is refused; and a flood of
//! silent connections does not keep a member out; a process joins only in a lost one's place
//! of a job that restarts, and takes part in the next restart order; one waiting for a held
//! place is told when the job ends.

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc::{Receiver, channel};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use megaflux::failure::Failures;
use megaflux::membership::wire::{Frame, FrameReader, Read1, write_frame};
use megaflux::membership::{Coordinator, Event, Hello, Member, OnEvent, Settings};

/// The test job's settings; `seed` tells jobs apart.
fn job_with(seed: u64) -> Settings {
    Settings::new().with("--workload", "test").with("--seed", seed)
}

fn job() -> Settings {
    job_with(0xfeed)
}
/// Long enough for any report on a loaded machine; reports come within about a second.
const PATIENCE: Duration = Duration::from_secs(20);
const WAIT: Duration = Duration::from_secs(30);

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
    let (on, got) = events();
    let hello = Hello {
        job,
        process,
        processes: 3,
        join,
    };
    (
        Member::start(address.to_string(), hello, WAIT, failures, Default::default(), on).unwrap(),
        got,
    )
}

/// A member that says hello by hand and then does what the test says.
fn fake_member(address: &str, process: u32) -> TcpStream {
    let mut s = TcpStream::connect(address).unwrap();
    write_frame(
        &mut s,
        &Frame::Hello {
            job: job(),
            process,
            processes: 3,
        },
    )
    .unwrap();
    s
}

fn lost(event: Event) -> (usize, String) {
    match event {
        Event::Lost { process, cause } => (process, cause),
        other => panic!("expected a loss, got {other:?}"),
    }
}

#[test]
fn the_coordinator_reports_a_silent_member_a_closed_one_and_not_one_that_said_bye() {
    let address = free_address();
    let (on, got) = events();
    let _c = Coordinator::start(&address, job(), (3, 2), WAIT, None, on).unwrap();
    // Process 1 says hello and nothing more: it hangs.
    let _hung = fake_member(&address, 1);
    // Process 2 beats a while, says bye, and goes.
    let mut polite = fake_member(&address, 2);
    for _ in 0..5 {
        write_frame(&mut polite, &Frame::Beat).unwrap();
        std::thread::sleep(Duration::from_millis(50));
    }
    write_frame(&mut polite, &Frame::Bye).unwrap();
    drop(polite);
    let (process, cause) = lost(got.recv_timeout(PATIENCE).unwrap());
    assert_eq!(process, 1);
    assert!(cause.starts_with("silent for"), "{cause}");
    // Nothing else: process 2 said bye.
    assert!(got.recv_timeout(Duration::from_secs(2)).is_err());

    let address = free_address();
    let (on, got) = events();
    let _c = Coordinator::start(&address, job(), (3, 2), WAIT, None, on).unwrap();
    let gone = fake_member(&address, 2);
    drop(gone);
    let (process, cause) = lost(got.recv_timeout(PATIENCE).unwrap());
    assert_eq!((process, cause.as_str()), (2, "its connection closed"));
}

#[test]
fn a_member_reports_process_0_silent_or_closed() {
    for hang in [true, false] {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let (_m, got) = member(&address, 1, job(), Arc::new(Failures::new(6)));
        let (coordinator, _) = listener.accept().unwrap();
        if !hang {
            drop(coordinator);
        }
        let (process, cause) = lost(got.recv_timeout(PATIENCE).unwrap());
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
    let address = free_address();
    let coordinator_failures = Arc::new(Failures::new(6));
    let reported = Arc::clone(&coordinator_failures);
    let (on, got) = events();
    let on: OnEvent = Arc::new(move |e| {
        if let Event::Failed { worker } = e {
            reported.report(worker);
        }
        on(e)
    });
    let c = Coordinator::start(&address, job(), (3, 2), WAIT, None, on).unwrap();
    let failures1 = Arc::new(Failures::new(6));
    let (m1, got1) = member(&address, 1, job(), Arc::clone(&failures1));
    let (m2, got2) = member(&address, 2, job(), Arc::new(Failures::new(6)));
    // Worker 3 (of process 1) fails by itself, twice, a rejoin between.
    failures1.fail(3);
    assert_eq!(got.recv_timeout(PATIENCE).unwrap(), Event::Failed { worker: 3 });
    failures1.revive(3, 10);
    failures1.fail(3);
    assert_eq!(got.recv_timeout(PATIENCE).unwrap(), Event::Failed { worker: 3 });
    assert_eq!(coordinator_failures.newly_failed(), vec![3, 3]);
    // A member beats while its run goes on: a few silence limits pass without news.
    assert!(got.recv_timeout(Duration::from_secs(3)).is_err());
    m1.finish();
    m2.finish();
    drop((m1, m2));
    assert!(got.recv_timeout(Duration::from_secs(3)).is_err());
    c.finish();
    assert!(got1.recv_timeout(Duration::from_secs(2)).is_err());
    assert!(got2.recv_timeout(Duration::from_secs(2)).is_err());
}

#[test]
fn another_jobs_process_is_refused_and_told_why() {
    let address = free_address();
    let (on, _got) = events();
    let _c = Coordinator::start(&address, job(), (3, 2), WAIT, None, on).unwrap();
    let (_m, got) = member(&address, 1, job_with(0xfeed + 1), Arc::new(Failures::new(6)));
    match got.recv_timeout(PATIENCE).unwrap() {
        Event::Refused { reason } => assert!(reason.contains("another job"), "{reason}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn silent_connections_and_garbage_do_not_keep_a_member_out() {
    let address = free_address();
    let failures0 = Arc::new(Failures::new(6));
    let (on, got) = events();
    let _c = Coordinator::start(&address, job(), (3, 2), WAIT, None, on).unwrap();
    let mut crowd: Vec<TcpStream> = (0..100)
        .filter_map(|_| TcpStream::connect(&address).ok())
        .collect();
    for s in crowd.iter_mut().take(20) {
        let _ = s.write_all(&[0xff; 64]);
    }
    let failures1 = Arc::new(Failures::new(6));
    let (_m, _) = member(&address, 1, job(), Arc::clone(&failures1));
    failures1.fail(2);
    assert_eq!(got.recv_timeout(PATIENCE).unwrap(), Event::Failed { worker: 2 });
    drop(failures0);
}

/// Waits until the coordinator counts `process` among the job's (it registers a member on
/// its own thread).
fn taken_in(c: &Coordinator, process: usize) {
    let since = std::time::Instant::now();
    while !c.live().contains(&process) {
        assert!(since.elapsed() < PATIENCE, "process {process} never registered");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn refused(got: &Receiver<Event>) -> String {
    match got.recv_timeout(PATIENCE).unwrap() {
        Event::Refused { reason } => reason,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// A coordinator at `address` for a job that restarts after a crash, and its events.
fn restartable(address: &str) -> (Coordinator, Receiver<Event>) {
    let (on, got) = events();
    let committed = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let c = Coordinator::start(address, job(), (3, 2), WAIT, Some(committed), on).unwrap();
    (c, got)
}

#[test]
fn a_process_joins_only_in_a_lost_place_of_a_job_that_restarts() {
    // A job that does not restart takes no one in.
    let address = free_address();
    let (on, _got) = events();
    let _c = Coordinator::start(&address, job(), (3, 2), WAIT, None, on).unwrap();
    let (_m, got) = start_member(&address, 2, job(), Arc::new(Failures::new(6)), true);
    assert!(refused(&got).contains("does not restart"));

    let address = free_address();
    let (c, got0) = restartable(&address);
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
    let (process, _) = lost(got0.recv_timeout(PATIENCE).unwrap());
    assert_eq!(process, 2);
    let order = c.restart((1, 40, None), &[2], 7);
    assert_eq!(order.survivors, vec![0, 1]);
    // Coming back without --join is refused, and says how.
    let (_plain, got) = member(&address, 2, job(), Arc::new(Failures::new(6)));
    assert!(refused(&got).contains("--join"));
    // With it, it is taken in, and the next order counts it.
    let (_joiner, got2) = start_member(&address, 2, job(), Arc::new(Failures::new(6)), true);
    assert_eq!(got0.recv_timeout(PATIENCE).unwrap(), Event::Join { process: 2 });
    assert_eq!(c.joined(), vec![2]);
    let order = c.restart((2, 55, None), &[], 9);
    assert_eq!(order.survivors, vec![0, 1, 2]);
    match got2.recv_timeout(PATIENCE).unwrap() {
        Event::Restart(heard) => assert_eq!(heard, order),
        other => panic!("expected the restart order, got {other:?}"),
    }
}

#[test]
fn a_late_close_of_the_lost_connection_leaves_the_process_that_joined_alone() {
    let address = free_address();
    let (c, got0) = restartable(&address);
    let (_m1, _) = member(&address, 1, job(), Arc::new(Failures::new(6)));
    let old = fake_member(&address, 2);
    taken_in(&c, 2);
    // Timely saw process 2 go before membership did: the restart leaves it out while its
    // membership connection is still open.
    c.restart((1, 40, None), &[2], 0);
    let (_joiner, got2) = start_member(&address, 2, job(), Arc::new(Failures::new(6)), true);
    assert_eq!(got0.recv_timeout(PATIENCE).unwrap(), Event::Join { process: 2 });
    // Now the old connection closes: no news of the process in its place.
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
    let address = free_address();
    let (c, got0) = restartable(&address);
    let (m1, _) = member(&address, 1, job(), Arc::new(Failures::new(6)));
    let (m2, _) = member(&address, 2, job(), Arc::new(Failures::new(6)));
    taken_in(&c, 1);
    taken_in(&c, 2);
    drop(m2);
    assert_eq!(lost(got0.recv_timeout(PATIENCE).unwrap()).0, 2);
    c.restart((1, 40, None), &[2], 0);
    // Process 1 ends its run: the job is finishing.
    m1.finish();
    let since = std::time::Instant::now();
    while c.live().contains(&1) {
        assert!(since.elapsed() < PATIENCE, "process 1's bye never arrived");
        std::thread::sleep(Duration::from_millis(10));
    }
    let (_joiner, got) = start_member(&address, 2, job(), Arc::new(Failures::new(6)), true);
    assert!(refused(&got).contains("finishing"));
}

#[test]
fn a_join_waiting_for_a_held_place_is_refused_when_the_job_ends() {
    let address = free_address();
    let (c, _got0) = restartable(&address);
    let (_m1, _) = member(&address, 1, job(), Arc::new(Failures::new(6)));
    taken_in(&c, 1);
    // A twin of process 1, which still runs: the coordinator waits for process 1 to go,
    // beating to the twin meanwhile.
    let mut twin = TcpStream::connect(&address).unwrap();
    let join = Frame::Join {
        job: job(),
        process: 1,
        processes: 3,
    };
    write_frame(&mut twin, &join).unwrap();
    twin.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
    let mut reader = FrameReader::default();
    let mut next = || -> Vec<Frame> {
        let since = std::time::Instant::now();
        loop {
            assert!(since.elapsed() < PATIENCE, "the coordinator said nothing");
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
