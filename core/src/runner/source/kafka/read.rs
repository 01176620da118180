//! The read of a topic's partitions, in turn, one message each, as lines for the input
//! thread: a bounded read waits for each partition's next message (it is there), a stream
//! goes on to the next partition; a fetch that fails is asked again every [`RETRY_EVERY`].

use std::collections::VecDeque;
use std::io::{BufRead, Read};
use std::time::{Duration, Instant};

use rskafka::client::Client;
use rskafka::client::partition::PartitionClient;

use super::{FETCH_BYTES, Partition, timed};

/// How often a read whose broker went away tries again (and says so).
pub const RETRY_EVERY: Duration = Duration::from_secs(1);
/// How long a fetch of a stream waits for new messages.
const STREAM_WAIT_MS: i32 = 100;
/// How long a fetch of a bounded read waits: not at all, its messages are there (a broker
/// may wait out the whole time for a fetch it could fill only in part: tansu does).
const BOUNDED_WAIT_MS: i32 = 0;
/// How often the read says how far it is in each partition (`megaflux::input` events).
const PROGRESS_EVERY: Duration = Duration::from_millis(250);
/// How long a bounded read waits before it asks again for messages a broker did not give.
const BOUNDED_AGAIN: Duration = Duration::from_millis(5);

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
    /// The read of `partitions` of `topic` over a runtime, a client and the topic's
    /// partition clients.
    pub(super) fn new(
        (runtime, client, clients): (tokio::runtime::Runtime, Client, Vec<PartitionClient>),
        partitions: &[Partition],
        topic: &str,
    ) -> Result<KafkaLines, String> {
        let mut reads = Vec::with_capacity(partitions.len());
        for p in partitions {
            let client = clients
                .iter()
                .position(|c| c.partition() == p.id)
                .ok_or_else(|| format!("partition {} is gone from topic {topic}", p.id))?;
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
            _client: client,
            clients,
            reads,
            turn: 0,
            line: Vec::new(),
            at: 0,
            topic: topic.to_string(),
            last_warning: None,
            last_progress: None,
        })
    }

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
