//! The frame decoder and a live collector take arbitrary bytes: a frame reader returns a
//! frame, the end, or an error, never panics and never buffers more than its limit; a
//! collector fed garbage by one client goes on serving another.
//!
//! CI runs a short search (proptest's default cases). A long one:
//! `PROPTEST_CASES=20000 cargo test --release -p megaflux-probe --test fuzz_frames`.

use std::net::SocketAddr;
use std::time::Duration;

use megaflux_probe::ProbeLayer;
use megaflux_probe::collector::{Collector, CollectorConfig};
use megaflux_probe::event::Event;
use megaflux_probe::wire::{self, ClientFrame, Connection, ServerFrame};
use proptest::prelude::*;
use tokio::io::AsyncWriteExt;

mod common;
use common::{NET, RUN, bounded};

/// The largest frame the test readers accept: a longer length prefix must be refused
/// before anything is buffered.
const LIMIT: usize = 4096;

/// Bytes a client might send: garbage, or length-prefixed frames of JSON-ish garbage (so
/// that the decoder's JSON side is reached, not only its length check).
fn wire_bytes() -> impl Strategy<Value = Vec<u8>> {
    let framed = prop::collection::vec(
        prop_oneof![
            prop::collection::vec(any::<u8>(), 0..200),
            "[{}\\[\\]\":,a-z0-9 ]{0,200}".prop_map(String::into_bytes),
            Just(br#"{"type":"hello","protocol":2,"role":"subscriber"}"#.to_vec()),
            Just(br#"{"type":"events","events":[{"at_s":1e300,"process":1,"kind":"dropped","place":"queue","count":18446744073709551615}]}"#.to_vec()),
            Just(br#"{"type":"events","events":[{"at_s":0.5,"process":1,"kind":"hello","processes":2,"workers":1,"peers":2,"bins":16,"config":{}}]}"#.to_vec()),
            Just(br#"{"type":"command","request":1,"command":{"command":"move_bins","bins":"0-65535","worker":1}}"#.to_vec()),
        ],
        0..6,
    )
    .prop_map(|frames| {
        let mut bytes = Vec::new();
        for f in frames {
            bytes.extend_from_slice(&(f.len() as u32).to_be_bytes());
            bytes.extend_from_slice(&f);
        }
        bytes
    });
    prop_oneof![prop::collection::vec(any::<u8>(), 0..600), framed]
}

/// Reads every frame `bytes` holds with a reader of [`LIMIT`]: how many it read before the
/// end or an error.
fn read_all<F: serde::de::DeserializeOwned>(bytes: Vec<u8>) -> usize {
    let rt = common::runtime();
    rt.block_on(async move {
        let (mut client, server) = tokio::io::duplex(1 << 16);
        client.write_all(&bytes).await.unwrap();
        drop(client);
        let mut conn = Connection::with_limit(server, LIMIT);
        let mut frames = 0;
        let what = format!("a reader to take {} bytes (it hung)", bytes.len());
        loop {
            match bounded(&what, NET, conn.recv::<F>()).await {
                Ok(Some(_)) => frames += 1,
                Ok(None) | Err(_) => return frames,
            }
        }
    })
}

proptest! {
    #[test]
    fn frame_readers_take_any_bytes(bytes in wire_bytes()) {
        let frames = read_all::<ClientFrame>(bytes.clone());
        prop_assert!(frames <= bytes.len() / 4 + 1);
        read_all::<ServerFrame>(bytes.clone());
        read_all::<serde_json::Value>(bytes);
    }
}

#[test]
fn a_length_past_the_limit_is_refused_before_it_is_read() {
    let mut bytes = (u32::MAX).to_be_bytes().to_vec();
    bytes.extend_from_slice(&[b'x'; 100]);
    assert_eq!(read_all::<ClientFrame>(bytes), 0);
}

/// A collector (loopback, no token) with a job's hello, its address, and the layer that
/// feeds it (the collector ends when its layer is gone).
fn collector() -> (Collector, SocketAddr, ProbeLayer) {
    let (layer, queue) = ProbeLayer::new(0, 1024);
    let hello = layer.stamp(Event::Hello {
        processes: 2,
        workers: 1,
        peers: 2,
        bins: 16,
        config: serde_json::json!({}),
        anchor_unix_s: None,
    });
    let collector = Collector::start(
        CollectorConfig {
            serve: Some("127.0.0.1:0".parse().unwrap()),
            hello: Some(hello),
            ..CollectorConfig::default()
        },
        queue,
    )
    .unwrap();
    let addr = collector.local_addr().unwrap();
    (collector, addr, layer)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Whatever one client sends, as a new connection or after a subscriber's or an
    /// exporter's welcome, the collector goes on serving the next subscriber.
    #[test]
    fn a_collector_fed_garbage_serves_the_next_client(bytes in wire_bytes(), after_hello in 0..3u8) {
        let (collector, addr, _layer) = collector();
        let rt = common::runtime();
        rt.block_on(async {
            // The garbage on a fresh connection, or after a hello the collector welcomes.
            let hello = match after_hello {
                1 => Some(serde_json::json!({"type": "hello", "protocol": wire::PROTOCOL_VERSION, "role": "subscriber"})),
                2 => Some(serde_json::json!({"type": "hello", "protocol": wire::PROTOCOL_VERSION, "role": "exporter", "process": 1})),
                _ => None,
            };
            let mut sent = Vec::new();
            if let Some(hello) = hello {
                let hello = serde_json::to_vec(&hello).unwrap();
                sent.extend_from_slice(&(hello.len() as u32).to_be_bytes());
                sent.extend_from_slice(&hello);
            }
            sent.extend_from_slice(&bytes);
            let connecting = tokio::net::TcpStream::connect(addr);
            let mut raw = bounded("a connection to the collector", NET, connecting).await.unwrap();
            let _ = tokio::time::timeout(NET, raw.write_all(&sent)).await;
            // The next subscriber is welcomed (within the test's deadline, not the client's
            // own of a few seconds).
            let connecting = tokio::net::TcpStream::connect(addr);
            let mut next = Connection::new(bounded("the next connection", NET, connecting).await.unwrap());
            let welcome = wire::handshake(&mut next, addr, wire::Role::Subscriber, None);
            let welcome = bounded("the next subscriber's welcome", NET, welcome).await;
            assert!(welcome.is_ok(), "the collector stopped serving: {welcome:?}");
        });
        let report = megaflux_testkit::within("the collector to finish", RUN, move |_| {
            collector.finish(Duration::ZERO, None)
        })
        .unwrap();
        prop_assert!(report.model.entries() <= megaflux_probe::JobModel::entries_bound(16, 2));
    }
}
