use super::*;
use crate::event::{Event, Stamped};

fn at(process: u32, event: Event) -> Stamped {
    Stamped {
        at_s: 1.0,
        process,
        event,
    }
}

/// A model of a two-worker job that read, applied, moved, failed and committed.
fn model() -> JobModel {
    let mut m = JobModel::new();
    m.apply(&at(
        0,
        Event::Hello {
            processes: 1,
            workers: 2,
            peers: 2,
            bins: 16,
            config: serde_json::json!({"replicas": 1, "epoch_us": 1000}),
            anchor_unix_s: None,
        },
    ));
    for worker in 0..2 {
        m.apply(&at(
            0,
            Event::JobStarted {
                worker,
                peers: 2,
                base: 10,
                records: Some(5),
            },
        ));
        m.apply(&at(
            0,
            Event::WorkerStats {
                worker,
                records: 100,
                applied: Some(100 + u64::from(worker) * 100),
                outputs_total: Some(7),
                busy_ns: 1,
                interval_ns: 1_000_000_000,
            },
        ));
        m.apply(&at(
            0,
            Event::BinLoads {
                worker,
                operator: "count".into(),
                interval_ns: 1,
                applied: Some(40),
                loads: "1:40:1".into(),
            },
        ));
    }
    m.apply(&at(0, Event::OutputCommitted { upto: 1234, rows: 14 }));
    m.apply(&at(
        0,
        Event::InputPartition {
            partition: 3,
            offset: 10,
            end: 25,
        },
    ));
    m
}

#[test]
fn every_family_is_in_both_formats_with_its_unit_and_suffix() {
    let snapshot = Snapshot::of(&model(), false);
    let names = snapshot.names();
    for name in FAMILIES {
        assert!(names.iter().any(|n| n == name), "{name} missing from {names:?}");
    }
    let text = snapshot.clone().encode(Format::Prometheus).unwrap();
    assert!(text.contains("megaflux_records_in_total 210\n"), "{text}");
    assert!(text.contains("megaflux_outputs_total 14\n"), "{text}");
    assert!(
        text.contains(r#"megaflux_records_applied_total{worker="1",operator="count"} 40"#),
        "{text}"
    );
    assert!(
        text.contains(r#"megaflux_source_lag_records{partition="3"} 15"#),
        "{text}"
    );
    assert!(text.contains("megaflux_sink_committed_time 1234"), "{text}");
    assert!(text.contains("megaflux_imbalance 1.33"), "{text}");
    assert!(
        text.contains(r#"megaflux_latency_seconds_bucket{le="+Inf"} 0"#),
        "{text}"
    );
    let open = snapshot.encode(Format::OpenMetrics).unwrap();
    assert!(open.ends_with("# EOF\n"), "{open}");
    assert!(open.contains("# UNIT megaflux_latency_seconds seconds"), "{open}");
}

#[test]
fn the_accept_header_chooses_the_format() {
    let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    assert_eq!(Format::of_accept(Some(prometheus)), Format::OpenMetrics);
    assert_eq!(Format::of_accept(Some("*/*")), Format::Prometheus);
    assert_eq!(Format::of_accept(None), Format::Prometheus);
}

/// The server answers a scrape with the owner's snapshot, other paths and methods with
/// what they are, and 503 when the owner is gone.
#[test]
fn the_server_answers_scrapes_from_the_models_owner() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (scrapes, mut requests) = channel();
        let server = tokio::spawn(serve(listener, scrapes));
        let owner = tokio::spawn(async move {
            let model = model();
            let mut answered = 0;
            while let Some(reply) = requests.recv().await {
                let _ = reply.send(Snapshot::of(&model, true));
                answered += 1;
                if answered == 1 {
                    break;
                }
            }
        });
        let get = |request: &'static str| async move {
            let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
            stream.write_all(request.as_bytes()).await.unwrap();
            let mut out = String::new();
            let deadline = std::time::Duration::from_secs(30);
            tokio::time::timeout(deadline, stream.read_to_string(&mut out))
                .await
                .expect("the metrics server answered within 30 s")
                .unwrap();
            out
        };
        let ok = get("GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").await;
        assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
        assert!(ok.contains("text/plain; version=0.0.4"), "{ok}");
        assert!(ok.contains("megaflux_run_finished 1"), "{ok}");
        owner.await.unwrap();
        let gone = get("GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").await;
        assert!(gone.starts_with("HTTP/1.1 503"), "{gone}");
        let elsewhere = get("GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").await;
        assert!(elsewhere.starts_with("HTTP/1.1 404"), "{elsewhere}");
        let post =
            get("POST /metrics HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\nconnection: close\r\n\r\n").await;
        assert!(post.starts_with("HTTP/1.1 405"), "{post}");
        let junk = get("NOT HTTP AT ALL\r\n\r\n").await;
        assert!(junk.is_empty() || junk.starts_with("HTTP/1.1 400"), "{junk}");
        server.abort();
    });
}

/// Numbers from the network or a file at their largest make a scrape, never a panic or a
/// counter that wraps.
#[test]
fn the_largest_numbers_scrape() {
    let mut m = model();
    for worker in 0..2 {
        m.apply(&at(
            0,
            Event::JobFinished {
                worker,
                records: u64::MAX,
                outputs: Some(u64::MAX),
            },
        ));
        m.apply(&at(
            0,
            Event::Sampled {
                worker,
                operator: "count".into(),
                full: true,
                bins: 1,
                keys: u64::MAX,
                bytes: u64::MAX,
            },
        ));
    }
    m.totals.latency_seconds.counts = vec![u64::MAX; LATENCY_BUCKETS_S.len() + 1];
    m.totals.latency_seconds.count = u64::MAX;
    for format in [Format::Prometheus, Format::OpenMetrics] {
        let text = Snapshot::of(&m, false).encode(format).unwrap();
        assert!(
            text.contains(&format!("megaflux_records_in_total {}", u64::MAX)),
            "{text}"
        );
        assert!(
            text.contains(&format!("megaflux_outputs_total {}", u64::MAX)),
            "{text}"
        );
    }
}

/// Names from the job (operators, strategies) are label values: escaped, never breaking a
/// line of the exposition.
#[test]
fn names_from_the_job_are_escaped_in_labels() {
    let mut m = model();
    m.apply(&at(
        0,
        Event::BinLoads {
            worker: 0,
            operator: "a\"b\\c\nd".into(),
            interval_ns: 1,
            applied: Some(1),
            loads: "1:1:1".into(),
        },
    ));
    let text = Snapshot::of(&m, false).encode(Format::Prometheus).unwrap();
    assert!(text.contains(r#"operator="a\"b\\c\nd"} 1"#), "{text}");
    assert!(
        text.lines()
            .all(|l| l.starts_with('#') || l.starts_with("megaflux_")),
        "{text}"
    );
}
