//! The collector over TCP: two exporters and a subscriber, and connections that break the
//! protocol, which are closed while the others go on.

use std::net::SocketAddr;
use std::time::Duration;

use megaflux_probe::collector::{Collector, CollectorConfig};
use megaflux_probe::event::Event;
use megaflux_probe::export::Exporter;
use megaflux_probe::model::JobModel;
use megaflux_probe::wire::{
    self, ClientFrame, Connection, MAX_FRAME_BYTES, PROTOCOL_VERSION, Role, ServerFrame, Subscription,
};
use megaflux_probe::{ProbeLayer, Stamped};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tracing_subscriber::prelude::*;

mod common;
use common::{NET, RUN, background, bounded, closed};

/// Emits a worker's load through a layer of process `process`, as core would.
fn emit(layer_of: &tracing::Dispatch, worker: u32, records: u64) {
    tracing::dispatcher::with_default(layer_of, || {
        tracing::info!(target: "megaflux::worker", worker, records, busy_ns = 1u64, interval_ns = 250_000_000u64);
    });
}

fn process(n: u32) -> (tracing::Dispatch, megaflux_probe::EventQueue, Stamped) {
    let (layer, queue) = ProbeLayer::new(n, 1024);
    let hello = layer.stamp(Event::Hello {
        processes: 3,
        workers: 1,
        peers: 3,
        bins: 16,
        config: serde_json::json!({}),
        anchor_unix_s: None,
    });
    let dispatch = tracing::Dispatch::new(tracing_subscriber::registry().with(layer.filtered()));
    (dispatch, queue, hello)
}

/// A collector serving on `addr` with this hello, fed by `queue`.
fn serving(addr: &str, hello: Stamped, queue: megaflux_probe::EventQueue) -> Collector {
    let config = CollectorConfig {
        serve: Some(addr.parse().unwrap()),
        hello: Some(hello),
        ..CollectorConfig::default()
    };
    Collector::start(config, queue).unwrap()
}

async fn subscribe(addr: SocketAddr) -> Subscription {
    bounded("the collector's welcome", NET, wire::subscribe(addr, None))
        .await
        .unwrap()
}

/// A connection to the collector at `addr`.
async fn connect(addr: SocketAddr) -> TcpStream {
    bounded("a connection to the collector", NET, TcpStream::connect(addr))
        .await
        .unwrap()
}

/// Sends `frame` on a fresh connection to the collector at `addr`.
async fn send_on_new(addr: SocketAddr, frame: &impl serde::Serialize) -> Connection<TcpStream> {
    let mut conn = Connection::new(connect(addr).await);
    bounded("the collector to take a frame", NET, conn.send(frame))
        .await
        .unwrap();
    conn
}

/// Reads frames into `model` until `done` holds of it; fails naming `what` if that takes
/// longer than [`NET`].
async fn follow(conn: &mut Subscription, model: &mut JobModel, what: &str, done: impl Fn(&JobModel) -> bool) {
    let wait = async {
        while !done(model) {
            match conn.recv().await.unwrap() {
                Some(ServerFrame::Snapshot { model: m }) => *model = *m,
                Some(ServerFrame::Events { events }) => events.iter().for_each(|e| model.apply(e)),
                Some(_) => {}
                None => panic!("the collector closed the subscription waiting for {what}"),
            }
        }
    };
    bounded(what, NET, wait).await;
}

/// What `collector` reports once finished (given `linger` for exporters).
fn finish(collector: Collector, linger: Duration) -> megaflux_probe::collector::CollectorReport {
    megaflux_testkit::within("the collector to finish", RUN, move |_| {
        collector.finish(linger, None)
    })
    .unwrap()
}

/// What `exporter` sent, once finished.
fn finish_exporter(exporter: Exporter, what: &str) -> u64 {
    megaflux_testkit::within(what, RUN, move |_| exporter.finish()).unwrap()
}

#[test]
fn merges_two_exporters_and_survives_bad_clients() {
    let (local, queue, hello) = process(0);
    let collector = serving("127.0.0.1:0", hello, queue);
    let addr = collector.local_addr().unwrap();
    let (one, q1, h1) = process(1);
    let (two, q2, h2) = process(2);
    let e1 = Exporter::start(addr, 1, None, h1, q1).unwrap();
    let e2 = Exporter::start(addr, 2, None, h2, q2).unwrap();

    let rt = common::runtime();
    rt.block_on(async {
        let mut sub = subscribe(addr).await;
        let mut model = JobModel::new();
        emit(&local, 0, 10);
        emit(&one, 1, 20);
        emit(&two, 2, 30);
        follow(&mut sub, &mut model, "the three processes' loads", |m| {
            m.workers.len() == 3 && m.processes.len() == 3
        })
        .await;
        assert_eq!(model.workers[&1].process, 1);
        assert_eq!(model.workers[&2].process, 2);
        assert!((model.workers[&2].records_per_s - 120.0).abs() < 1e-6);

        // Malformed: a frame that is not JSON.
        let garbage = send_on_new(addr, &"not a hello").await;
        assert!(closed(garbage).await.is_some(), "refused with a reason");
        // Oversized: a length prefix over the limit.
        let mut big = connect(addr).await;
        let prefix = (MAX_FRAME_BYTES as u32 + 1).to_be_bytes();
        bounded(
            "the collector to take a length prefix",
            NET,
            big.write_all(&prefix),
        )
        .await
        .unwrap();
        // The collector may close the connection before it takes the rest.
        let _ = tokio::time::timeout(NET, big.write_all(&[b'{'; 1024])).await;
        let reason = closed(Connection::new(big)).await.expect("a refusal");
        assert!(reason.contains("bad frame"), "{reason}");
        // Wrong version.
        let old = ClientFrame::Hello {
            protocol: PROTOCOL_VERSION + 1,
            role: Role::Subscriber,
            token: None,
        };
        let reason = closed(send_on_new(addr, &old).await).await.expect("a refusal");
        assert!(reason.contains("version"), "{reason}");
        // An exporter of a process the job does not have.
        let liar = ClientFrame::Hello {
            protocol: PROTOCOL_VERSION,
            role: Role::Exporter { process: 7 },
            token: None,
        };
        let reason = closed(send_on_new(addr, &liar).await).await.expect("a refusal");
        assert!(reason.contains("not 7"), "{reason}");

        // An exporter that would speak for the collector's own process.
        let impostor = ClientFrame::Hello {
            protocol: PROTOCOL_VERSION,
            role: Role::Exporter { process: 0 },
            token: None,
        };
        let reason = closed(send_on_new(addr, &impostor).await)
            .await
            .expect("a refusal");
        assert!(reason.contains("own"), "{reason}");

        // The collector still serves the first subscriber and new ones.
        emit(&one, 1, 40);
        follow(&mut sub, &mut model, "process 1's new load", |m| {
            (m.workers[&1].records_per_s - 160.0).abs() < 1e-6
        })
        .await;
        let mut late = subscribe(addr).await;
        let mut late_model = JobModel::new();
        follow(&mut late, &mut late_model, "a late subscriber's snapshot", |m| {
            m.workers.len() == 3
        })
        .await;
    });

    assert!(finish_exporter(e1, "exporter 1 to finish") >= 2);
    assert!(finish_exporter(e2, "exporter 2 to finish") >= 2);
    let report = finish(collector, Duration::from_secs(5));
    assert_eq!(report.closed.len(), 5, "{:?}", report.closed);
    assert!(
        report.closed.iter().any(|r| r.contains("malformed")),
        "{:?}",
        report.closed
    );
    assert!(
        report.closed.iter().any(|r| r.contains("bad frame")),
        "{:?}",
        report.closed
    );
    assert!(
        report.closed.iter().any(|r| r.contains("version")),
        "{:?}",
        report.closed
    );
    assert!(
        report.closed.iter().any(|r| r.contains("not 7")),
        "{:?}",
        report.closed
    );
    assert_eq!(report.model.processes.len(), 3);
}

#[test]
fn recording_pauses_and_resumes_on_command() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("trace.jsonl");
    let (local, queue, hello) = process(0);
    let header = megaflux_probe::record::TraceHeader::new(serde_json::json!({}), 1, 1, 16, vec![0; 16]);
    let collector = Collector::start(
        CollectorConfig {
            serve: Some("127.0.0.1:0".parse().unwrap()),
            record: Some((path.clone(), header)),
            hello: Some(hello),
            ..CollectorConfig::default()
        },
        queue,
    )
    .unwrap();
    let addr = collector.local_addr().unwrap();
    let rt = common::runtime();
    rt.block_on(async {
        let mut sub = subscribe(addr).await;
        let mut model = JobModel::new();
        emit(&local, 0, 1);
        follow(&mut sub, &mut model, "worker 0's load", |m| {
            m.workers.contains_key(&0)
        })
        .await;
        for (request, on, records) in [(0, false, 2), (1, true, 3)] {
            let command = ClientFrame::Command {
                request,
                command: wire::CommandRequest::Record { on },
            };
            bounded("the collector to take a command", NET, sub.send(&command))
                .await
                .unwrap();
            let what = format!("the recording to be {on}");
            follow(&mut sub, &mut model, &what, |m| m.recording == Some(on)).await;
            emit(&local, 0, records);
            follow(&mut sub, &mut model, "worker 0's new load", |m| {
                (m.workers[&0].records_per_s - records as f64 * 4.0).abs() < 1e-6
            })
            .await;
        }
    });
    finish(collector, Duration::ZERO);
    let trace = megaflux_probe::record::read(&path).unwrap();
    let seen: Vec<String> = trace
        .events
        .iter()
        .filter_map(|e| match &e.event {
            Event::Recording { on, .. } => Some(format!("recording {on}")),
            Event::WorkerStats { records, .. } => Some(format!("records {records}")),
            Event::Keyframe { model } => {
                let model: JobModel = serde_json::from_value(model.clone()).unwrap();
                Some(format!(
                    "keyframe {}",
                    model.workers.get(&0).map_or(0.0, |w| w.records_per_s / 4.0)
                ))
            }
            _ => None,
        })
        .collect();
    // The load of 2 came while paused: it is not in the trace, but the keyframe right after
    // the resumption has it, so the gap leaves nothing stale.
    let keyframe = seen.iter().position(|l| l.starts_with("keyframe 2"));
    let resumed = seen.iter().rposition(|l| l == "recording true");
    assert!(
        keyframe.is_some() && keyframe == resumed.map(|r| r + 1),
        "{seen:?}"
    );
    let without_keyframes: Vec<&String> = seen.iter().filter(|l| !l.starts_with("keyframe")).collect();
    assert_eq!(
        without_keyframes,
        [
            "recording true",
            "records 1",
            "recording false",
            "recording true",
            "records 3"
        ]
    );
    assert!(matches!(trace.events[0].event, Event::Hello { .. }));
}

/// An exporter whose collector goes away keeps trying, and when a collector serves on that
/// address again it says hello again and goes on sending; what was lost meanwhile is
/// counted.
#[test]
fn an_exporter_reconnects_when_its_collector_comes_back() {
    // The collector's layer lives as long as the collector (it ends when its layer is gone).
    let start = |addr: SocketAddr| {
        let (layer, queue, hello) = process(0);
        let collector = serving(&addr.to_string(), hello, queue);
        (collector, layer)
    };
    let (first, _layer) = start("127.0.0.1:0".parse().unwrap());
    let addr = first.local_addr().unwrap();
    let (one, q1, h1) = process(1);
    let exporter = Exporter::start(addr, 1, None, h1, q1).unwrap();
    let rt = common::runtime();
    rt.block_on(async {
        let mut sub = subscribe(addr).await;
        let mut model = JobModel::new();
        emit(&one, 1, 1);
        follow(&mut sub, &mut model, "process 1's load", |m| {
            m.workers.contains_key(&1)
        })
        .await;
    });
    finish(first, Duration::ZERO);
    // Events sent into the void until the exporter notices.
    for records in 2..10 {
        emit(&one, 1, records);
        std::thread::sleep(Duration::from_millis(50));
    }
    let (second, _layer) = start(addr);
    rt.block_on(async {
        let mut sub = subscribe(addr).await;
        let mut model = JobModel::new();
        let wait = async {
            let mut records = 100;
            loop {
                emit(&one, 1, records);
                let seen = tokio::time::timeout(Duration::from_millis(200), async {
                    while let Ok(Some(frame)) = sub.recv().await {
                        match frame {
                            ServerFrame::Snapshot { model: m } => model = *m,
                            ServerFrame::Events { events } => events.iter().for_each(|e| model.apply(e)),
                            _ => {}
                        }
                        if model.processes.contains_key(&1) && model.workers.contains_key(&1) {
                            return;
                        }
                    }
                })
                .await;
                if seen.is_ok() {
                    return;
                }
                records += 1;
            }
        };
        bounded("the exporter to come back", NET, wait).await;
        // Its hello came again (the collector takes a process's events only after it).
        assert!(model.processes.contains_key(&1));
    });
    assert!(finish_exporter(exporter, "the exporter to finish") >= 3);
    let report = finish(second, Duration::from_secs(5));
    assert!(report.closed.is_empty(), "{:?}", report.closed);
}

/// A trace whose writes start failing (here: its reader went away) stops recording,
/// visibly, and nothing else: the collector goes on serving its viewers.
#[test]
fn a_failed_trace_write_stops_the_recording_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("trace.fifo");
    let mut mkfifo = std::process::Command::new("mkfifo");
    mkfifo.arg(&fifo);
    let made = megaflux_testkit::run("mkfifo", &mut mkfifo, NET);
    assert!(made.status.success(), "{made:?}");
    // A reader that takes the header, then goes away: later writes fail (EPIPE).
    let reader = {
        let fifo = fifo.clone();
        background("the trace's reader to take the header", move || {
            use std::io::BufRead;
            let mut first = String::new();
            let file = std::fs::File::open(&fifo).unwrap();
            std::io::BufReader::new(file).read_line(&mut first).unwrap();
            first
        })
    };
    let (local, queue, hello) = process(0);
    let header = megaflux_probe::record::TraceHeader::new(serde_json::json!({}), 1, 1, 16, vec![0; 16]);
    let collector = Collector::start(
        CollectorConfig {
            serve: Some("127.0.0.1:0".parse().unwrap()),
            record: Some((fifo, header)),
            replace: true,
            hello: Some(hello),
            ..CollectorConfig::default()
        },
        queue,
    )
    .unwrap();
    assert!(reader.wait(NET).contains("megaflux-trace"));
    let addr = collector.local_addr().unwrap();
    let rt = common::runtime();
    rt.block_on(async {
        let mut sub = subscribe(addr).await;
        let mut model = JobModel::new();
        let wait = async {
            let mut records = 1;
            while model.recording_failed.is_none() {
                emit(&local, 0, records);
                records += 1;
                if let Ok(Ok(Some(frame))) =
                    tokio::time::timeout(Duration::from_millis(100), sub.recv()).await
                {
                    match frame {
                        ServerFrame::Snapshot { model: m } => model = *m,
                        ServerFrame::Events { events } => events.iter().for_each(|e| model.apply(e)),
                        _ => {}
                    }
                }
            }
        };
        bounded("the viewer to be told the recording failed", NET, wait).await;
        assert_eq!(model.recording, Some(false));
        // The collector goes on.
        emit(&local, 0, 1000);
        follow(&mut sub, &mut model, "worker 0's load after the failure", |m| {
            m.workers
                .get(&0)
                .is_some_and(|w| (w.records_per_s - 4000.0).abs() < 1e-6)
        })
        .await;
    });
    let report = finish(collector, Duration::ZERO);
    let failed = report
        .recording_failed
        .expect("the report says the recording failed");
    assert!(failed.contains("trace.fifo"), "{failed}");
}

/// One exporter per process: a newer one replaces the one before, which is closed (so that
/// a stale or impostor connection cannot keep the process's real exporter out).
#[test]
fn one_exporter_per_process() {
    let (_local, queue, hello) = process(0);
    let collector = serving("127.0.0.1:0", hello, queue);
    let addr = collector.local_addr().unwrap();
    let (_one, _q1, h1) = process(1);
    let rt = common::runtime();
    rt.block_on(async {
        let exporter = || {
            let connecting = wire::connect(addr, Role::Exporter { process: 1 }, None);
            bounded("an exporter's welcome", NET, connecting)
        };
        let (first, _) = exporter().await.unwrap();
        let (mut second, _) = exporter().await.unwrap();
        // The first is closed (without a refusal: it was welcomed).
        assert_eq!(closed(first).await, None);
        // The second stays: what it says afterwards is taken in.
        let load = Stamped {
            at_s: h1.at_s,
            process: 1,
            event: Event::WorkerStats {
                outputs_total: None,
                worker: 1,
                records: 5,
                applied: None,
                busy_ns: 1,
                interval_ns: 250_000_000,
            },
        };
        let frame = ClientFrame::Events {
            events: vec![h1.clone(), load],
        };
        bounded(
            "the collector to take the newer exporter's events",
            NET,
            second.send(&frame),
        )
        .await
        .unwrap();
        let mut sub = subscribe(addr).await;
        let mut model = JobModel::new();
        follow(&mut sub, &mut model, "the newer exporter's events", |m| {
            m.processes.contains_key(&1) && m.workers.get(&1).is_some_and(|w| w.records_per_s > 0.0)
        })
        .await;
    });
    let report = finish(collector, Duration::ZERO);
    let replaced = report
        .closed
        .iter()
        .filter(|r| r.contains("newer exporter of process 1"))
        .count();
    assert_eq!(replaced, 1, "only the first was replaced: {:?}", report.closed);
}
