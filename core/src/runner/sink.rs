//! `--output FILE`: every output of the job as one line of JSON (the record as serde
//! serializes it), written by worker 0 of the first process, which every output is sent to:
//! the outputs of each logical time together, in time order, once all of them arrived.
//!
//! The stateful operators emit each output exactly once, whatever the migrations and
//! failovers, so the file holds each exactly once too. Lines are written whole: the file
//! only ever receives complete lines (a buffer of them, cut at a line's end), and a write
//! that fails is undone to the last complete line before the job stops, so neither a crash
//! nor a full disk leaves half a line. The buffer goes to the file at least every
//! [`FLUSH_EVERY`] (worker 0 looks on every turn of its loop, outputs or not).

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Serialize;

/// The sink writes what it holds at least this often.
pub const FLUSH_EVERY: Duration = Duration::from_millis(200);
/// What it holds before it writes, at most (a longer line is written alone).
const BUFFER_BYTES: usize = 1 << 20;

/// The output file of a run.
#[derive(Debug)]
pub(crate) struct Sink {
    path: PathBuf,
    file: File,
    /// Whole lines not yet written.
    buffer: Vec<u8>,
    /// The file's length: every byte before it is a written, whole line.
    written: u64,
    last_flush: Instant,
    lines: u64,
    /// Why writing stopped, once it did.
    failed: Option<String>,
}

impl Sink {
    /// Creates the file at `path`; one that exists is kept unless `replace`.
    pub(crate) fn create(path: &Path, replace: bool) -> Result<Sink, String> {
        let file = crate::files::create(path, replace).map_err(|e| {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                format!(
                    "--output {} exists: give another file, or --force to replace it",
                    path.display()
                )
            } else {
                format!("creating --output {}: {e}", path.display())
            }
        })?;
        Ok(Sink {
            path: path.to_path_buf(),
            file,
            buffer: Vec::with_capacity(BUFFER_BYTES),
            written: 0,
            last_flush: Instant::now(),
            lines: 0,
            failed: None,
        })
    }

    /// Writes `outputs`, one line each, unless writing already failed.
    pub(crate) fn write<'a, O: Serialize + 'a>(&mut self, outputs: impl IntoIterator<Item = &'a O>) {
        if self.failed.is_some() {
            return;
        }
        for out in outputs {
            let line_start = self.buffer.len();
            if let Err(e) = serde_json::to_writer(&mut self.buffer, out) {
                self.buffer.truncate(line_start);
                self.failed = Some(format!("writing --output {}: {e}", self.path.display()));
                return;
            }
            self.buffer.push(b'\n');
            self.lines += 1;
            if self.buffer.len() >= BUFFER_BYTES {
                self.flush();
            }
        }
        self.tick();
    }

    /// Writes what it holds if [`FLUSH_EVERY`] has passed since it last did.
    pub(crate) fn tick(&mut self) {
        if self.last_flush.elapsed() >= FLUSH_EVERY {
            self.flush();
        }
    }

    /// Writes every whole line it holds; a write that fails is cut back to the last whole
    /// line in the file, and stops the sink.
    fn flush(&mut self) {
        self.last_flush = Instant::now();
        if self.failed.is_some() || self.buffer.is_empty() {
            return;
        }
        match self.file.write_all(&self.buffer) {
            Ok(()) => {
                self.written += self.buffer.len() as u64;
                self.buffer.clear();
            }
            Err(e) => {
                let undone = match self.file.set_len(self.written) {
                    Ok(()) => String::new(),
                    Err(t) => format!(" (and cutting it back to its last whole line failed: {t})"),
                };
                self.failed = Some(format!("writing --output {}: {e}{undone}", self.path.display()));
            }
        }
    }

    /// Why writing failed, if it did.
    pub(crate) fn failed(&self) -> Option<&str> {
        self.failed.as_deref()
    }

    /// Flushes everything to the disk; the number of lines written.
    pub(crate) fn finish(&mut self) -> Result<u64, String> {
        self.flush();
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let synced = self.file.sync_data();
        synced.map_err(|e| format!("writing --output {}: {e}", self.path.display()))?;
        Ok(self.lines)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outputs_are_lines_of_json_and_files_are_kept() {
        let dir = std::env::temp_dir().join(format!("megaflux-sink-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("out.jsonl");
        let _ = std::fs::remove_file(&path);
        let mut sink = Sink::create(&path, false).unwrap();
        sink.write(&[("u17".to_string(), 3u64), ("u2".to_string(), 1)]);
        assert_eq!(sink.finish(), Ok(2));
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "[\"u17\",3]\n[\"u2\",1]\n"
        );
        let e = Sink::create(&path, false).unwrap_err();
        assert!(e.contains("exists") && e.contains("--force"), "{e}");
        assert!(Sink::create(&path, true).is_ok());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn what_it_holds_reaches_the_file_in_time_without_new_outputs() {
        let dir = std::env::temp_dir().join(format!("megaflux-sink-tick-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("out.jsonl");
        let mut sink = Sink::create(&path, true).unwrap();
        sink.write(&[1u64, 2]);
        std::thread::sleep(FLUSH_EVERY);
        sink.tick();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "1\n2\n");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_write_that_fails_stops_the_sink_naming_the_file() {
        let mut sink = Sink::create(Path::new("/dev/full"), true).unwrap();
        sink.write(&[("u17".to_string(), 3u64)]);
        let e = sink.finish().unwrap_err();
        assert!(e.starts_with("writing --output /dev/full: "), "{e}");
        assert_eq!(sink.failed(), Some(e.as_str()));
        sink.write(&[("u2".to_string(), 1u64)]);
        assert_eq!(sink.finish().unwrap_err(), e, "nothing more is taken");
    }
}
