//! A real job's collector on a public address under attack: an oversized hello, hundreds of
//! idle connections, a subscriber that never reads, subscribers without the token,
//! exporters speaking for others, a command flood. The job's output is that of a job nobody
//! attacked, the trace is whole, and a well-behaved viewer is served from start to end.

use std::net::SocketAddr;
use std::time::Duration;

use megaflux::control::ControlHandle;
use megaflux::harness::{self, RunConfig};
use megaflux_probe::ProbeLayer;
use megaflux_probe::collector::{Collector, CollectorConfig, Limits};
use megaflux_probe::event::{Event, Outcome, Stamped};
use megaflux_probe::model::JobModel;
use megaflux_probe::record::TraceHeader;
use megaflux_probe::wire::{
    self, ClientFrame, CommandRequest, Connection, PROTOCOL_VERSION, Role, ServerFrame,
};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tracing_subscriber::prelude::*;

mod common;
use common::{ask, closed};

const TOKEN: &str = "s3cret";

fn config() -> RunConfig {
    common::job(15)
}

fn limits() -> Limits {
    Limits {
        hello_timeout: Duration::from_secs(1),
        send_timeout: Duration::from_secs(2),
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
        bins: 16,
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

async fn hello(addr: SocketAddr, role: Role, token: Option<&str>) -> Connection<TcpStream> {
    let mut conn = Connection::new(TcpStream::connect(addr).await.unwrap());
    conn.send(&ClientFrame::Hello {
        protocol: PROTOCOL_VERSION,
        role,
        token: token.map(str::to_string),
    })
    .await
    .unwrap();
    conn
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

#[test]
fn an_attacked_collector_keeps_the_job_and_its_viewers_whole() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("attacked.jsonl");
    let (layer, queue) = ProbeLayer::new(0, 1 << 20);
    let hello_stamped = layer.stamp(hello_event());
    tracing_subscriber::registry().with(layer.filtered()).init();
    let control = ControlHandle::new();
    let header = TraceHeader::new(serde_json::json!({}), 2, 1, 16, vec![0; 16]);
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
    let job = std::thread::spawn(move || harness::run(config(), control).unwrap().unwrap());

    let rt = common::runtime();
    // The well-behaved viewer, on a thread of its own (the attacks below block theirs).
    let watching = std::thread::spawn(move || {
        let rt = common::runtime();
        rt.block_on(viewer(addr))
    });
    let (flood, moved) = rt.block_on(async {

        // Without the token nobody is served on a public address, viewers included.
        let reason = closed(hello(addr, Role::Subscriber, None).await).await;
        assert!(reason.unwrap().contains("token"));
        let reason = closed(hello(addr, Role::Subscriber, Some("s3cre")).await).await;
        assert!(reason.unwrap().contains("token"));
        let reason = closed(hello(addr, Role::Exporter { process: 1 }, None).await).await;
        assert!(reason.unwrap().contains("token"));

        // An oversized hello: refused from its length prefix, before it is read.
        let mut big = TcpStream::connect(addr).await.unwrap();
        big.write_all(&(15u32 << 20).to_be_bytes()).await.unwrap();
        let _ = big.write_all(&[b'{'; 64 << 10]).await;
        let reason = closed(Connection::new(big)).await.unwrap_or_default();
        assert!(reason.contains("frame"), "{reason}");
        // A hello within the limit whose type is a long string: the reason is cut short.
        let mut long = Connection::new(TcpStream::connect(addr).await.unwrap());
        long.send(&serde_json::json!({ "type": "x".repeat(3000) })).await.unwrap();
        let reason = closed(long).await.unwrap();
        assert!(reason.len() < 400, "{} bytes", reason.len());

        // Exporters that speak for others, or say what only process 0 or the collector
        // says, are closed.
        let wrong_worker = vec![of(1, hello_event()), of(1, stats(0))];
        let second_hello = vec![of(1, hello_event()), of(1, hello_event())];
        let stop_trace = vec![
            of(1, hello_event()),
            of(1, Event::Recording { on: false, failed: None }),
        ];
        let end_job = vec![of(1, hello_event()), of(1, Event::JobFinished { worker: 0, records: 0 })];
        let other_process = vec![of(1, hello_event()), of(0, stats(0))];
        for events in [wrong_worker, second_hello, stop_trace, end_job, other_process] {
            let mut liar = hello(addr, Role::Exporter { process: 1 }, Some(TOKEN)).await;
            let welcome = liar.recv::<ServerFrame>().await.unwrap();
            assert!(matches!(welcome, Some(ServerFrame::Welcome { .. })), "{welcome:?}");
            let _ = liar.send(&ClientFrame::Events { events }).await;
            closed(liar).await;
        }

        // A subscriber that never reads its feed (and takes little into its socket): it
        // loses events, then is closed; the others go on.
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        let mut stalled = Connection::new(socket.connect(addr).await.unwrap());
        let hello_frame = ClientFrame::Hello {
            protocol: PROTOCOL_VERSION,
            role: Role::Subscriber,
            token: Some(TOKEN.into()),
        };
        stalled.send(&hello_frame).await.unwrap();
        let welcome = stalled.recv::<ServerFrame>().await.unwrap();
        assert!(matches!(welcome, Some(ServerFrame::Welcome { .. })), "{welcome:?}");
        for records in 0..100_000u64 {
            tracing::info!(target: "megaflux::worker", worker = 0u32, records, busy_ns = 1u64, interval_ns = 250_000_000u64);
        }
        tokio::time::sleep(limits().send_timeout * 2).await;

        // Hundreds of idle connections: most are turned away at once, the rest at the
        // hello's time limit.
        let mut idle = Vec::new();
        for _ in 0..300 {
            idle.push(TcpStream::connect(addr).await.unwrap());
        }
        tokio::time::sleep(Duration::from_millis(1500)).await;
        drop(idle);

        // A command flood: a burst gets through to the job, the rest is refused unlogged.
        let mut flooder = wire::subscribe(addr, Some(TOKEN.into())).await.unwrap();
        let flood = ask(&mut flooder, vec![CommandRequest::CancelPlan; 500]).await;

        // The job still takes a good command.
        let mut good = wire::subscribe(addr, Some(TOKEN.into())).await.unwrap();
        let moved = ask(
            &mut good,
            vec![CommandRequest::MoveBins {
                bins: vec![0, 1, 2, 3],
                worker: 1,
                standby: false,
            }],
        )
        .await;
        drop(stalled);
        (flood, moved)
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
    assert_eq!(moved[0].0, Outcome::Applied, "{moved:?}");

    // The flood: the burst reached the job (which has no plan to cancel); the rest never
    // reached the collector's log.
    let limits = limits();
    let refused = flood
        .iter()
        .filter(|(_, r)| r.contains("too many commands"))
        .count();
    let passed = flood.len() - refused;
    assert!(passed >= limits.commands_burst as usize, "{passed} passed");
    assert!(passed < 100, "{passed} passed");
    let logged = report
        .model
        .commands
        .iter()
        .filter(|c| c.command.contains("CancelPlan") || c.command.contains("cancel"))
        .count();
    assert!(logged <= 2 * passed, "{logged} logged for {passed} passed");
    assert!(
        report
            .model
            .commands
            .iter()
            .all(|c| !c.reason.as_deref().unwrap_or("").contains("too many"))
    );

    // The attackers: turned away or closed with short reasons, nothing else kept.
    assert!(report.turned_away >= 200, "{}", report.turned_away);
    assert_eq!(report.closed.len(), limits.reasons_kept);
    assert!(report.closed_total > limits.reasons_kept as u64);
    assert!(report.closed.iter().all(|r| r.len() < 400));
    assert!(
        report.closed.iter().any(|r| r.contains("unread")),
        "the stalled subscriber was closed: {:?}",
        report.closed
    );
    assert!(
        report
            .model
            .dropped
            .keys()
            .any(|place| place.contains("subscriber")),
        "the stalled subscriber lost events: {:?}",
        report.model.dropped
    );
    for reason in ["worker 0", "second hello", "`recording`", "process 0"] {
        assert!(
            report.closed.iter().any(|r| r.contains(reason)),
            "{reason}: {:?}",
            report.closed
        );
    }
    // The trace was never stopped by anyone but the collector, and reads back whole.
    assert_eq!(report.model.recording, Some(true));
    assert!(report.recording_failed.is_none());
    let recorded = megaflux_probe::record::read(&trace).unwrap();
    assert!(
        recorded
            .events
            .iter()
            .all(|e| !matches!(e.event, Event::Recording { on: false, .. }))
    );

    // The job computed what a job nobody attacked computes.
    let quiet = harness::run(config(), ControlHandle::new()).unwrap().unwrap();
    assert_eq!(summary.output_digest, quiet.output_digest);
    assert_eq!(summary.outputs, quiet.outputs);
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
