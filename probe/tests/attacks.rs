//! A real job's collector on a public address under attack: an oversized hello, hundreds of
//! idle connections and a client that keeps opening silent ones, a subscriber that never
//! reads, subscribers without the token, wrong tokens guessed, exporters speaking for others
//! or lying about numbers and clocks, an impostor exporter that goes silent, a flood of
//! commands from 40 clients that never read, a target spec of 60 kB. The job's output is
//! that of a job nobody attacked, the job grows by less than 64 MiB, the trace is whole, and
//! a well-behaved viewer is served from start to end.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use megaflux::Bins;
use megaflux::control::ControlHandle;
use megaflux::harness::RunConfig;
use megaflux_probe::ProbeLayer;
use megaflux_probe::collector::{Collector, CollectorConfig, Limits};
use megaflux_probe::event::{Event, Outcome, Stamped};
use megaflux_probe::export::Exporter;
use megaflux_probe::model::JobModel;
use megaflux_probe::record::TraceHeader;
use megaflux_probe::wire::{
    self, ClientFrame, CommandRequest, Connection, PROTOCOL_VERSION, Role, ServerFrame, Subscription,
};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpSocket, TcpStream};
use tracing_subscriber::prelude::*;

mod common;
use common::{ask, closed};

const TOKEN: &str = "s3cret";
/// Enough bins for the flood's moves of 7,000 bins.
const BINS: u32 = 8192;

/// The attacked job: it runs until well after the attacks end (about 28 s on an idle
/// machine, past 30 s under load, when the last command found the job finished).
fn config() -> RunConfig {
    RunConfig {
        bins: Bins::new(BINS as usize).unwrap(),
        ..common::job(45)
    }
}

fn limits() -> Limits {
    Limits {
        hello_timeout: Duration::from_secs(1),
        send_timeout: Duration::from_secs(2),
        exporter_quiet: Duration::from_secs(5),
        ..Limits::default()
    }
}

/// The job as its collector is told: two processes of one worker each, so that worker 1
/// is process 1's (the job itself runs both workers in this process).
fn hello_event() -> Event {
    Event::Hello {
        processes: 2,
        workers: 1,
        peers: 2,
        bins: BINS,
        config: serde_json::json!({}),
        anchor_unix_s: None,
    }
}

fn of(process: u32, event: Event) -> Stamped {
    Stamped {
        at_s: 0.0,
        process,
        event,
    }
}

fn stats(worker: u32) -> Event {
    Event::WorkerStats {
        worker,
        records: 1,
        applied: None,
        busy_ns: 1,
        interval_ns: 1,
    }
}

/// A connection from the loopback address `source` (every 127.x.y.z is this machine's),
/// so that tests can be clients at different addresses.
async fn from(source: [u8; 4], addr: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::from((source, 0))).unwrap();
    socket.connect(addr).await.unwrap()
}

async fn hello_from(
    source: [u8; 4],
    addr: SocketAddr,
    role: Role,
    token: Option<&str>,
) -> Connection<TcpStream> {
    let mut conn = Connection::new(from(source, addr).await);
    conn.send(&ClientFrame::Hello {
        protocol: PROTOCOL_VERSION,
        role,
        token: token.map(str::to_string),
    })
    .await
    .unwrap();
    conn
}

async fn hello(addr: SocketAddr, role: Role, token: Option<&str>) -> Connection<TcpStream> {
    hello_from([127, 0, 0, 1], addr, role, token).await
}

/// A subscriber holding the token, at `source`.
async fn subscribe_from(source: [u8; 4], addr: SocketAddr) -> Subscription {
    let mut conn = Connection::new(from(source, addr).await);
    wire::handshake(&mut conn, addr, Role::Subscriber, Some(TOKEN.into()))
        .await
        .unwrap();
    Subscription::new(conn)
}

/// A viewer that follows the job to its end: the model it saw.
async fn viewer(addr: SocketAddr) -> JobModel {
    let mut conn = wire::subscribe(addr, Some(TOKEN.into())).await.unwrap();
    let mut model = JobModel::new();
    loop {
        match conn.recv().await {
            Ok(Some(ServerFrame::Snapshot { model: m })) => model = *m,
            Ok(Some(ServerFrame::Events { events })) => events.iter().for_each(|e| model.apply(e)),
            Ok(Some(_)) => {}
            Ok(None) => return model,
            Err(e) => panic!("the viewer's feed broke: {e}"),
        }
        if model.workers.len() == 2 && model.workers.values().all(|w| w.finished) {
            return model;
        }
    }
}

/// This process's resident memory, in bytes.
fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap();
    kb << 10
}

/// The most resident memory seen until `stop`, sampled every 10 ms.
fn peak_rss(stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        let mut peak = rss();
        while !stop.load(Ordering::Relaxed) {
            peak = peak.max(rss());
            std::thread::sleep(Duration::from_millis(10));
        }
        peak
    })
}

/// The issue's command flood: 40 clients at one address, each sending 32 moves of 7,000
/// bins (written as lists of numbers, the costliest form) and never reading. Returns the
/// clients, to be dropped when the flood is over.
async fn command_flood(addr: SocketAddr) -> Vec<Connection<TcpStream>> {
    let bins: Vec<usize> = (0..7000).collect();
    let mut clients = Vec::new();
    for _ in 0..40 {
        // Taking little into its socket, it soon loses events.
        let socket = TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        let mut conn = Connection::new(socket.connect(addr).await.unwrap());
        let hello = ClientFrame::Hello {
            protocol: PROTOCOL_VERSION,
            role: Role::Subscriber,
            token: Some(TOKEN.into()),
        };
        conn.send(&hello).await.unwrap();
        for request in 0..32 {
            let frame = serde_json::json!({
                "type": "command",
                "request": request,
                "command": { "command": "move_bins", "bins": bins, "worker": 1, "standby": false },
            });
            // The collector stops reading an address that spent its budget: move on.
            if !matches!(
                tokio::time::timeout(Duration::from_millis(20), conn.send(&frame)).await,
                Ok(Ok(()))
            ) {
                break;
            }
        }
        clients.push(conn);
    }
    clients
}

/// Opens connections that say nothing, 20 at a time, until `stop`: they take every place
/// of those waiting for a hello, again and again.
async fn silent_connections(addr: SocketAddr, stop: Arc<AtomicBool>) -> usize {
    let mut opened = 0;
    let mut held = std::collections::VecDeque::new();
    while !stop.load(Ordering::Relaxed) {
        for _ in 0..20 {
            if let Ok(s) = TcpStream::connect(addr).await {
                held.push_back(s);
                opened += 1;
            }
        }
        while held.len() > 200 {
            held.pop_front();
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    opened
}

/// Emits `n` statistics of worker 0, as the job would, to fill stalled subscribers' queues.
fn burst(n: u64) {
    for records in 0..n {
        tracing::info!(target: "megaflux::worker", worker = 0u32, records, busy_ns = 1u64, interval_ns = 250_000_000u64);
    }
}

#[test]
fn an_attacked_collector_keeps_the_job_and_its_viewers_whole() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("attacked.jsonl");
    let (layer, queue) = ProbeLayer::new(0, 1 << 20);
    let hello_stamped = layer.stamp(hello_event());
    tracing_subscriber::registry().with(layer.filtered()).init();
    let control = ControlHandle::new();
    let header = TraceHeader::new(serde_json::json!({}), 2, 1, BINS, vec![0; BINS as usize]);
    let collector = Collector::start(
        CollectorConfig {
            serve: Some("0.0.0.0:0".parse().unwrap()),
            token: Some(TOKEN.into()),
            record: Some((trace.clone(), header)),
            control: Some(control.clone()),
            hello: Some(hello_stamped),
            limits: limits(),
            replace: false,
        },
        queue,
    )
    .unwrap();
    let port = collector.local_addr().unwrap().port();
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let job = std::thread::spawn(move || megaflux::workload::run(config(), control).unwrap().unwrap());

    let rt = common::runtime();
    // The well-behaved viewer, on a thread of its own (the attacks below block theirs).
    let watching = std::thread::spawn(move || {
        let rt = common::runtime();
        rt.block_on(viewer(addr))
    });
    let began = std::time::Instant::now();
    let phase = |name: &str| eprintln!("{:>6.1} s  {name}", began.elapsed().as_secs_f64());
    let attacks = rt.block_on(async {
        // Without the token nobody is served on a public address, viewers included.
        let reason = closed(hello(addr, Role::Subscriber, None).await).await;
        assert!(reason.unwrap().contains("token"));
        let reason = closed(hello(addr, Role::Subscriber, Some("s3cre")).await).await;
        assert!(reason.unwrap().contains("token"));
        let reason = closed(hello(addr, Role::Exporter { process: 1 }, None).await).await;
        assert!(reason.unwrap().contains("token"));

        phase("guesses");
        // Guessing the token: after a few wrong ones an address waits, even with the right
        // one; another address does not.
        let mut reasons = Vec::new();
        for _ in 0..8 {
            let guess = hello_from([127, 0, 0, 3], addr, Role::Subscriber, Some("guess")).await;
            reasons.push(closed(guess).await.unwrap_or_default());
        }
        assert!(reasons[0].contains("token"), "{reasons:?}");
        assert!(reasons[7].contains("too many wrong tokens"), "{reasons:?}");
        let right = hello_from([127, 0, 0, 3], addr, Role::Subscriber, Some(TOKEN)).await;
        assert!(
            closed(right)
                .await
                .unwrap_or_default()
                .contains("too many wrong tokens")
        );

        phase("oversized");
        // An oversized hello: refused from its length prefix, before it is read.
        let mut big = TcpStream::connect(addr).await.unwrap();
        big.write_all(&(15u32 << 20).to_be_bytes()).await.unwrap();
        let _ = big.write_all(&[b'{'; 64 << 10]).await;
        let reason = closed(Connection::new(big)).await.unwrap_or_default();
        assert!(reason.contains("frame"), "{reason}");
        // A hello within the limit whose type is a long string: the reason is cut short.
        let mut long = Connection::new(TcpStream::connect(addr).await.unwrap());
        long.send(&serde_json::json!({ "type": "x".repeat(3000) }))
            .await
            .unwrap();
        let reason = closed(long).await.unwrap();
        assert!(reason.len() < 400, "{} bytes", reason.len());

        // Exporters that speak for others, say what only process 0 or the collector says,
        // carry a huge configuration, stamp their hello a lifetime away or tell of moves
        // between other workers, are closed.
        let mut big_hello = of(1, hello_event());
        if let Event::Hello { config, .. } = &mut big_hello.event {
            *config = serde_json::json!({ "pad": "x".repeat(1 << 20) });
        }
        let mut far_hello = of(1, hello_event());
        far_hello.at_s = 1e300;
        let planted = Event::Migration {
            phase: megaflux_probe::event::Phase::Extracted,
            bin: 1,
            time: 1,
            operator: Some("count".into()),
            worker: Some(1),
            from: Some(0),
            to: Some(1),
            bytes: None,
            chunks: None,
            step: None,
            primary: None,
            standby: None,
            copy: None,
        };
        let liars = [
            vec![of(1, hello_event()), of(1, stats(0))],
            vec![of(1, hello_event()), of(1, hello_event())],
            vec![
                of(1, hello_event()),
                of(
                    1,
                    Event::Recording {
                        on: false,
                        failed: None,
                    },
                ),
            ],
            vec![
                of(1, hello_event()),
                of(
                    1,
                    Event::JobFinished {
                        worker: 0,
                        records: 0,
                    },
                ),
            ],
            vec![of(1, hello_event()), of(0, stats(0))],
            vec![big_hello],
            vec![far_hello],
            vec![of(1, hello_event()), of(1, planted)],
        ];
        for events in liars {
            let mut liar = hello(addr, Role::Exporter { process: 1 }, Some(TOKEN)).await;
            let welcome = liar.recv::<ServerFrame>().await.unwrap();
            assert!(
                matches!(welcome, Some(ServerFrame::Welcome { .. })),
                "{welcome:?}"
            );
            let _ = liar.send(&ClientFrame::Events { events }).await;
            closed(liar).await;
        }

        phase("impostor");
        // An impostor holding the token says hello as process 1 and goes silent; an
        // exporter whose numbers are extreme replaces it (numbers saturate, its clock is
        // stamped back) and reports a real loss of its queue.
        let mut impostor = hello(addr, Role::Exporter { process: 1 }, Some(TOKEN)).await;
        assert!(matches!(
            impostor.recv::<ServerFrame>().await,
            Ok(Some(ServerFrame::Welcome { .. }))
        ));
        impostor
            .send(&ClientFrame::Events {
                events: vec![of(1, hello_event())],
            })
            .await
            .unwrap();
        let mut extreme = hello(addr, Role::Exporter { process: 1 }, Some(TOKEN)).await;
        assert!(matches!(
            extreme.recv::<ServerFrame>().await,
            Ok(Some(ServerFrame::Welcome { .. }))
        ));
        let mut ahead = of(1, stats(1));
        ahead.at_s = 1e300;
        let huge = |bin| Event::BinSize {
            worker: 1,
            operator: "count".into(),
            bin,
            keys: u64::MAX,
            bytes: u64::MAX,
            standby: false,
        };
        let events = vec![
            of(1, hello_event()),
            ahead,
            of(
                1,
                Event::WorkerStats {
                    worker: 1,
                    records: u64::MAX,
                    applied: Some(u64::MAX),
                    busy_ns: u64::MAX,
                    interval_ns: 1,
                },
            ),
            of(1, huge(0)),
            of(1, huge(1)),
            of(
                1,
                Event::Dropped {
                    place: "queue".into(),
                    count: 7,
                },
            ),
            // An operator the job does not have: it takes none of the model's places.
            of(
                1,
                Event::BinSize {
                    worker: 1,
                    operator: "planted".into(),
                    bin: 2,
                    keys: 1,
                    bytes: 1,
                    standby: false,
                },
            ),
        ];
        extreme.send(&ClientFrame::Events { events }).await.unwrap();
        let impostor_closed = closed(impostor).await;

        phase("silent");
        // A client keeps opening connections that say nothing (hundreds, held until the
        // hello's time limit): the real exporter of process 1 still gets in (and replaces
        // the one before it).
        let stop_silence = Arc::new(AtomicBool::new(false));
        let silence = tokio::spawn(silent_connections(addr, Arc::clone(&stop_silence)));
        tokio::time::sleep(Duration::from_millis(300)).await;
        let exporting = tokio::task::spawn_blocking(move || {
            let (layer, queue) = ProbeLayer::new(1, 16);
            let hello = layer.stamp(hello_event());
            Exporter::start(addr, 1, Some(TOKEN.into()), hello, queue).and_then(Exporter::finish)
        });
        let exported = exporting.await.unwrap();
        stop_silence.store(true, Ordering::Relaxed);
        let opened = silence.await.unwrap();
        closed(extreme).await;

        phase("stalled");
        // A subscriber that never reads its feed (and takes little into its socket): it
        // loses events, then is closed; the others go on. It stalls with the flood below.
        let socket = TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        let mut stalled = Connection::new(socket.connect(addr).await.unwrap());
        let hello_frame = ClientFrame::Hello {
            protocol: PROTOCOL_VERSION,
            role: Role::Subscriber,
            token: Some(TOKEN.into()),
        };
        stalled.send(&hello_frame).await.unwrap();
        let welcome = stalled.recv::<ServerFrame>().await.unwrap();
        assert!(
            matches!(welcome, Some(ServerFrame::Welcome { .. })),
            "{welcome:?}"
        );

        phase("moved");
        // The flood's moves are allowed through a burst: the first one moves 7000 bins for
        // real, and that move's events (about 21k, for the model and every viewer) cost the
        // job tens of MiB whoever asked for it. Made here first, by a client that does not
        // flood, the flood's own moves find the bins where they ask for them, and what is
        // measured below is what the flood costs.
        let mut mover = subscribe_from([127, 0, 0, 3], addr).await;
        let first = ask(
            &mut mover,
            vec![CommandRequest::MoveBins {
                bins: (0..7000).collect(),
                worker: 1,
                standby: false,
            }],
        )
        .await;
        assert_eq!(first[0].0, Outcome::Applied, "{first:?}");
        tokio::time::sleep(Duration::from_secs(2)).await;

        phase("flood");
        // The command flood, twice: each wave's 40 clients never read, and lose events to a
        // burst; 80 stalled viewers in all, more than the model keeps places of drops for.
        // Measured from before each wave's commands to before its burst (the burst fills
        // the test's own event queue, which is no client's doing).
        let mut grown = 0u64;
        for _ in 0..2 {
            let before = rss();
            let stop_sampling = Arc::new(AtomicBool::new(false));
            let sampling = peak_rss(Arc::clone(&stop_sampling));
            let clients = command_flood(addr).await;
            tokio::time::sleep(Duration::from_secs(2)).await;
            stop_sampling.store(true, Ordering::Relaxed);
            grown = grown.max(sampling.join().unwrap().saturating_sub(before));
            burst(150_000);
            tokio::time::sleep(limits().send_timeout * 2).await;
            drop(clients);
        }

        phase("cancels");
        // Another address floods with cancels: a burst gets through, the rest is refused
        // unlogged.
        let mut flooder = subscribe_from([127, 0, 0, 4], addr).await;
        let flood = ask(&mut flooder, vec![CommandRequest::CancelPlan; 500]).await;

        phase("good");
        // The job still takes a good command from a client that did not flood, and refuses
        // a 60 kB target in a few words.
        let mut good = subscribe_from([127, 0, 0, 2], addr).await;
        let moved = ask(
            &mut good,
            vec![
                CommandRequest::MoveBins {
                    bins: vec![0, 1, 2, 3],
                    worker: 1,
                    standby: false,
                },
                CommandRequest::StartPlan {
                    schedule: "fluid".into(),
                    target: format!("map:{}", "1,".repeat(30_000)),
                },
            ],
        )
        .await;
        drop(stalled);
        Attacks {
            flood,
            moved,
            impostor_closed,
            exported,
            opened,
            grown,
        }
    });

    let summary = job.join().unwrap();
    let seen = watching.join().unwrap();
    let report = collector.finish(Duration::ZERO, None).unwrap();

    // The well-behaved viewer followed the job to its end.
    assert_eq!(seen.workers.len(), 2);
    assert!(
        seen.workers.values().all(|w| w.finished),
        "{:?} {:?} {:?}",
        seen.workers,
        report.closed,
        seen.dropped
    );
    assert_eq!(attacks.moved[0].0, Outcome::Applied, "{:?}", attacks.moved);
    assert_eq!(attacks.moved[1].0, Outcome::Rejected, "{:?}", attacks.moved);
    assert!(
        attacks.moved[1].1.len() < 400,
        "{} bytes",
        attacks.moved[1].1.len()
    );

    // The command flood cost the job little memory (it cost 968 MiB before budgets; 9.3-9.5
    // MiB on 2026-12-06, once a connection no longer copied each frame it sent).
    eprintln!(
        "the command flood (2 waves of 40 clients x 32 moves of 7000 bins) grew the job by {:.1} MiB",
        attacks.grown as f64 / f64::from(1 << 20)
    );
    assert!(
        attacks.grown < 32 << 20,
        "the flood grew the job by {} MiB",
        attacks.grown >> 20
    );

    // The real exporter got in under the silent connections, past the impostor.
    assert!(attacks.opened > 100, "{} silent connections", attacks.opened);
    assert!(attacks.exported.is_ok(), "{:?}", attacks.exported);
    assert!(
        attacks.impostor_closed.is_none(),
        "the impostor was closed without a refusal"
    );
    assert!(
        report
            .closed
            .iter()
            .any(|r| r.contains("newer exporter of process 1")),
        "{:?}",
        report.closed
    );
    // The extreme numbers saturated, the clock stayed near the job's, and process 1's loss
    // is shown although 80 stalled viewers lost events too.
    assert!(
        report.model.now_s < 1e6,
        "the model's clock went to {}",
        report.model.now_s
    );
    assert!(
        !report.model.operators.contains_key("planted"),
        "{:?}",
        report.model.operators.keys()
    );
    assert_eq!(
        report.model.dropped.get("process 1 queue"),
        Some(&7),
        "{:?}",
        report.model.dropped
    );
    let viewers_dropping = report
        .model
        .dropped
        .keys()
        .filter(|place| place.contains("subscriber"))
        .count();
    assert!(viewers_dropping > 1, "{:?}", report.model.dropped);

    // The flood: the burst reached the job (which has no plan to cancel); the rest never
    // reached the collector's log.
    let limits = limits();
    let refused = attacks
        .flood
        .iter()
        .filter(|(_, r)| r.contains("too many commands"))
        .count();
    let passed = attacks.flood.len() - refused;
    assert!(passed >= limits.commands_burst as usize, "{passed} passed");
    assert!(passed < 100, "{passed} passed");
    assert!(
        report
            .model
            .commands
            .iter()
            .all(|c| !c.reason.as_deref().unwrap_or("").contains("too many") && c.command.len() < 400),
        "{:?}",
        report.model.commands
    );

    // The attackers: turned away or closed with short reasons, nothing else kept.
    // Every silent connection went: the oldest when new ones needed their place, the rest
    // at the hello's time limit.
    assert!(report.turned_away > 0);
    assert!(
        report.turned_away + report.closed_total >= attacks.opened as u64,
        "{} turned away and {} closed of {} silent connections",
        report.turned_away,
        report.closed_total,
        attacks.opened
    );
    assert_eq!(report.closed.len(), limits.reasons_kept);
    assert!(report.closed_total > limits.reasons_kept as u64);
    assert!(report.closed.iter().all(|r| r.len() < 400));
    for reason in [
        "worker 0",
        "second hello",
        "`recording`",
        "process 0",
        "configuration of",
        "stands",
        "not its own side",
    ] {
        assert!(
            report.closed.iter().any(|r| r.contains(reason)),
            "{reason}: {:?}",
            report.closed
        );
    }
    // The trace was never stopped by anyone but the collector, reads back whole, and no
    // command in it is long.
    assert_eq!(report.model.recording, Some(true));
    assert!(report.recording_failed.is_none());
    let recorded = megaflux_probe::record::read(&trace).unwrap();
    assert!(recorded.unreadable.is_empty(), "{}", recorded.unreadable);
    assert!(
        recorded
            .events
            .iter()
            .all(|e| !matches!(e.event, Event::Recording { on: false, .. }))
    );
    for event in &recorded.events {
        if let Event::Command {
            command,
            request,
            reason,
            ..
        } = &event.event
        {
            let size = command.len()
                + reason.as_ref().map_or(0, String::len)
                + request.as_ref().map_or(0, |r| r.to_string().len());
            assert!(size < 1000, "a command of {size} bytes in the trace: {command}");
        }
    }

    // The job computed what a job nobody attacked computes (as fast as it goes: the same
    // records at the same logical times).
    let quiet = RunConfig {
        pace: megaflux::harness::Pace::Max,
        ..config()
    };
    let quiet = megaflux::workload::run(quiet, ControlHandle::new())
        .unwrap()
        .unwrap();
    assert_eq!(summary.output_digest, quiet.output_digest);
    assert_eq!(summary.outputs, quiet.outputs);
}

/// What the attacks saw.
struct Attacks {
    flood: Vec<(Outcome, String)>,
    moved: Vec<(Outcome, String)>,
    impostor_closed: Option<String>,
    exported: Result<u64, megaflux_probe::ProbeError>,
    opened: usize,
    grown: u64,
}

/// A trace that lies: a `latency` line whose histogram header claims a 4 GiB payload while
/// a plan is open (hdrhistogram allocates what a header claims), and an unreadable line in
/// the middle. The trace is read whole but for that line, which is named; the histogram is
/// refused before it is decoded, and the window's figures still count.
#[test]
fn a_trace_that_lies_is_read_safely() {
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD as BASE64;

    let mut h = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).unwrap();
    h.record(1_000_000).unwrap();
    let mut bytes = BASE64.decode(megaflux::latency::encode(&h).unwrap()).unwrap();
    bytes[4..8].copy_from_slice(&u32::MAX.to_be_bytes());
    let lying = BASE64.encode(bytes);
    let header = TraceHeader::new(serde_json::json!({}), 1, 2, 16, vec![0; 16]);
    let line = |event: Event, at_s: f64| {
        serde_json::to_string(&Stamped {
            at_s,
            process: 0,
            event,
        })
        .unwrap()
    };
    let mut text = serde_json::to_string(&header).unwrap();
    let hello = Event::Hello {
        processes: 1,
        workers: 2,
        peers: 2,
        bins: 16,
        config: serde_json::json!({}),
        anchor_unix_s: None,
    };
    let plan = Event::PlanStarted {
        strategy: "fluid".into(),
        target: "pack:1".into(),
        steps: 16,
        bins: 16,
        purpose: None,
        id: Some(0),
        time: Some(1),
        run_s: Some(0.1),
    };
    let window = Event::Latency {
        window: 1,
        t_s: 0.25,
        count: 1,
        p50: 1_000_000,
        p99: 1_000_000,
        max: 1_000_000,
        histogram: lying,
    };
    // Line 4 (the header is line 1) is cut in the middle of an event.
    for l in [
        line(hello, 0.0),
        line(plan, 0.1),
        r#"{"at_s": 0.2, "process": 0, "kind": "worker_stats", "worker""#.to_string(),
        line(window, 0.3),
        line(stats(1), 0.4),
    ] {
        text.push('\n');
        text.push_str(&l);
    }
    text.push('\n');
    let trace = megaflux_probe::record::read_from(text.as_bytes(), "lying").unwrap();
    assert_eq!(trace.events.len(), 4, "every line but the unreadable one");
    assert_eq!(trace.unreadable.lines().to_vec(), vec![4]);
    let mut model = JobModel::new();
    trace.events.iter().for_each(|e| model.apply(e));
    assert_eq!(model.latency.len(), 1, "the window counts without its histogram");
    assert!(model.plan.is_some());
}

#[test]
fn an_empty_token_is_refused_at_start() {
    let (_layer, queue) = ProbeLayer::new(0, 16);
    let err = Collector::start(
        CollectorConfig {
            serve: Some("127.0.0.1:0".parse().unwrap()),
            token: Some(String::new()),
            ..CollectorConfig::default()
        },
        queue,
    )
    .err()
    .expect("refused");
    assert!(err.to_string().contains("empty"), "{err}");
}
