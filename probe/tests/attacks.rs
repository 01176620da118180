//! A real job's collector on a public address under attack: an oversized hello, hundreds of
//! idle connections and a client that keeps opening silent ones, a subscriber that never
//! reads, subscribers without the token, wrong tokens guessed, exporters speaking for others
//! or lying about numbers and clocks, an impostor exporter that goes silent, a flood of
//! commands from 40 clients that never read, a target spec of 60 kB. The job's output is
//! that of a job nobody attacked, the job grows by less than 32 MiB, the trace is whole, and
//! a well-behaved viewer is served from start to end.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

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
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tracing_subscriber::prelude::*;

mod common;
use common::{NET, RUN, ask, background, bounded, closed};

const TOKEN: &str = "s3cret";
/// Enough bins for the flood's moves of 7,000 bins.
const BINS: u32 = 8192;
/// The bins each of the flood's moves names.
const FLOOD_BINS: usize = 7000;
/// The loss of its queue the extreme exporter reports.
const EXTREME_LOST: u64 = 7;

/// The attacked job: it runs until the attacks are over (they took 28 s on an idle machine
/// and over 120 s on a loaded one), when the test stops it.
fn config() -> RunConfig {
    RunConfig {
        bins: Bins::new(BINS as usize).unwrap(),
        ..common::job_until_stopped()
    }
}

/// Where the client that opens silent connections connects from: an address of its own, as
/// an attacker's would be (the collector makes a client that floods it with connections
/// give up its own places, not the others').
const SILENT: [u8; 4] = [127, 0, 0, 7];
/// Where the test watches the model from (a subscriber that keeps up).
const WATCHER: [u8; 4] = [127, 0, 0, 5];

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
        outputs_total: None,
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
    bounded("a connection to the collector", NET, socket.connect(addr))
        .await
        .unwrap()
}

async fn hello_from(
    source: [u8; 4],
    addr: SocketAddr,
    role: Role,
    token: Option<&str>,
) -> Connection<TcpStream> {
    let mut conn = Connection::new(from(source, addr).await);
    let hello = ClientFrame::Hello {
        protocol: PROTOCOL_VERSION,
        role,
        token: token.map(str::to_string),
    };
    bounded("the collector to take a hello", NET, conn.send(&hello))
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
    let welcome = wire::handshake(&mut conn, addr, Role::Subscriber, Some(TOKEN.into()));
    bounded("the collector's welcome", NET, welcome).await.unwrap();
    Subscription::new(conn)
}

/// A viewer that follows the job to its end: the model it saw. The collector sends the
/// job's statistics several times a second: a feed silent for [`NET`] is a hang.
async fn viewer(addr: SocketAddr) -> JobModel {
    let subscribing = wire::subscribe(addr, Some(TOKEN.into()));
    let mut conn = bounded("the viewer's welcome", NET, subscribing).await.unwrap();
    let mut model = JobModel::new();
    loop {
        match bounded("the viewer's next frame", NET, conn.recv()).await {
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

/// The collector's model once it is as `done` says, read from a snapshot a new subscriber
/// at [`WATCHER`] is sent (the collector's own model, whatever a subscriber lost), taken
/// again every 250 ms. Fails naming `what`, with the last snapshot, if the model does not
/// get there within [`NET`].
async fn model_when(addr: SocketAddr, what: &str, done: impl Fn(&JobModel) -> bool) -> JobModel {
    let mut last = JobModel::new();
    let poll = async {
        loop {
            let mut conn = subscribe_from(WATCHER, addr).await;
            last = loop {
                match conn.recv().await {
                    Ok(Some(ServerFrame::Snapshot { model })) => break *model,
                    Ok(Some(_)) => continue,
                    Ok(None) => panic!("the collector closed the watcher waiting for {what}"),
                    Err(e) => panic!("the watcher's feed broke waiting for {what}: {e}"),
                }
            };
            if done(&last) {
                return;
            }
            drop(conn);
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    };
    let limit = megaflux_testkit::deadline(NET);
    if tokio::time::timeout(limit, poll).await.is_err() {
        panic!("waited {limit:?} for {what}; the model then: {}", describe(&last));
    }
    last
}

/// Subscribers whose losses `model` shows.
fn viewers_dropping(model: &JobModel) -> usize {
    model
        .dropped
        .keys()
        .filter(|place| place.contains("subscriber"))
        .count()
}

/// What a failure shows of a model: its moves, its bins' owners, its losses.
fn describe(model: &JobModel) -> String {
    let owners: Vec<String> = model
        .operators
        .iter()
        .map(|(operator, bins)| {
            let mut by_owner = std::collections::BTreeMap::<Option<u32>, usize>::new();
            bins.iter()
                .for_each(|b| *by_owner.entry(b.owner).or_default() += 1);
            format!("{operator}: {} bins by owner {by_owner:?}", bins.len())
        })
        .collect();
    format!(
        "{} bins moving (first {:?}); {owners:?}; frontiers {:?}; dropped {:?}; {} events",
        model.moving.len(),
        model.moving.values().next(),
        model.frontiers,
        model.dropped,
        model.events
    )
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
fn peak_rss(stop: Arc<AtomicBool>) -> common::Background<u64> {
    background("the memory sampler", move || {
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
    let bins: Vec<usize> = (0..FLOOD_BINS).collect();
    let mut clients = Vec::new();
    for _ in 0..40 {
        // Taking little into its socket, it soon loses events.
        let socket = TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        let stream = bounded("a connection to the collector", NET, socket.connect(addr)).await;
        let mut conn = Connection::new(stream.unwrap());
        let hello = ClientFrame::Hello {
            protocol: PROTOCOL_VERSION,
            role: Role::Subscriber,
            token: Some(TOKEN.into()),
        };
        bounded("the collector to take a hello", NET, conn.send(&hello))
            .await
            .unwrap();
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

/// Silent connections to the collector.
#[derive(Default)]
struct Silence {
    /// Connections opened.
    opened: AtomicUsize,
    /// Connections the collector closed.
    closed: AtomicUsize,
    /// Of them, those closed before their hello's time limit: the collector turned them away
    /// for newer ones (it closes a silent connection for nothing else).
    turned_away: AtomicUsize,
}

/// Connections from [`SILENT`] the client holds at most: it opens more as the collector
/// closes some, never closing one itself.
const HELD: usize = 200;

/// Opens connections from [`SILENT`] that say nothing, 20 at a time, until `stop`: they take
/// every place of those waiting for a hello, again and again. Each is held until the
/// collector closes it, so that every one of them is the collector's doing (turned away, or
/// closed at the hello's time limit); once stopped, waits until the collector has closed
/// them all. Counts in `silence`.
async fn silent_connections(
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    silence: Arc<Silence>,
    hello_timeout: Duration,
) {
    let held = Arc::new(tokio::sync::Semaphore::new(HELD));
    let mut connections = tokio::task::JoinSet::new();
    while !stop.load(Ordering::Relaxed) {
        for _ in 0..20 {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            let waiting = Arc::clone(&held).acquire_owned();
            let place = bounded("the collector to close a silent connection", NET, waiting)
                .await
                .unwrap();
            let socket = TcpSocket::new_v4().unwrap();
            socket.bind(SocketAddr::from((SILENT, 0))).unwrap();
            // Before the connection exists: the collector's hello limit starts later.
            let opened = Instant::now();
            let Ok(Ok(mut stream)) = tokio::time::timeout(NET, socket.connect(addr)).await else {
                continue;
            };
            silence.opened.fetch_add(1, Ordering::Relaxed);
            let silence = Arc::clone(&silence);
            connections.spawn(async move {
                // The collector sends a silent connection nothing: the read ends when it
                // closes the connection.
                let mut buf = [0u8; 64];
                while let Ok(1..) = stream.read(&mut buf).await {}
                if opened.elapsed() < hello_timeout {
                    silence.turned_away.fetch_add(1, Ordering::Relaxed);
                }
                silence.closed.fetch_add(1, Ordering::Relaxed);
                drop(place);
            });
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let what = "the collector to close every silent connection (turned away, or at the hello's time limit)";
    bounded(what, NET, async {
        while let Some(ended) = connections.join_next().await {
            ended.unwrap();
        }
    })
    .await;
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
            ..CollectorConfig::default()
        },
        queue,
    )
    .unwrap();
    let port = collector.local_addr().unwrap().port();
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let job = {
        let control = control.clone();
        background("the attacked job", move || {
            megaflux::workload::run(config(), control).unwrap().unwrap()
        })
    };

    let rt = common::runtime();
    // The well-behaved viewer, on a thread of its own (the attacks below block theirs).
    let watching = background("the well-behaved viewer to see the job finish", move || {
        common::runtime().block_on(viewer(addr))
    });
    let began = Instant::now();
    let phase = |name: &str| {
        eprintln!(
            "{:>6.1} s  {name} (rss {} MiB)",
            began.elapsed().as_secs_f64(),
            rss() >> 20
        )
    };
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
        let mut big = from([127, 0, 0, 1], addr).await;
        bounded(
            "the collector to take a length prefix",
            NET,
            big.write_all(&(15u32 << 20).to_be_bytes()),
        )
        .await
        .unwrap();
        let _ = tokio::time::timeout(NET, big.write_all(&[b'{'; 64 << 10])).await;
        let reason = closed(Connection::new(big)).await.unwrap_or_default();
        assert!(reason.contains("frame"), "{reason}");
        // A hello within the limit whose type is a long string: the reason is cut short.
        let mut long = Connection::new(from([127, 0, 0, 1], addr).await);
        let frame = serde_json::json!({ "type": "x".repeat(3000) });
        bounded("the collector to take a long hello", NET, long.send(&frame))
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
                        outputs: None,
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
            let welcome = bounded("an exporter's welcome", NET, liar.recv::<ServerFrame>())
                .await
                .unwrap();
            assert!(
                matches!(welcome, Some(ServerFrame::Welcome { .. })),
                "{welcome:?}"
            );
            let _ = tokio::time::timeout(NET, liar.send(&ClientFrame::Events { events })).await;
            closed(liar).await;
        }

        phase("impostor");
        // An impostor holding the token says hello as process 1 and goes silent; an
        // exporter whose numbers are extreme replaces it (numbers saturate, its clock is
        // stamped back) and reports a real loss of its queue.
        let mut impostor = hello(addr, Role::Exporter { process: 1 }, Some(TOKEN)).await;
        assert!(matches!(
            bounded("the impostor's welcome", NET, impostor.recv::<ServerFrame>()).await,
            Ok(Some(ServerFrame::Welcome { .. }))
        ));
        let frame = ClientFrame::Events {
            events: vec![of(1, hello_event())],
        };
        bounded(
            "the collector to take the impostor's hello",
            NET,
            impostor.send(&frame),
        )
        .await
        .unwrap();
        let mut extreme = hello(addr, Role::Exporter { process: 1 }, Some(TOKEN)).await;
        assert!(matches!(
            bounded(
                "the extreme exporter's welcome",
                NET,
                extreme.recv::<ServerFrame>()
            )
            .await,
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
                    outputs_total: None,
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
                    count: EXTREME_LOST,
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
        let frame = ClientFrame::Events { events };
        bounded(
            "the collector to take the extreme exporter's events",
            NET,
            extreme.send(&frame),
        )
        .await
        .unwrap();
        let impostor_closed = closed(impostor).await;
        // The extreme exporter's events are taken in (its loss shows in the model) before a
        // newer exporter of process 1 replaces it.
        let what = "the extreme exporter's loss to show in the model";
        model_when(addr, what, |m| m.dropped.contains_key("process 1 queue")).await;

        phase("silent");
        // A client keeps opening connections that say nothing (hundreds, held until the
        // collector closes them): once the collector is turning them away for newer ones, the
        // real exporter of process 1 connects, gets in (and replaces the one before it).
        let stop_silence = Arc::new(AtomicBool::new(false));
        let silence = Arc::new(Silence::default());
        let silent = tokio::spawn(silent_connections(
            addr,
            Arc::clone(&stop_silence),
            Arc::clone(&silence),
            limits().hello_timeout,
        ));
        let hundreds = 8 * limits().pending;
        let contested = async {
            while silence.turned_away.load(Ordering::Relaxed) == 0
                || silence.opened.load(Ordering::Relaxed) < hundreds
            {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        let what = format!("{hundreds} silent connections, taking every place for hellos (one turned away)");
        bounded(&what, NET, contested).await;
        phase("silent: contested");
        let exporting = tokio::task::spawn_blocking(move || {
            let (layer, queue) = ProbeLayer::new(1, 16);
            let hello = layer.stamp(hello_event());
            Exporter::start(addr, 1, Some(TOKEN.into()), hello, queue).and_then(Exporter::finish)
        });
        let exported = bounded("the real exporter to connect and finish", RUN, exporting)
            .await
            .unwrap();
        phase("silent: exported");
        stop_silence.store(true, Ordering::Relaxed);
        bounded("the silent client to end", RUN, silent).await.unwrap();
        closed(extreme).await;

        phase("stalled");
        // A subscriber that never reads its feed (and takes little into its socket): it
        // loses events, then is closed; the others go on. It stalls with the flood below.
        let socket = TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        let stream = bounded("a connection to the collector", NET, socket.connect(addr)).await;
        let mut stalled = Connection::new(stream.unwrap());
        let hello_frame = ClientFrame::Hello {
            protocol: PROTOCOL_VERSION,
            role: Role::Subscriber,
            token: Some(TOKEN.into()),
        };
        bounded("the collector to take a hello", NET, stalled.send(&hello_frame))
            .await
            .unwrap();
        let welcome = bounded(
            "the stalled subscriber's welcome",
            NET,
            stalled.recv::<ServerFrame>(),
        )
        .await
        .unwrap();
        assert!(
            matches!(welcome, Some(ServerFrame::Welcome { .. })),
            "{welcome:?}"
        );

        phase("moved");
        // The flood's moves are allowed through a burst: the first one moves 7000 bins for
        // real, and that move's events (about 21k, for the model and every viewer) cost the
        // job tens of MiB whoever asked for it. Made here first, by a client that does not
        // flood, and complete (the model has every bin where it was sent) before the flood,
        // the flood's own moves find the bins where they ask for them, and what is measured
        // below is what the flood costs.
        let mut mover = subscribe_from([127, 0, 0, 3], addr).await;
        let first = ask(
            &mut mover,
            vec![CommandRequest::MoveBins {
                bins: (0..FLOOD_BINS).collect(),
                worker: 1,
                standby: false,
            }],
        )
        .await;
        assert_eq!(first[0].0, Outcome::Applied, "{first:?}");
        phase("moved: applied");
        model_when(addr, "the move of 7000 bins to complete", |m| {
            !m.operators.is_empty()
                && m.operators.values().all(|bins| {
                    bins.len() >= FLOOD_BINS && bins[..FLOOD_BINS].iter().all(|b| b.owner == Some(1))
                })
                && m.moving.keys().all(|bin| *bin as usize >= FLOOD_BINS)
        })
        .await;

        // The command flood, twice: each wave's 40 clients never read, and lose events to a
        // burst (the model shows their losses before the clients go); 80 stalled viewers in
        // all, more than the model keeps places of drops for.
        // Measured from before each wave's commands to before its burst (the burst fills
        // the test's own event queue, which is no client's doing), over the wave and 2 s
        // after it while the collector takes its commands in.
        let mut grown = 0u64;
        for wave in 0..2 {
            phase(&format!("flood, wave {wave}"));
            let dropping = viewers_dropping(&model_when(addr, "a snapshot", |_| true).await);
            let before = rss();
            let stop_sampling = Arc::new(AtomicBool::new(false));
            let sampling = peak_rss(Arc::clone(&stop_sampling));
            let clients = command_flood(addr).await;
            tokio::time::sleep(Duration::from_secs(2)).await;
            stop_sampling.store(true, Ordering::Relaxed);
            grown = grown.max(sampling.wait(NET).saturating_sub(before));
            phase(&format!("burst, wave {wave}"));
            burst(150_000);
            let what = format!("the losses of wave {wave}'s stalled viewers to show");
            model_when(addr, &what, |m| viewers_dropping(m) > dropping).await;
            drop(clients);
        }

        phase("cancels");
        // Another address floods with cancels: a burst gets through, the rest is refused
        // unlogged.
        let mut flooder = subscribe_from([127, 0, 0, 4], addr).await;
        let asked = Instant::now();
        let flood = ask(&mut flooder, vec![CommandRequest::CancelPlan; 500]).await;
        let cancels_for = asked.elapsed();

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
        phase("done");
        Attacks {
            flood,
            cancels_for,
            moved,
            impostor_closed,
            exported,
            silence,
            grown,
        }
    });

    // The attacks are over: the job ends, and the well-behaved viewer sees it end.
    control.stop();
    let summary = job.wait(RUN);
    let seen = watching.wait(NET);
    let report = megaflux_testkit::within("the collector to finish", RUN, move |_| {
        collector.finish(Duration::ZERO, None)
    })
    .unwrap();

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
    // A job behind its open loop holds the records not yet done: its latency says whether it
    // kept up while the flood was measured.
    let behind_ms = summary.latency_ns.p99 / 1_000_000;
    eprintln!(
        "the command flood (2 waves of 40 clients x 32 moves of 7000 bins) grew the job by {:.1} MiB (the job's p99 latency: {behind_ms} ms)",
        attacks.grown as f64 / f64::from(1 << 20)
    );
    assert!(
        attacks.grown < 32 << 20,
        "the flood grew the job by {} MiB (the job's p99 latency: {behind_ms} ms)",
        attacks.grown >> 20
    );

    // The real exporter got in under the silent connections, past the impostor: the silent
    // client held more connections than there are places for hellos, and the collector
    // turned some away for newer ones while the exporter connected.
    let limits = limits();
    let opened = attacks.silence.opened.load(Ordering::Relaxed);
    let turned_away = attacks.silence.turned_away.load(Ordering::Relaxed);
    eprintln!("{opened} silent connections, {turned_away} of them turned away");
    assert!(opened >= 8 * limits.pending, "{opened} silent connections");
    assert_eq!(
        attacks.silence.closed.load(Ordering::Relaxed),
        opened,
        "the collector closed every silent connection"
    );
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
    // is shown, as its exporter said it, although 80 stalled viewers lost events too.
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
        Some(&EXTREME_LOST),
        "{:?}",
        report.model.dropped
    );
    eprintln!("dropped: {:?}", report.model.dropped);
    assert!(viewers_dropping(&report.model) > 1, "{:?}", report.model.dropped);

    // The flood: the burst reached the job (which has no plan to cancel), then no more than
    // the rate let through while the cancels were answered; the rest never reached the
    // collector's log.
    let refused = attacks
        .flood
        .iter()
        .filter(|(_, r)| r.contains("too many commands"))
        .count();
    let passed = attacks.flood.len() - refused;
    let refilled = (attacks.cancels_for.as_secs_f64() * f64::from(limits.commands_per_s)).ceil() as usize;
    assert!(passed >= limits.commands_burst as usize, "{passed} passed");
    assert!(
        passed <= limits.commands_burst as usize + refilled,
        "{passed} passed in {:?}: more than a burst of {} and {} a second",
        attacks.cancels_for,
        limits.commands_burst,
        limits.commands_per_s
    );
    assert!(refused > 0, "none of 500 cancels refused");
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
    // Every silent connection went, by the collector's doing: the oldest when new ones
    // needed their place, the rest at the hello's time limit.
    assert!(report.turned_away > 0);
    assert!(
        report.turned_away >= turned_away as u64,
        "the collector counted {} turned away; the silent client saw {turned_away}",
        report.turned_away
    );
    assert!(
        report.turned_away + report.closed_total >= opened as u64,
        "{} turned away and {} closed of {opened} silent connections",
        report.turned_away,
        report.closed_total,
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

    // The job computed what a job nobody attacked computes over the same epochs (as fast as
    // it goes: the same records at the same logical times).
    let quiet = common::quiet_twin(config(), &summary);
    let quiet = megaflux_testkit::within("the quiet twin of the attacked job", RUN, move |_| {
        megaflux::workload::run(quiet, ControlHandle::new())
            .unwrap()
            .unwrap()
    });
    assert_eq!(summary.output_digest, quiet.output_digest);
    assert_eq!(summary.outputs, quiet.outputs);
}

/// What the attacks saw.
struct Attacks {
    flood: Vec<(Outcome, String)>,
    /// How long the cancels took to be answered, from the first sent.
    cancels_for: Duration,
    moved: Vec<(Outcome, String)>,
    impostor_closed: Option<String>,
    exported: Result<u64, megaflux_probe::ProbeError>,
    silence: Arc<Silence>,
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
