//! `to_kafka`: appends the lines of standard input to a Kafka topic, one message each, line
//! `i` to partition `i mod N` (creating the topic with `N` partitions if it is missing), so
//! that a job reading the topic in turn (`--input kafka://HOST:PORT/TOPIC?end=now`) reads
//! the lines in their order, as it would read the file:
//!
//! ```sh
//! cargo run --release -p megaflux-tui --example to_kafka -- 127.0.0.1:9092 views 4 < views.csv
//! ```

use std::io::BufRead;
use std::process::ExitCode;

use anyhow::{Context, bail};
use rskafka::chrono::DateTime;
use rskafka::client::ClientBuilder;
use rskafka::client::partition::{Compression, UnknownTopicHandling};
use rskafka::record::Record;

/// Messages per produce request.
const BATCH: usize = 5_000;

fn main() -> ExitCode {
    match run() {
        Ok(n) => {
            eprintln!("to_kafka: produced {n} messages");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> anyhow::Result<u64> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [broker, topic, partitions] = args.as_slice() else {
        bail!("usage: to_kafka HOST:PORT TOPIC PARTITIONS < lines");
    };
    let partitions: i32 = partitions
        .parse()
        .ok()
        .filter(|p| *p > 0)
        .with_context(|| format!("PARTITIONS `{partitions}` is not a positive number"))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let client = ClientBuilder::new(vec![broker.clone()])
            .build()
            .await
            .with_context(|| format!("connecting to {broker}"))?;
        let exists = client.list_topics().await?.iter().any(|t| &t.name == topic);
        if !exists {
            client
                .controller_client()?
                .create_topic(topic, partitions, 1, 5_000)
                .await
                .with_context(|| format!("creating topic {topic}"))?;
        }
        let mut clients = Vec::new();
        for p in 0..partitions {
            clients.push(
                client
                    .partition_client(topic.clone(), p, UnknownTopicHandling::Retry)
                    .await?,
            );
        }
        let stamp = DateTime::from_timestamp_millis(0).context("a timestamp")?;
        let mut pending: Vec<Vec<Record>> = vec![Vec::new(); partitions as usize];
        let mut n = 0u64;
        for line in std::io::stdin().lock().lines() {
            let line = line.context("reading standard input")?;
            let p = (n % partitions as u64) as usize;
            pending[p].push(Record {
                key: None,
                value: Some(line.into_bytes()),
                headers: Default::default(),
                timestamp: stamp,
            });
            n += 1;
            if pending[p].len() == BATCH {
                clients[p]
                    .produce(std::mem::take(&mut pending[p]), Compression::NoCompression)
                    .await?;
            }
        }
        for (p, records) in pending.into_iter().enumerate() {
            clients[p].produce(records, Compression::NoCompression).await?;
        }
        Ok(n)
    })
}
