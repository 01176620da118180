//! Trace files: JSON Lines, a [`TraceHeader`] line then one [`Stamped`] event per line
//! (`traces/FORMAT.md`).
//!
//! The recorder writes through a bounded buffer and flushes at least every
//! [`FLUSH_EVERY`], so a crash leaves a readable prefix: every complete line is an event.
//! The reader accepts such a prefix (a last line without its newline is dropped), skips
//! event kinds it does not know, and names the line of anything else that is wrong.

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::error::ProbeError;
use crate::event::{FORMAT_VERSION, KINDS, Stamped};

/// The `format` field of every trace header.
pub const FORMAT_NAME: &str = "megaflux-trace";
/// The recorder flushes at least this often.
pub const FLUSH_EVERY: Duration = Duration::from_secs(1);
/// The recorder's buffer.
const BUFFER_BYTES: usize = 1 << 20;

/// The first line of a trace: what job it records.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TraceHeader {
    pub format: String,
    pub version: u32,
    /// The megaflux version that wrote the trace.
    pub megaflux: String,
    /// The job's complete configuration (workload and its flags, seed, rate, bins, workers,
    /// migrations, timely arguments), as `megaflux run` took it.
    pub config: serde_json::Value,
    pub processes: u32,
    /// Workers per process.
    pub workers: u32,
    pub peers: u32,
    pub bins: u32,
    /// The bin→worker map before any command.
    pub initial_map: Vec<u32>,
}

impl TraceHeader {
    pub fn new(
        config: serde_json::Value,
        processes: u32,
        workers: u32,
        bins: u32,
        initial_map: Vec<u32>,
    ) -> Self {
        TraceHeader {
            format: FORMAT_NAME.to_string(),
            version: FORMAT_VERSION,
            megaflux: env!("CARGO_PKG_VERSION").to_string(),
            config,
            processes,
            workers,
            peers: processes * workers,
            bins,
            initial_map,
        }
    }
}

/// Writes a trace.
pub struct Recorder {
    path: PathBuf,
    out: BufWriter<File>,
    last_flush: Instant,
    lines: u64,
}

impl Recorder {
    /// Creates `path` (replacing it) and writes the header.
    pub fn create(path: &Path, header: &TraceHeader) -> Result<Self, ProbeError> {
        let file = File::create(path)
            .map_err(|e| ProbeError::io(format!("creating trace {}", path.display()), e))?;
        let mut recorder = Recorder {
            path: path.to_path_buf(),
            out: BufWriter::with_capacity(BUFFER_BYTES, file),
            last_flush: Instant::now(),
            lines: 0,
        };
        recorder.line(header)?;
        recorder.flush()?;
        Ok(recorder)
    }

    fn line<T: Serialize>(&mut self, value: &T) -> Result<(), ProbeError> {
        let context = || format!("writing trace {}", self.path.display());
        serde_json::to_writer(&mut self.out, value)
            .map_err(|e| ProbeError::io(context(), std::io::Error::other(e)))?;
        self.out
            .write_all(b"\n")
            .map_err(|e| ProbeError::io(context(), e))?;
        self.lines += 1;
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
}

/// A trace as read back.
#[derive(Clone, Debug)]
pub struct Trace {
    pub header: TraceHeader,
    pub events: Vec<Stamped>,
    /// Events of kinds this version does not know.
    pub skipped: u64,
    /// The file ended inside a line (the writer stopped mid-line, e.g. a crash).
    pub truncated: bool,
}

/// Reads a whole trace.
pub fn read(path: &Path) -> Result<Trace, ProbeError> {
    let file =
        File::open(path).map_err(|e| ProbeError::io(format!("opening trace {}", path.display()), e))?;
    read_from(BufReader::new(file), &path.display().to_string())
}

/// Reads a trace from `input`; `name` names it in errors.
pub fn read_from(mut input: impl BufRead, name: &str) -> Result<Trace, ProbeError> {
    let bad = |line: usize, reason: String| ProbeError::Trace {
        path: name.to_string(),
        line,
        reason,
    };
    let mut buf = String::new();
    let mut number = 0;
    let mut next_line = |buf: &mut String| -> Result<Option<bool>, ProbeError> {
        buf.clear();
        let n = input
            .read_line(buf)
            .map_err(|e| ProbeError::io(format!("reading trace {name}"), e))?;
        Ok((n > 0).then(|| buf.ends_with('\n')))
    };
    number += 1;
    let header: TraceHeader = match next_line(&mut buf)? {
        None => return Err(bad(1, "empty file: no header line".into())),
        Some(_) => {
            serde_json::from_str(buf.trim_end()).map_err(|e| bad(1, format!("not a trace header: {e}")))?
        }
    };
    if header.format != FORMAT_NAME {
        return Err(bad(
            1,
            format!("format is `{}`, not `{FORMAT_NAME}`", header.format),
        ));
    }
    if header.version != FORMAT_VERSION {
        return Err(bad(
            1,
            format!(
                "format version {} (this build reads version {FORMAT_VERSION})",
                header.version
            ),
        ));
    }
    let mut trace = Trace {
        header,
        events: Vec::new(),
        skipped: 0,
        truncated: false,
    };
    while let Some(complete) = next_line(&mut buf)? {
        number += 1;
        if !complete {
            // The writer stopped mid-line: everything before is intact.
            trace.truncated = true;
            break;
        }
        let line = buf.trim_end();
        if line.is_empty() {
            continue;
        }
        match serde_json::from_str::<Stamped>(line) {
            Ok(event) => trace.events.push(event),
            Err(e) => {
                // A well-formed line of a kind this version does not know is skipped.
                let known_shape = serde_json::from_str::<serde_json::Value>(line)
                    .ok()
                    .and_then(|v| v.get("kind").and_then(|k| k.as_str()).map(str::to_string));
                match known_shape {
                    Some(kind) if !KINDS.contains(&kind.as_str()) => trace.skipped += 1,
                    _ => return Err(bad(number, format!("not an event: {e}"))),
                }
            }
        }
    }
    Ok(trace)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Event;

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
                worker,
                records: 10,
                busy_ns: 5,
                interval_ns: 250_000_000,
            },
        }
    }

    #[test]
    fn writes_and_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let mut r = Recorder::create(&path, &header()).unwrap();
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
    fn unknown_kinds_are_skipped_and_garbage_is_named() {
        let head = serde_json::to_string(&header()).unwrap() + "\n";
        let future = head.clone() + r#"{"at_s":1.0,"process":0,"kind":"from_the_future","x":1}"# + "\n";
        assert_eq!(read_from(future.as_bytes(), "f").unwrap().skipped, 1);
        let garbage = head.clone() + "{\"at_s\":1.0}\nnot json\n";
        let err = read_from(garbage.as_bytes(), "g").unwrap_err().to_string();
        assert!(err.contains("line 2"), "{err}");
        let err = read_from("{}\n".as_bytes(), "h").unwrap_err().to_string();
        assert!(err.contains("line 1"), "{err}");
        let mut old = header();
        old.version = 99;
        let text = serde_json::to_string(&old).unwrap() + "\n";
        let err = read_from(text.as_bytes(), "v").unwrap_err().to_string();
        assert!(err.contains("version 99"), "{err}");
    }
}
