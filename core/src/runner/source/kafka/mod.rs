//! `--input kafka://HOST:PORT/TOPIC`: a topic's messages as the lines of an input, each
//! message's value one line.
//!
//! A topic is a partitioned, replayable source: its partitions are listed at the start, each
//! read in order from an offset, and with `?end=now` (or end offsets) up to an end fixed at
//! the start. Such a bounded read is deterministic: the partitions are read in turn, one
//! message each (a partition that reached its end drops out), so the `i`th line of the read
//! is the same message in every read of the same offsets, and a record read by rate is due
//! at `i / --rate` as it would be from a file. The offsets go into the trace and the
//! summary ([`Partition`]), so a re-run, a crash restart, or a run resuming a table reads
//! the same records at the same logical times. Without an end the topic is a stream: its
//! messages are due when they arrive, as from a socket.
//!
//! The client is rskafka: pure Rust on tokio (no C library to build), with exactly the
//! calls a replayable source needs (list partitions, fetch from an offset with the high
//! watermark, earliest offset). Offsets are kept by megaflux, not by a consumer group.

mod read;

use std::time::Duration;

use rskafka::BackoffConfig;
use rskafka::client::partition::{OffsetAt, PartitionClient, UnknownTopicHandling};
use rskafka::client::{Client, ClientBuilder};
use serde::{Deserialize, Serialize};

pub(crate) use read::KafkaLines;
pub use read::RETRY_EVERY;

/// How long connecting to the broker and each request may take before it counts as failed.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// The most bytes one fetch asks a partition for.
const FETCH_BYTES: i32 = 1 << 20;

/// One partition of a read: its messages at offsets `from..to` (to the end of time when
/// `to` is none: a stream).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Partition {
    /// The partition's id.
    pub id: i32,
    /// The first offset read.
    pub from: i64,
    /// The offset the read stops before, if it stops.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<i64>,
}

/// Where a topic's read starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Start {
    /// At each partition's earliest offset still held.
    Earliest,
    /// At each partition's end: only messages produced from now on.
    Latest,
    /// At these offsets, one per partition in id order.
    Offsets(Vec<i64>),
}

/// Where a topic's read ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum End {
    /// Nowhere: a stream, until the job is stopped.
    Never,
    /// At each partition's end as of the start.
    Now,
    /// Before these offsets, one per partition in id order.
    Offsets(Vec<i64>),
}

/// `kafka://HOST:PORT/TOPIC[?from=earliest|latest|O1,O2,...][&end=now|O1,O2,...]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KafkaInput {
    /// The broker to bootstrap from.
    pub broker: String,
    /// The topic.
    pub topic: String,
    /// Where each partition's read starts.
    pub start: Start,
    /// Where it ends.
    pub end: End,
}

fn offsets(what: &str, value: &str) -> Result<Vec<i64>, String> {
    value
        .split(',')
        .map(|o| {
            o.trim()
                .parse::<i64>()
                .ok()
                .filter(|o| *o >= 0)
                .ok_or_else(|| format!("{what}={value}: `{o}` is not an offset (a number from 0)"))
        })
        .collect()
}

impl KafkaInput {
    /// Reads `kafka://...`; `Ok(None)` for any other input.
    pub fn parse(s: &str) -> Result<Option<KafkaInput>, String> {
        let Some(rest) = s.strip_prefix("kafka://") else {
            return Ok(None);
        };
        let usage = "expected kafka://HOST:PORT/TOPIC[?end=now][&from=earliest|latest|OFFSETS]";
        let (address, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (broker, topic) = address
            .split_once('/')
            .ok_or_else(|| format!("{usage}: name the topic"))?;
        if !broker
            .rsplit_once(':')
            .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok())
        {
            return Err(format!("{usage}: `{broker}` is not HOST:PORT"));
        }
        let legal = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
        if topic.is_empty() || topic.len() > 249 || !topic.chars().all(legal) {
            return Err(format!(
                "`{topic}` is not a topic name (1 to 249 letters, digits, '.', '_' or '-')"
            ));
        }
        let (mut start, mut end) = (Start::Earliest, End::Never);
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some(("from", "earliest")) => start = Start::Earliest,
                Some(("from", "latest")) => start = Start::Latest,
                Some(("from", v)) => start = Start::Offsets(offsets("from", v)?),
                Some(("end", "now")) => end = End::Now,
                Some(("end", v)) => end = End::Offsets(offsets("end", v)?),
                _ => return Err(format!("{usage}: `{pair}` is not a setting of a Kafka input")),
            }
        }
        Ok(Some(KafkaInput {
            broker: broker.to_string(),
            topic: topic.to_string(),
            start,
            end,
        }))
    }

    /// Connects, and fixes where each partition's read starts and ends. A topic that does not
    /// exist, offsets that do not name every partition, or a start after an end are errors.
    pub fn resolve(&self) -> Result<Vec<Partition>, String> {
        let runtime = runtime()?;
        runtime.block_on(async {
            let (_, clients) = self.connect().await?;
            let count = clients.len();
            let given = |what: &str, o: &[i64]| {
                if o.len() == count {
                    Ok(())
                } else {
                    Err(format!(
                        "{what} gives {} offsets; topic {} has {count} partitions (give one per partition, in id order)",
                        o.len(),
                        self.topic
                    ))
                }
            };
            if let Start::Offsets(o) = &self.start {
                given("from", o)?;
            }
            if let End::Offsets(o) = &self.end {
                given("end", o)?;
            }
            let mut partitions = Vec::with_capacity(count);
            for (i, client) in clients.iter().enumerate() {
                let id = client.partition();
                let high = || async { high_watermark(client).await.map_err(|e| self.failed(id, "reading its end", e)) };
                let from = match &self.start {
                    Start::Earliest => timed(client.get_offset(OffsetAt::Earliest))
                        .await
                        .map_err(|e| self.failed(id, "reading its earliest offset", e))?,
                    Start::Latest => high().await?,
                    Start::Offsets(o) => o[i],
                };
                let to = match &self.end {
                    End::Never => None,
                    End::Now => Some(high().await?),
                    End::Offsets(o) => Some(o[i]),
                };
                if let Some(to) = to
                    && to < from
                {
                    return Err(format!("partition {id} would end at {to}, before it starts at {from}"));
                }
                partitions.push(Partition { id, from, to });
            }
            Ok(partitions)
        })
    }

    /// Checks that the topic still holds every message of `partitions` (a re-run reads them
    /// again): nothing before `from` deleted, nothing up to `to` missing.
    pub fn check_held(&self, partitions: &[Partition]) -> Result<(), String> {
        let runtime = runtime()?;
        runtime.block_on(async {
            let (_, clients) = self.connect().await?;
            for p in partitions {
                let Some(client) = clients.iter().find(|c| c.partition() == p.id) else {
                    return Err(format!("partition {} is gone from topic {}", p.id, self.topic));
                };
                let earliest = timed(client.get_offset(OffsetAt::Earliest))
                    .await
                    .map_err(|e| self.failed(p.id, "reading its earliest offset", e))?;
                if earliest > p.from {
                    return Err(format!(
                        "partition {} no longer holds offsets {}..{earliest} that the run read",
                        p.id, p.from
                    ));
                }
                if let Some(to) = p.to {
                    let high = high_watermark(client)
                        .await
                        .map_err(|e| self.failed(p.id, "reading its end", e))?;
                    if high < to {
                        return Err(format!(
                            "partition {} ends at offset {high}, before the run's end at {to}",
                            p.id
                        ));
                    }
                }
            }
            Ok(())
        })
    }

    fn failed(&self, partition: i32, what: &str, e: impl std::fmt::Display) -> String {
        format!("partition {partition} of topic {}: {what}: {e}", self.topic)
    }

    /// A client of the broker and one of each of the topic's partitions, in id order.
    async fn connect(&self) -> Result<(Client, Vec<PartitionClient>), String> {
        let client = tokio::time::timeout(
            REQUEST_TIMEOUT,
            ClientBuilder::new(vec![self.broker.clone()])
                .backoff_config(BackoffConfig {
                    deadline: Some(REQUEST_TIMEOUT),
                    ..BackoffConfig::default()
                })
                .build(),
        )
        .await
        .map_err(|_| {
            format!(
                "the broker at {} did not answer in {REQUEST_TIMEOUT:?}",
                self.broker
            )
        })?
        .map_err(|e| format!("connecting to the broker at {}: {e}", self.broker))?;
        let topics = timed(client.list_topics())
            .await
            .map_err(|e| format!("listing the broker's topics: {e}"))?;
        let Some(topic) = topics.into_iter().find(|t| t.name == self.topic) else {
            return Err(format!(
                "topic {} does not exist on the broker at {}",
                self.topic, self.broker
            ));
        };
        let mut clients = Vec::with_capacity(topic.partitions.len());
        for id in topic.partitions {
            let pc = timed(client.partition_client(self.topic.clone(), id, UnknownTopicHandling::Error))
                .await
                .map_err(|e| self.failed(id, "connecting", e))?;
            clients.push(pc);
        }
        if clients.is_empty() {
            return Err(format!("topic {} has no partitions", self.topic));
        }
        Ok((client, clients))
    }

    /// The messages of `partitions` as lines, read in turn (see the module's doc).
    pub(crate) fn open(&self, partitions: &[Partition]) -> Result<KafkaLines, String> {
        let runtime = runtime()?;
        let (client, clients) = runtime.block_on(self.connect())?;
        KafkaLines::new((runtime, client, clients), partitions, &self.topic)
    }
}

/// A request that takes longer than [`REQUEST_TIMEOUT`] fails.
async fn timed<T>(
    f: impl std::future::Future<Output = Result<T, rskafka::client::error::Error>>,
) -> Result<T, String> {
    match tokio::time::timeout(REQUEST_TIMEOUT, f).await {
        Ok(r) => r.map_err(|e| e.to_string()),
        Err(_) => Err(format!("no answer in {REQUEST_TIMEOUT:?}")),
    }
}

/// A partition's end: the high watermark a fetch reports (some brokers answer a request for
/// the latest offset with the start of the last batch instead).
async fn high_watermark(client: &PartitionClient) -> Result<i64, String> {
    let earliest = timed(client.get_offset(OffsetAt::Earliest)).await?;
    let (_, high) = timed(client.fetch_records(earliest, 1..FETCH_BYTES, 0)).await?;
    Ok(high)
}

fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("starting the Kafka client: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kafka_inputs_parse_and_bad_ones_are_named() {
        let k = KafkaInput::parse("kafka://127.0.0.1:9092/views?end=now&from=3,4")
            .unwrap()
            .unwrap();
        assert_eq!(k.broker, "127.0.0.1:9092");
        assert_eq!(k.topic, "views");
        assert_eq!((k.start, k.end), (Start::Offsets(vec![3, 4]), End::Now));
        let k = KafkaInput::parse("kafka://broker:1/t").unwrap().unwrap();
        assert_eq!((k.start, k.end), (Start::Earliest, End::Never));
        assert_eq!(KafkaInput::parse("views.csv"), Ok(None));
        for (bad, says) in [
            ("kafka://broker/t", "is not HOST:PORT"),
            ("kafka://broker:9092", "name the topic"),
            ("kafka://broker:9092/", "is not a topic name"),
            ("kafka://broker:9092/a b", "is not a topic name"),
            ("kafka://broker:9092/t?end=soon", "`soon` is not an offset"),
            ("kafka://broker:9092/t?from=-1", "`-1` is not an offset"),
            ("kafka://broker:9092/t?group=g", "`group=g` is not a setting"),
        ] {
            let e = KafkaInput::parse(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn an_unreachable_broker_is_named() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .unwrap()
            .port();
        let k = KafkaInput::parse(&format!("kafka://127.0.0.1:{port}/t?end=now"))
            .unwrap()
            .unwrap();
        let e = k.resolve().unwrap_err();
        assert!(e.contains(&format!("127.0.0.1:{port}")), "{e}");
    }
}
