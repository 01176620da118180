//! Trace files: JSON Lines, a [`TraceHeader`] line then one [`Stamped`] event per line
//! (`traces/FORMAT.md`).
//!
//! The recorder writes through a bounded buffer and flushes at least every
//! [`FLUSH_EVERY`], so a crash leaves a readable prefix: every complete line is an event.
//! The reader accepts such a prefix (a last line without its newline is dropped), skips
//! event kinds it does not know, and names the line of anything else that is wrong: as an
//! error, or, reading with [`BadLines::Skip`] (as [`read`] does), by skipping the line and
//! noting its number in an [`Unreadable`]. A header that cannot be read is always an error.

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::error::ProbeError;
use crate::event::{FORMAT_VERSION, KINDS, Stamped};

mod unreadable;

pub use unreadable::{BadLines, KEPT_LINES, Unreadable};

/// The `format` field of every trace header.
pub const FORMAT_NAME: &str = "megaflux-trace";
/// The recorder flushes at least this often.
pub const FLUSH_EVERY: Duration = Duration::from_secs(1);
/// The recorder's buffer.
const BUFFER_BYTES: usize = 1 << 20;

/// The first line of a trace: what job it records, and what recorded it where.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TraceHeader {
    /// Always [`FORMAT_NAME`]; a reader refuses anything else.
    pub format: String,
    /// The format version the trace follows; readers take 1 to [`FORMAT_VERSION`].
    pub version: u32,
    /// The megaflux version that wrote the trace.
    pub megaflux: String,
    /// The build that wrote it (version 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build: Option<Build>,
    /// The machine of the process that wrote it (version 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<Host>,
    /// The job's complete configuration (workload and its flags, seed, rate, bins, workers,
    /// migrations, failures, timely arguments), as `megaflux run` took it.
    pub config: serde_json::Value,
    /// Timely processes in the job (`-n`).
    pub processes: u32,
    /// Workers per process.
    pub workers: u32,
    /// Workers in the whole job (`processes × workers`).
    pub peers: u32,
    /// Bins per operator (a power of two).
    pub bins: u32,
    /// The unit of every logical time in the trace (version 1: always `ms`).
    #[serde(default = "milliseconds")]
    pub time_unit: String,
    /// The bin→worker map of primaries before any command.
    pub initial_map: Vec<u32>,
    /// Every bin's holders before any command, as `placement` events spell them (`P/S`,
    /// `P`); empty in version 1.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub initial_placement: Vec<String>,
    /// The cluster's host list (`-h FILE`), one `host:port` per process; empty for one
    /// process.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<String>,
}

fn milliseconds() -> String {
    "ms".to_string()
}

/// The build that wrote a trace.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Build {
    /// The megaflux version of the build (the crate's version).
    pub version: String,
    /// The git revision it was built from (`unknown` outside a git checkout).
    pub git: String,
    /// `release` or `debug`.
    pub profile: String,
}

/// The machine a trace was written on.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Host {
    /// The cores the process could use (its available parallelism).
    pub cores: usize,
    /// The machine's memory in bytes, `None` where it could not be read.
    pub memory_bytes: Option<u64>,
}

impl Host {
    /// This machine.
    pub fn this() -> Self {
        Host {
            cores: std::thread::available_parallelism().map_or(1, usize::from),
            memory_bytes: megaflux::rss::total_memory(),
        }
    }
}

impl TraceHeader {
    /// The header of a trace of this format version written by this build, for a job of
    /// `processes` × `workers` workers; the time unit comes from `config`'s epoch, and
    /// `build`, `host`, `initial_placement` and `hosts` are left for the caller to fill.
    pub fn new(
        config: serde_json::Value,
        processes: u32,
        workers: u32,
        bins: u32,
        initial_map: Vec<u32>,
    ) -> Self {
        let time_unit = megaflux::epoch::EpochLen::of_config(&config).unit();
        TraceHeader {
            format: FORMAT_NAME.to_string(),
            version: FORMAT_VERSION,
            megaflux: env!("CARGO_PKG_VERSION").to_string(),
            build: None,
            host: None,
            config,
            processes,
            workers,
            peers: processes * workers,
            bins,
            time_unit,
            initial_map,
            initial_placement: Vec::new(),
            hosts: Vec::new(),
        }
    }
}

/// Writes a trace.
pub struct Recorder {
    path: PathBuf,
    out: BufWriter<File>,
    last_flush: Instant,
    lines: u64,
    bytes: u64,
}

impl Recorder {
    /// Creates `path` and writes the header. An existing file is replaced only when
    /// `replace` says so: a trace already recorded is never lost by accident.
    pub fn create(path: &Path, header: &TraceHeader, replace: bool) -> Result<Self, ProbeError> {
        let file = megaflux::files::create(path, replace).map_err(|e| match e.kind() {
            std::io::ErrorKind::AlreadyExists => ProbeError::Config(format!(
                "trace {} already exists: choose another file, or --force to replace it",
                path.display()
            )),
            _ => ProbeError::io(format!("creating trace {}", path.display()), e),
        })?;
        let mut recorder = Recorder {
            path: path.to_path_buf(),
            out: BufWriter::with_capacity(BUFFER_BYTES, file),
            last_flush: Instant::now(),
            lines: 0,
            bytes: 0,
        };
        recorder.line(header)?;
        recorder.flush()?;
        Ok(recorder)
    }

    fn line<T: Serialize>(&mut self, value: &T) -> Result<(), ProbeError> {
        let context = || format!("writing trace {}", self.path.display());
        let text =
            serde_json::to_vec(value).map_err(|e| ProbeError::io(context(), std::io::Error::other(e)))?;
        self.out
            .write_all(&text)
            .and_then(|()| self.out.write_all(b"\n"))
            .map_err(|e| ProbeError::io(context(), e))?;
        self.lines += 1;
        self.bytes += text.len() as u64 + 1;
        Ok(())
    }

    /// Appends an event; flushes if the last flush is [`FLUSH_EVERY`] ago.
    pub fn write(&mut self, event: &Stamped) -> Result<(), ProbeError> {
        self.line(event)?;
        if self.last_flush.elapsed() >= FLUSH_EVERY {
            self.flush()?;
        }
        Ok(())
    }

    /// Writes out everything buffered.
    pub fn flush(&mut self) -> Result<(), ProbeError> {
        self.last_flush = Instant::now();
        self.out
            .flush()
            .map_err(|e| ProbeError::io(format!("writing trace {}", self.path.display()), e))
    }

    /// Lines written, header included.
    pub fn lines(&self) -> u64 {
        self.lines
    }

    /// Bytes written, header included.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

/// The longest line a trace may have: a keyframe of a large job fits, a corrupt file that
/// never ends a line is refused before it is allocated.
pub const MAX_LINE_BYTES: usize = 64 << 20;

/// A trace as read back whole.
#[derive(Clone, Debug)]
pub struct Trace {
    /// The trace's first line.
    pub header: TraceHeader,
    /// Every event of a known kind, in the order of the file.
    pub events: Vec<Stamped>,
    /// Events of kinds this version does not know.
    pub skipped: u64,
    /// Event lines that could not be read (not UTF-8, not JSON, not an event, too long),
    /// skipped.
    pub unreadable: Unreadable,
    /// The file ended inside a line (the writer stopped mid-line, e.g. a crash).
    pub truncated: bool,
}

/// Reads a whole trace, skipping the event lines it cannot read ([`Trace::unreadable`]
/// names them). A header that cannot be read, or a file that cannot, is an error.
pub fn read(path: &Path) -> Result<Trace, ProbeError> {
    collect(TraceReader::open(path)?)
}

/// Reads a whole trace from `input`, as [`read`] does; `name` names it in errors.
pub fn read_from(input: impl BufRead, name: &str) -> Result<Trace, ProbeError> {
    collect(TraceReader::new(input, name)?)
}

fn collect<R: BufRead>(mut reader: TraceReader<R>) -> Result<Trace, ProbeError> {
    reader.set_bad_lines(BadLines::Skip);
    let mut events = Vec::new();
    while let Some(e) = reader.next_event()? {
        events.push(e);
    }
    Ok(Trace {
        header: reader.header,
        events,
        skipped: reader.skipped,
        unreadable: reader.unreadable,
        truncated: reader.truncated,
    })
}

/// An event as [`TraceReader::next_skimmed`] read it.
#[derive(Clone, Debug, PartialEq)]
pub enum Skimmed {
    /// Read whole.
    Event(Stamped),
    /// Only its clock and kind.
    Head {
        /// The event's clock, as [`Stamped::at_s`].
        at_s: f64,
        /// The event's kind, one of [`KINDS`].
        kind: &'static str,
    },
}

impl Skimmed {
    /// The event's clock: seconds since the probe of its process started.
    pub fn at_s(&self) -> f64 {
        match self {
            Skimmed::Event(e) => e.at_s,
            Skimmed::Head { at_s, .. } => *at_s,
        }
    }

    /// The event's `kind`, whether it was read whole or not.
    pub fn kind(&self) -> &'static str {
        match self {
            Skimmed::Event(e) => e.event.kind(),
            Skimmed::Head { kind, .. } => kind,
        }
    }
}

/// Reads a trace one event at a time, never holding more than one line.
pub struct TraceReader<R> {
    input: R,
    name: String,
    header: TraceHeader,
    /// The number of the line last read (the header is line 1).
    line: usize,
    /// The byte offset of the next line.
    offset: u64,
    /// The byte offset of the first line after the header.
    header_bytes: u64,
    buf: Vec<u8>,
    skipped: u64,
    truncated: bool,
    bad_lines: BadLines,
    unreadable: Unreadable,
}

/// What [`TraceReader::next_line`] found.
enum LineRead {
    /// The end of the input.
    End,
    /// A whole line, in `buf`.
    Complete,
    /// A last line without its newline, in `buf`.
    Cut,
    /// A line longer than [`MAX_LINE_BYTES`]; the input stands inside it.
    TooLong,
}

/// What [`TraceReader::skim`] made of a line.
enum Skim {
    /// An event of a known kind.
    Event(Skimmed),
    /// A well-formed line of a kind this version does not know.
    Unknown,
    /// A line that cannot be read: why, and its clock and kind if they could be.
    Unreadable { head: Option<Skimmed>, reason: String },
}

/// The fields every event has; serde skips the rest without building them.
#[derive(serde::Deserialize)]
struct Head<'a> {
    at_s: f64,
    #[serde(borrow)]
    kind: std::borrow::Cow<'a, str>,
}

impl<R: BufRead + Seek> TraceReader<R> {
    /// Goes back (or on) to a place [`TraceReader::offset`] and [`TraceReader::line`] gave:
    /// the next event read is the one that started there.
    pub fn seek(&mut self, offset: u64, line: usize) -> Result<(), ProbeError> {
        self.input
            .seek(SeekFrom::Start(offset))
            .map_err(|e| ProbeError::io(format!("seeking in trace {}", self.name), e))?;
        self.offset = offset;
        self.line = line;
        self.truncated = false;
        Ok(())
    }
}

impl TraceReader<BufReader<File>> {
    /// Opens a trace file and reads its header.
    pub fn open(path: &Path) -> Result<Self, ProbeError> {
        let file =
            File::open(path).map_err(|e| ProbeError::io(format!("opening trace {}", path.display()), e))?;
        TraceReader::new(BufReader::new(file), &path.display().to_string())
    }
}

impl<R: BufRead> TraceReader<R> {
    /// Reads the header of the trace `input` (named `name` in errors).
    pub fn new(input: R, name: &str) -> Result<Self, ProbeError> {
        let mut reader = TraceReader {
            input,
            name: name.to_string(),
            header: TraceHeader::new(serde_json::Value::Null, 0, 0, 0, Vec::new()),
            line: 0,
            offset: 0,
            header_bytes: 0,
            buf: Vec::new(),
            skipped: 0,
            truncated: false,
            bad_lines: BadLines::Refuse,
            unreadable: Unreadable::default(),
        };
        let header: TraceHeader = match reader.next_line()? {
            LineRead::End | LineRead::Cut => return Err(reader.bad("empty file: no header line".into())),
            LineRead::TooLong => return Err(reader.bad(too_long())),
            LineRead::Complete => {
                let text = reader.text().map_err(|reason| reader.bad(reason))?;
                serde_json::from_str(text).map_err(|e| reader.bad(format!("not a trace header: {e}")))?
            }
        };
        if header.format != FORMAT_NAME {
            return Err(reader.bad(format!("format is `{}`, not `{FORMAT_NAME}`", header.format)));
        }
        if !(1..=FORMAT_VERSION).contains(&header.version) {
            return Err(reader.bad(format!(
                "format version {} (this build reads versions 1 to {FORMAT_VERSION})",
                header.version
            )));
        }
        reader.header = header;
        reader.header_bytes = reader.offset;
        Ok(reader)
    }

    /// The trace's header, read when the reader was made.
    pub fn header(&self) -> &TraceHeader {
        &self.header
    }

    /// Events skipped so far because this version does not know their kind.
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    /// What the reader does from now on with an event line it cannot read; returns what
    /// it did until now. A new reader refuses them ([`BadLines::Refuse`]).
    pub fn set_bad_lines(&mut self, bad_lines: BadLines) -> BadLines {
        std::mem::replace(&mut self.bad_lines, bad_lines)
    }

    /// The event lines skipped so far because they could not be read (with
    /// [`BadLines::Skip`]); each counted once, however often it is read again after seeks.
    pub fn unreadable(&self) -> &Unreadable {
        &self.unreadable
    }

    /// Whether the trace ended inside a line (only known once the end was reached).
    pub fn truncated(&self) -> bool {
        self.truncated
    }

    /// The number of the line last read.
    pub fn line(&self) -> usize {
        self.line
    }

    /// Where the first event's line starts.
    pub fn header_bytes(&self) -> u64 {
        self.header_bytes
    }

    /// Where the next line starts: with [`TraceReader::line`], a place to come back to with
    /// [`TraceReader::seek`].
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The next event, or `None` at the end of the trace. A last line without its newline
    /// (the writer stopped mid-line) ends the trace and sets [`TraceReader::truncated`]. A
    /// line that cannot be read is an error naming it, or skipped (see [`BadLines`]).
    pub fn next_event(&mut self) -> Result<Option<Stamped>, ProbeError> {
        while self.next_event_line()? {
            match self.parse_event() {
                Ok(Some(event)) => return Ok(Some(event)),
                Ok(None) => self.skipped += 1,
                Err(reason) => self.unreadable_line(reason)?,
            }
        }
        Ok(None)
    }

    /// The next event read only as far as its clock and kind, unless its kind is one of
    /// `whole` (then it is read whole): a pass over a long trace that needs few of its events
    /// costs a scan of each line instead of building every event. Lines are still checked to
    /// be JSON objects with a clock and a kind; kinds this version does not know are skipped.
    /// A line that cannot be read is an error naming it, or skipped; skipping, a line of a
    /// kind in `whole` that has a clock and a kind but does not read whole comes back as its
    /// head (see [`BadLines::Skip`]).
    pub fn next_skimmed(&mut self, whole: &[&str]) -> Result<Option<Skimmed>, ProbeError> {
        while self.next_event_line()? {
            match self.skim(whole) {
                Skim::Event(skimmed) => return Ok(Some(skimmed)),
                Skim::Unknown => self.skipped += 1,
                Skim::Unreadable { head, reason } => {
                    self.unreadable_line(reason)?;
                    if head.is_some() {
                        return Ok(head);
                    }
                }
            }
        }
        Ok(None)
    }

    /// The event on the line in `buf`: `None` for a well-formed line of a kind this version
    /// does not know, or why it is not an event.
    fn parse_event(&self) -> Result<Option<Stamped>, String> {
        let line = self.text()?;
        match serde_json::from_str::<Stamped>(line) {
            Ok(event) => Ok(Some(event)),
            Err(_) if of_unknown_kind(line) => Ok(None),
            Err(e) => Err(format!("not an event: {e}")),
        }
    }

    /// The line in `buf` read as far as its clock and kind, or whole for a kind in `whole`.
    fn skim(&self, whole: &[&str]) -> Skim {
        let unreadable = |head, reason| Skim::Unreadable { head, reason };
        let line = match self.text() {
            Ok(line) => line,
            Err(reason) => return unreadable(None, reason),
        };
        let head: Head = match serde_json::from_str(line) {
            Ok(head) => head,
            Err(e) => return unreadable(None, format!("not an event: {e}")),
        };
        let Some(kind) = KINDS.iter().copied().find(|k| *k == head.kind) else {
            return Skim::Unknown;
        };
        let just_head = Skimmed::Head {
            at_s: head.at_s,
            kind,
        };
        if !whole.contains(&kind) {
            return Skim::Event(just_head);
        }
        match serde_json::from_str::<Stamped>(line) {
            Ok(event) => Skim::Event(Skimmed::Event(event)),
            Err(e) => unreadable(Some(just_head), format!("not an event: {e}")),
        }
    }

    /// A line that cannot be read, for `reason`: an error naming it, or noted as skipped.
    fn unreadable_line(&mut self, reason: String) -> Result<(), ProbeError> {
        match self.bad_lines {
            BadLines::Refuse => Err(self.bad(reason)),
            BadLines::Skip => {
                self.unreadable.note(self.line, reason);
                Ok(())
            }
        }
    }

    /// Reads lines into `buf` until one that is not blank; `false` at the end of the trace (a
    /// last line without its newline ends it and sets [`TraceReader::truncated`]).
    fn next_event_line(&mut self) -> Result<bool, ProbeError> {
        loop {
            match self.next_line()? {
                LineRead::End => return Ok(false),
                LineRead::Cut => {
                    self.truncated = true;
                    return Ok(false);
                }
                LineRead::TooLong => {
                    if !self.skip_long_line()? {
                        self.truncated = true;
                        return Ok(false);
                    }
                }
                LineRead::Complete if self.buf.trim_ascii().is_empty() => {}
                LineRead::Complete => return Ok(true),
            }
        }
    }

    /// A line longer than [`MAX_LINE_BYTES`]: an error, or read past without being kept and
    /// noted as skipped. `false` if the input ended inside it (a cut last line).
    fn skip_long_line(&mut self) -> Result<bool, ProbeError> {
        if self.bad_lines == BadLines::Refuse {
            return Err(self.bad(too_long()));
        }
        if !self.drain_line()? {
            return Ok(false);
        }
        self.unreadable_line(too_long())?;
        Ok(true)
    }

    /// Reads the next line into `buf`. Stops at a line longer than [`MAX_LINE_BYTES`]
    /// before reading more of it.
    fn next_line(&mut self) -> Result<LineRead, ProbeError> {
        self.buf.clear();
        self.line += 1;
        loop {
            let Some(available) = fill(&mut self.input, &self.name)? else {
                continue;
            };
            if available.is_empty() {
                return Ok(if self.buf.is_empty() {
                    LineRead::End
                } else {
                    LineRead::Cut
                });
            }
            let (take, complete) = match available.iter().position(|b| *b == b'\n') {
                Some(i) => (i + 1, true),
                None => (available.len(), false),
            };
            if self.buf.len() + take > MAX_LINE_BYTES + 1 {
                return Ok(LineRead::TooLong);
            }
            self.buf.extend_from_slice(&available[..take]);
            self.input.consume(take);
            self.offset += take as u64;
            if complete {
                return Ok(LineRead::Complete);
            }
        }
    }

    /// Reads on past the newline of the line the input stands in, keeping none of it;
    /// `false` if the input ends first.
    fn drain_line(&mut self) -> Result<bool, ProbeError> {
        self.buf.clear();
        loop {
            let Some(available) = fill(&mut self.input, &self.name)? else {
                continue;
            };
            if available.is_empty() {
                return Ok(false);
            }
            let (take, complete) = match available.iter().position(|b| *b == b'\n') {
                Some(i) => (i + 1, true),
                None => (available.len(), false),
            };
            self.input.consume(take);
            self.offset += take as u64;
            if complete {
                return Ok(true);
            }
        }
    }

    /// The line in `buf`, without its line end.
    fn text(&self) -> Result<&str, String> {
        std::str::from_utf8(&self.buf)
            .map(str::trim_end)
            .map_err(|e| format!("not UTF-8: {e}"))
    }

    fn bad(&self, reason: String) -> ProbeError {
        ProbeError::Trace {
            path: self.name.clone(),
            line: self.line,
            reason,
        }
    }
}

/// Why a line longer than [`MAX_LINE_BYTES`] is not read.
fn too_long() -> String {
    format!("longer than {} MiB", MAX_LINE_BYTES >> 20)
}

/// Whether `line` is a JSON object whose `kind` this version does not know.
fn of_unknown_kind(line: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(line)
        .ok()
        .and_then(|v| {
            v.get("kind")
                .and_then(|k| k.as_str())
                .map(|k| !KINDS.contains(&k))
        })
        .unwrap_or(false)
}

/// The bytes `input` has buffered, reading more if none are; `None` when a read was
/// interrupted (try again).
fn fill<'a, R: BufRead>(input: &'a mut R, name: &str) -> Result<Option<&'a [u8]>, ProbeError> {
    match input.fill_buf() {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => Ok(None),
        Err(e) => Err(ProbeError::io(format!("reading trace {name}"), e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Event;

    #[test]
    fn the_time_unit_is_the_jobs_epoch() {
        let unit = |config| TraceHeader::new(config, 1, 2, 16, vec![0; 16]).time_unit;
        assert_eq!(unit(serde_json::json!({"epoch_us": 100})), "100us");
        assert_eq!(unit(serde_json::json!({"epoch_us": 1000})), "ms");
        assert_eq!(unit(serde_json::json!({"workload": "keycount"})), "ms");
    }

    fn header() -> TraceHeader {
        TraceHeader::new(
            serde_json::json!({"workload": "keycount"}),
            1,
            2,
            16,
            [0, 1].repeat(8),
        )
    }

    fn event(worker: u32) -> Stamped {
        Stamped {
            at_s: 0.5,
            process: 0,
            event: Event::WorkerStats {
                outputs_total: None,
                worker,
                records: 10,
                applied: None,
                busy_ns: 5,
                interval_ns: 250_000_000,
            },
        }
    }

    #[test]
    fn writes_and_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let mut r = Recorder::create(&path, &header(), false).unwrap();
        r.write(&event(0)).unwrap();
        r.write(&event(1)).unwrap();
        r.flush().unwrap();
        let t = read(&path).unwrap();
        assert_eq!(t.header, header());
        assert_eq!(t.events, vec![event(0), event(1)]);
        assert!(!t.truncated);
    }

    #[test]
    fn a_cut_last_line_leaves_the_prefix() {
        let mut text = serde_json::to_string(&header()).unwrap() + "\n";
        text += &(serde_json::to_string(&event(0)).unwrap() + "\n");
        text += r#"{"at_s":1.0,"process":0,"kind":"worker_st"#;
        let t = read_from(text.as_bytes(), "cut").unwrap();
        assert_eq!(t.events.len(), 1);
        assert!(t.truncated);
    }

    #[test]
    fn lines_past_the_cap_are_refused_or_skipped_before_they_are_read_whole() {
        let head = serde_json::to_string(&header()).unwrap() + "\n";
        let mut endless = head.into_bytes();
        endless.extend(std::iter::repeat_n(b'x', MAX_LINE_BYTES + 2));
        let mut strict = TraceReader::new(endless.as_slice(), "big").unwrap();
        let err = strict.next_event().unwrap_err().to_string();
        assert!(err.contains("line 2") && err.contains("longer than"), "{err}");
        // Skipping, a long last line without its end is a cut one; with its end, the event
        // after it is read.
        let cut = read_from(endless.as_slice(), "big").unwrap();
        assert!(cut.truncated && cut.events.is_empty() && cut.unreadable.is_empty());
        endless.push(b'\n');
        endless.extend(serde_json::to_vec(&event(3)).unwrap());
        endless.push(b'\n');
        let t = read_from(endless.as_slice(), "big").unwrap();
        assert_eq!(t.events, vec![event(3)]);
        assert_eq!(t.unreadable.lines().to_vec(), vec![2]);
        assert!(
            t.unreadable.to_string().contains("longer than"),
            "{}",
            t.unreadable
        );
        let err = read_from(&b"\xff\xfe\n"[..], "bytes").unwrap_err().to_string();
        assert!(err.contains("line 1") && err.contains("UTF-8"), "{err}");
        let err = read_from(&b""[..], "empty").unwrap_err().to_string();
        assert!(err.contains("no header"), "{err}");
    }

    proptest::proptest! {
        #[test]
        fn no_bytes_make_the_reader_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512)) {
            let _ = read_from(bytes.as_slice(), "random");
        }

        #[test]
        fn no_mutation_of_a_trace_makes_the_reader_panic(
            cut in 0usize..2000,
            flips in proptest::collection::vec((0usize..2000, proptest::prelude::any::<u8>()), 0..8),
        ) {
            let mut text = (serde_json::to_string(&header()).unwrap() + "\n").into_bytes();
            for w in 0..8 {
                text.extend(serde_json::to_string(&event(w)).unwrap().into_bytes());
                text.push(b'\n');
            }
            for (at, byte) in flips {
                let i = at % text.len();
                text[i] = byte;
            }
            text.truncate(cut.min(text.len()));
            let _ = read_from(text.as_slice(), "mutated");
            if let Ok(mut reader) = TraceReader::new(text.as_slice(), "mutated") {
                while let Ok(Some(_)) = reader.next_skimmed(&["worker_stats"]) {}
            }
        }
    }

    #[test]
    fn skimming_reads_clocks_and_kinds_and_names_garbage() {
        let mut text = serde_json::to_string(&header()).unwrap() + "\n";
        text += &(serde_json::to_string(&event(0)).unwrap() + "\n\n");
        text += r#"{"kind":"recording","on":true,"at_s":2.5,"process":0}"#;
        text += "\n";
        text += r#"{"at_s":3.0,"process":0,"kind":"from_the_future"}"#;
        text += "\nnot json\n";
        let mut r = TraceReader::new(text.as_bytes(), "s").unwrap();
        assert_eq!(
            r.next_skimmed(&["worker_stats"]).unwrap(),
            Some(Skimmed::Event(event(0)))
        );
        assert_eq!(
            r.next_skimmed(&["worker_stats"]).unwrap(),
            Some(Skimmed::Head {
                at_s: 2.5,
                kind: "recording"
            })
        );
        let err = r.next_skimmed(&[]).unwrap_err().to_string();
        assert!(err.contains("line 6"), "{err}");
        assert_eq!(r.skipped(), 1);
    }

    /// A trace with unreadable lines between its events: a known kind without its fields
    /// (line 3), bytes that are not UTF-8 (line 4), text that is not JSON (line 5).
    fn with_bad_lines() -> Vec<u8> {
        let mut bytes = serde_json::to_vec(&header()).unwrap();
        bytes.push(b'\n');
        bytes.extend(serde_json::to_vec(&event(0)).unwrap());
        bytes.extend(b"\n{\"at_s\":1.0,\"process\":0,\"kind\":\"worker_stats\"}\n\xff\xfe\nnot json\n");
        bytes.extend(serde_json::to_vec(&event(1)).unwrap());
        bytes.push(b'\n');
        bytes
    }

    #[test]
    fn bad_lines_in_the_middle_are_skipped_and_named() {
        let t = read_from(with_bad_lines().as_slice(), "bad").unwrap();
        assert_eq!(t.events, vec![event(0), event(1)]);
        assert_eq!(t.unreadable.lines().to_vec(), vec![3, 4, 5]);
        let said = t.unreadable.to_string();
        assert!(
            said.starts_with("skipped 3 unreadable lines: 3, 4, 5 (line 3: not an event"),
            "{said}"
        );
        // Refusing, the first is an error naming it.
        let bad = with_bad_lines();
        let mut strict = TraceReader::new(bad.as_slice(), "bad").unwrap();
        assert_eq!(strict.next_event().unwrap(), Some(event(0)));
        let err = strict.next_event().unwrap_err().to_string();
        assert!(err.contains("line 3"), "{err}");
        // A bad header is refused still.
        let mut no_header = b"not a header\n".to_vec();
        no_header.extend(&with_bad_lines()[..]);
        let err = read_from(no_header.as_slice(), "bad").unwrap_err().to_string();
        assert!(err.contains("line 1"), "{err}");
    }

    #[test]
    fn skimming_skips_bad_lines_once_however_often_it_reads_them() {
        let mut r = TraceReader::new(std::io::Cursor::new(with_bad_lines()), "bad").unwrap();
        assert_eq!(r.set_bad_lines(BadLines::Skip), BadLines::Refuse);
        let mut seen = Vec::new();
        for _ in 0..2 {
            r.seek(r.header_bytes(), 1).unwrap();
            seen.clear();
            while let Some(s) = r.next_skimmed(&["worker_stats"]).unwrap() {
                seen.push(s);
            }
        }
        // The known kind without its fields is counted by its head; the others are not.
        assert_eq!(
            seen,
            vec![
                Skimmed::Event(event(0)),
                Skimmed::Head {
                    at_s: 1.0,
                    kind: "worker_stats"
                },
                Skimmed::Event(event(1)),
            ]
        );
        assert_eq!(r.unreadable().count(), 3);
        assert_eq!(r.unreadable().lines().to_vec(), vec![3, 4, 5]);
    }

    #[test]
    fn unknown_kinds_are_skipped_and_garbage_is_named() {
        let head = serde_json::to_string(&header()).unwrap() + "\n";
        let future = head.clone() + r#"{"at_s":1.0,"process":0,"kind":"from_the_future","x":1}"# + "\n";
        assert_eq!(read_from(future.as_bytes(), "f").unwrap().skipped, 1);
        let garbage = head.clone() + "{\"at_s\":1.0}\nnot json\n";
        let mut strict = TraceReader::new(garbage.as_bytes(), "g").unwrap();
        let err = strict.next_event().unwrap_err().to_string();
        assert!(err.contains("line 2"), "{err}");
        let skipped = read_from(garbage.as_bytes(), "g").unwrap();
        assert_eq!(skipped.unreadable.lines().to_vec(), vec![2, 3]);
        let err = read_from("{}\n".as_bytes(), "h").unwrap_err().to_string();
        assert!(err.contains("line 1"), "{err}");
        let mut old = header();
        old.version = 99;
        let text = serde_json::to_string(&old).unwrap() + "\n";
        let err = read_from(text.as_bytes(), "v").unwrap_err().to_string();
        assert!(err.contains("version 99"), "{err}");
    }
}
