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

use std::collections::VecDeque;
use std::io::{BufRead, Read};
use std::time::{Duration, Instant};

use rskafka::BackoffConfig;
use rskafka::client::partition::{OffsetAt, PartitionClient, UnknownTopicHandling};
use rskafka::client::{Client, ClientBuilder};
use serde::{Deserialize, Serialize};

/// How long connecting to the broker and each request may take before it counts as failed.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// How often a read whose broker went away tries again (and says so).
pub const RETRY_EVERY: Duration = Duration::from_secs(1);
/// The most bytes one fetch asks a partition for.
const FETCH_BYTES: i32 = 1 << 20;
/// How long a fetch of a stream waits for new messages.
const STREAM_WAIT_MS: i32 = 100;
/// How long a fetch of a bounded read waits: not at all, its messages are there (a broker
/// may wait out the whole time for a fetch it could fill only in part: tansu does).
const BOUNDED_WAIT_MS: i32 = 0;
/// How often the read says how far it is in each partition (`megaflux::input` events).
const PROGRESS_EVERY: Duration = Duration::from_millis(250);
/// How long a bounded read waits before it asks again for messages a broker did not give.
const BOUNDED_AGAIN: Duration = Duration::from_millis(5);

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
        let (_client, clients) = runtime.block_on(self.connect())?;
        let mut reads = Vec::with_capacity(partitions.len());
        for p in partitions {
            let client = clients
                .iter()
                .position(|c| c.partition() == p.id)
                .ok_or_else(|| format!("partition {} is gone from topic {}", p.id, self.topic))?;
            reads.push(PartitionRead {
                client,
                id: p.id,
                next: p.from,
                to: p.to,
                fetched: VecDeque::new(),
                done: p.to.is_some_and(|to| to <= p.from),
                end: p.to.unwrap_or(p.from),
            });
        }
        Ok(KafkaLines {
            runtime,
            _client,
            clients,
            reads,
            turn: 0,
            line: Vec::new(),
            at: 0,
            topic: self.topic.clone(),
            last_warning: None,
            last_progress: None,
        })
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

/// Where one partition's read is.
struct PartitionRead {
    client: usize,
    id: i32,
    /// The next offset to take.
    next: i64,
    to: Option<i64>,
    /// Messages fetched and not yet taken: offset and value.
    fetched: VecDeque<(i64, Option<Vec<u8>>)>,
    done: bool,
    /// The partition's end as last seen (its high watermark, or the read's end).
    end: i64,
}

/// A topic's messages as lines (one per message), for the input thread.
pub(crate) struct KafkaLines {
    runtime: tokio::runtime::Runtime,
    _client: Client,
    clients: Vec<PartitionClient>,
    reads: Vec<PartitionRead>,
    /// The partition whose turn it is.
    turn: usize,
    /// The current line, and how much of it was taken.
    line: Vec<u8>,
    at: usize,
    topic: String,
    /// When the read last said its broker was away.
    last_warning: Option<Instant>,
    /// When it last said how far it is.
    last_progress: Option<Instant>,
}

impl KafkaLines {
    /// The next message's value as a line, in turn order; none once every partition ended.
    fn next_line(&mut self) -> std::io::Result<bool> {
        let stream = self.reads.iter().any(|r| r.to.is_none());
        let mut idle_round = 0;
        loop {
            if self.last_progress.is_none_or(|at| at.elapsed() >= PROGRESS_EVERY) {
                self.progress();
            }
            if self.reads.iter().all(|r| r.done) {
                self.progress();
                return Ok(false);
            }
            let n = self.reads.len();
            let i = self.turn % n;
            if self.reads[i].done {
                self.turn += 1;
                continue;
            }
            if self.reads[i].fetched.is_empty() {
                let wait = if stream {
                    (STREAM_WAIT_MS / n as i32).max(1)
                } else {
                    BOUNDED_WAIT_MS
                };
                self.fetch(i, wait)?;
            }
            let read = &mut self.reads[i];
            match read.fetched.pop_front() {
                Some((offset, value)) => {
                    read.next = offset + 1;
                    if read.to.is_some_and(|to| read.next >= to) {
                        read.done = true;
                        read.fetched.clear();
                    }
                    self.turn += 1;
                    let value = value.unwrap_or_default();
                    if value.contains(&b'\n') {
                        return Err(std::io::Error::new(
                            std::io::ErrorKind::InvalidData,
                            format!(
                                "partition {} offset {offset} of topic {}: the message holds a line break (each message is one line)",
                                read.id, self.topic
                            ),
                        ));
                    }
                    self.line.clear();
                    self.line.extend_from_slice(&value);
                    self.line.push(b'\n');
                    self.at = 0;
                    return Ok(true);
                }
                // A bounded read waits for its partition's next message (it is there: the
                // end was fixed from what the partition held); a stream goes on to the next.
                None if stream => {
                    self.turn += 1;
                    idle_round += 1;
                    if idle_round >= n {
                        idle_round = 0;
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
                None => std::thread::sleep(BOUNDED_AGAIN),
            }
        }
    }

    /// Says how far the read is in each partition.
    fn progress(&mut self) {
        self.last_progress = Some(Instant::now());
        for r in &self.reads {
            tracing::info!(
                target: "megaflux::input",
                phase = "partition",
                partition = r.id,
                offset = r.next,
                end = r.end.max(r.next),
            );
        }
    }

    /// Fetches partition `i`'s next messages, trying again every [`RETRY_EVERY`] while the
    /// broker is away (and saying so, once per try, in the log).
    fn fetch(&mut self, i: usize, max_wait_ms: i32) -> std::io::Result<()> {
        loop {
            let (client, next) = (&self.clients[self.reads[i].client], self.reads[i].next);
            match self
                .runtime
                .block_on(timed(client.fetch_records(next, 1..FETCH_BYTES, max_wait_ms)))
            {
                Ok((records, high)) => {
                    let read = &mut self.reads[i];
                    if let Some(at) = self.last_warning.take() {
                        tracing::info!(target: "megaflux::input", topic = %self.topic, "the broker is back after {:.1} s", at.elapsed().as_secs_f64());
                        eprintln!("megaflux: topic {}: the broker is back", self.topic);
                    }
                    read.end = read.to.map_or(high, |to| to.min(high));
                    let (before, got) = (read.fetched.len(), records.len());
                    let past_end = records.iter().any(|r| read.to.is_some_and(|to| r.offset >= to));
                    read.fetched.extend(
                        records
                            .into_iter()
                            .filter(|r| r.offset >= next && read.to.is_none_or(|to| r.offset < to))
                            .map(|r| (r.offset, r.record.value)),
                    );
                    // No message before the end, and the broker holds the end: what is left
                    // before it are offsets that hold no message (transaction markers).
                    let held = read.to.is_some_and(|to| high >= to);
                    if read.fetched.len() == before && held && (past_end || got == 0) {
                        read.done = true;
                    }
                    return Ok(());
                }
                Err(e) => {
                    let id = self.reads[i].id;
                    let line = format!(
                        "topic {}: partition {id} at offset {next}: {e}; trying again every {:?}",
                        self.topic, RETRY_EVERY
                    );
                    tracing::warn!(
                        target: "megaflux::input",
                        phase = "retry",
                        partition = id,
                        offset = next,
                        reason = %format!("topic {}: {e}", self.topic),
                    );
                    eprintln!("megaflux: warning: {line}");
                    self.last_warning.get_or_insert_with(Instant::now);
                    std::thread::sleep(RETRY_EVERY);
                }
            }
        }
    }
}

impl Read for KafkaLines {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let available = self.fill_buf()?;
        let n = available.len().min(buf.len());
        buf[..n].copy_from_slice(&available[..n]);
        self.consume(n);
        Ok(n)
    }
}

impl BufRead for KafkaLines {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        if self.at >= self.line.len() && !self.next_line()? {
            return Ok(&[]);
        }
        Ok(&self.line[self.at..])
    }

    fn consume(&mut self, amt: usize) {
        self.at = (self.at + amt).min(self.line.len());
    }
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
