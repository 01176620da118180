//! A real 3-process cluster under attack by a stranger on the same machine who does not hold
//! the cluster's secret. While the cluster forms it floods process 0's coordinator with
//! connections and says hello for a real process's place; all along it trickles silent
//! connections to every port, sends 12 random bytes to process 0's timely port, and claims
//! places on the timely ports with guessed proofs; after process 2 is killed (kill -9) it
//! asks to join in its place, and goes on through the survivors' restart. Once it made every
//! attack the job is stopped as `q` stops it, and ends with the digest and `--output` of the
//! same epochs nobody attacked.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use megaflux::membership::wire::{Frame, FrameReader, Read1, write_frame};
use megaflux::membership::{Hello, Secret, Settings};

use megaflux_testkit::{wait_all, wait_until};

mod common;
use common::{
    CLUSTER_LIMIT as LIMIT, Cluster, Draws, REPLICATED_KEYCOUNT, assert_same_outputs, formed, restarted,
    same_epochs, sorted_lines, summary, with_duration,
};

/// The `--duration` of the attacked run, which the test stops: far past its deadline.
const UNTIL_STOPPED: &str = "3600";

/// The epochs of the cluster's runs, in microseconds (`common::CLUSTER_EPOCH_US`).
const EPOCH_US: u64 = 1000;
/// Connections the stranger keeps open at once.
const HELD: usize = 400;
/// Connections of the flood, opened at once as process 0's coordinator starts to listen.
const FLOOD: usize = 200;

/// What the stranger did, to check it did it.
#[derive(Default)]
struct Tally {
    /// Connections the flood opened while the members connected.
    flooded: AtomicU64,
    hellos: AtomicU64,
    /// Joins asked for after the kill (set by the test), for the lost process's place.
    joins_after_kill: AtomicU64,
    killed: AtomicBool,
    claims: AtomicU64,
    garbage: AtomicU64,
    welcomed: AtomicBool,
}

/// Says a hello (or a join) with a guessed proof for `process`'s place; whether it was
/// welcomed (it must never be).
fn guess_hello(coordinator: &str, process: u32, join: bool, draws: &mut Draws) -> bool {
    let Ok(mut s) = TcpStream::connect(coordinator) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
    let mut reader = FrameReader::default();
    let Ok(Read1::Frames(first)) = reader.read(&mut s) else {
        return false;
    };
    let Some(Frame::Challenge { nonce: challenge }) = first.into_iter().next() else {
        return false;
    };
    // A guess at the token: the stranger knows everything but the secret.
    let guess = format!("a guess at the secret {:016x}", draws.next());
    let hello = Hello {
        job: Settings::new(),
        process: process as usize,
        processes: 3,
        join,
        secret: Secret::new(&guess).expect("a long enough guess"),
    };
    let frame = hello.frame(&challenge, draws.bytes());
    if write_frame(&mut s, &frame).is_err() {
        return false;
    }
    // Anything but a close is an answer; a welcome is a breach.
    for _ in 0..3 {
        match reader.read(&mut s) {
            Ok(Read1::Frames(frames)) => {
                if frames.iter().any(|f| matches!(f, Frame::Welcome { .. })) {
                    return true;
                }
            }
            _ => return false,
        }
    }
    false
}

/// Claims a place on a timely port with a guessed proof, after reading its challenge.
fn guess_claim(port: &str, draws: &mut Draws) {
    let Ok(mut s) = TcpStream::connect(port) else {
        return;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(100)));
    let mut challenge = [0u8; 24];
    if s.read_exact(&mut challenge).is_err() {
        return;
    }
    let mut claim = Vec::new();
    for generation in [0u32, 1] {
        claim.extend_from_slice(&generation.to_le_bytes());
        claim.extend_from_slice(&2u64.to_le_bytes());
        claim.extend_from_slice(&draws.bytes::<48>());
    }
    let _ = s.write_all(&claim[..60]);
}

/// Attacks the cluster whose timely ports are `ports` and whose coordinator is at
/// `coordinator` until `stop`.
fn attack((ports, coordinator): (Vec<String>, String), stop: &AtomicBool, tally: &Tally) {
    let mut draws = Draws(0x5eed_a77a);
    let mut held: std::collections::VecDeque<TcpStream> = std::collections::VecDeque::new();
    // The flood while the members connect: from the moment the coordinator listens (before
    // it, every connect is refused and nothing is flooded).
    let since = Instant::now();
    while held.is_empty() && !stop.load(Ordering::Acquire) && since.elapsed() < LIMIT {
        match TcpStream::connect(&coordinator) {
            Ok(s) => held.push_back(s),
            Err(_) => std::thread::sleep(Duration::from_millis(2)),
        }
    }
    for _ in 1..FLOOD {
        held.extend(TcpStream::connect(&coordinator));
    }
    tally.flooded.store(held.len() as u64, Ordering::Relaxed);
    let mut turn = 0u64;
    while !stop.load(Ordering::Acquire) {
        turn += 1;
        // The first turn after the kill asks for the lost place at once: a loaded machine
        // leaves the stranger few turns before the survivors have restarted.
        let first_after_kill =
            tally.killed.load(Ordering::Acquire) && tally.joins_after_kill.load(Ordering::Relaxed) == 0;
        let process = if first_after_kill {
            2
        } else {
            1 + (turn % 2) as u32
        };
        let join = first_after_kill || turn.is_multiple_of(3);
        if join && process == 2 && tally.killed.load(Ordering::Acquire) {
            tally.joins_after_kill.fetch_add(1, Ordering::Relaxed);
        }
        if guess_hello(&coordinator, process, join, &mut draws) {
            tally.welcomed.store(true, Ordering::Release);
        }
        tally.hellos.fetch_add(1, Ordering::Relaxed);
        let port = &ports[(turn as usize) % ports.len()];
        guess_claim(port, &mut draws);
        tally.claims.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut s) = TcpStream::connect(&ports[0]) {
            let _ = s.write_all(&draws.bytes::<12>());
            tally.garbage.fetch_add(1, Ordering::Relaxed);
            held.push_back(s);
        }
        for target in ports.iter().chain([&coordinator]) {
            held.extend(TcpStream::connect(target));
        }
        while held.len() > HELD {
            held.pop_front();
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_stranger_without_the_secret_neither_joins_nor_stalls_nor_stops_the_cluster() {
    let cluster = Cluster::of("attacks", 3);
    let megaflux = env!("CARGO_BIN_EXE_megaflux").as_ref();
    // The attacked job runs until the test stops it, once every attack was made.
    let job = with_duration(REPLICATED_KEYCOUNT, UNTIL_STOPPED);
    let out = cluster.dir.join("attacked.jsonl");
    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Tally::default());
    let stranger = {
        let targets = (
            cluster.addresses.clone(),
            format!("127.0.0.1:{}", cluster.coordinator),
        );
        let (stop, tally) = (Arc::clone(&stop), Arc::clone(&tally));
        std::thread::spawn(move || attack(targets, &stop, &tally))
    };
    let mut procs = cluster.spawn_all(megaflux, &job, &out, None);
    formed(&mut procs);
    let mut victim = procs.remove(2);
    victim.kill();
    drop(victim);
    tally.killed.store(true, Ordering::Release);
    // The stranger asks for the lost place at its next turn, and goes on through the
    // survivors' restart and after it.
    restarted(&mut procs[0]);
    wait_until(
        "the stranger to ask to join in process 2's place, and to say more than 10 hellos",
        LIMIT,
        || tally.joins_after_kill.load(Ordering::Relaxed) > 0 && tally.hellos.load(Ordering::Relaxed) > 10,
    );
    common::stop(&mut procs[0]);
    let outputs = wait_all(procs, LIMIT);
    stop.store(true, Ordering::Release);
    stranger.join().expect("the stranger's thread");
    let what = format!(
        "under attack ({} flooded, {} hellos, {} joins after the kill, {} claims, {} garbage)",
        tally.flooded.load(Ordering::Relaxed),
        tally.hellos.load(Ordering::Relaxed),
        tally.joins_after_kill.load(Ordering::Relaxed),
        tally.claims.load(Ordering::Relaxed),
        tally.garbage.load(Ordering::Relaxed)
    );
    assert!(
        !tally.welcomed.load(Ordering::Acquire),
        "{what}: a guess was welcomed"
    );
    assert!(
        tally.hellos.load(Ordering::Relaxed) > 10,
        "{what}: the stranger hardly tried"
    );
    // Each attack was made: a flood while the coordinator admitted its members, and joins
    // for the place of the process killed. (Garbage reaches process 0's timely port only
    // while it listens, as the cluster forms or restarts: a loaded machine's stranger can
    // miss both, so its count is said, not required.)
    assert!(
        tally.flooded.load(Ordering::Relaxed) >= FLOOD as u64 / 2,
        "{what}: the flood did not reach the coordinator"
    );
    assert!(
        tally.joins_after_kill.load(Ordering::Relaxed) > 0,
        "{what}: no join after the kill"
    );
    // The same epochs, unattacked and without the crash.
    let base_out = cluster.dir.join("base.jsonl");
    let epochs = same_epochs(&summary(&outputs[0]), EPOCH_US);
    let base_job = with_duration(REPLICATED_KEYCOUNT, &epochs);
    let base = wait_all(cluster.spawn_all(megaflux, &base_job, &base_out, None), LIMIT);
    for o in &base {
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let base_lines = sorted_lines(&base_out);
    let s = assert_same_outputs(&outputs, &summary(&base[0]), (&out, &base_lines), &what);
    assert_eq!(
        s["crashes"][0]["processes"],
        serde_json::json!([2]),
        "{what}: {s}"
    );
}
