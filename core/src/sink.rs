//! `--output FILE`: every output of the job as one line of JSON (the record as serde
//! serializes it), written by worker 0 of the first process, which every output is sent to:
//! the outputs of each logical time together, in time order, once all of them arrived.
//!
//! The stateful operators emit each output exactly once, whatever the migrations and
//! failovers, so the file holds each exactly once too. Lines are written whole and flushed
//! at least every [`FLUSH_EVERY`], so a crash leaves complete lines; a write that fails
//! stops the job rather than lose outputs.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Serialize;

/// The sink flushes at least this often.
pub const FLUSH_EVERY: Duration = Duration::from_millis(200);
/// Its write buffer.
const BUFFER_BYTES: usize = 1 << 20;

/// The output file of a run.
#[derive(Debug)]
pub(crate) struct Sink {
    path: PathBuf,
    out: BufWriter<File>,
    last_flush: Instant,
    lines: u64,
    /// Why writing stopped, once it did.
    failed: Option<String>,
}

impl Sink {
    /// Creates the file at `path`; one that exists is kept unless `replace`.
    pub(crate) fn create(path: &Path, replace: bool) -> Result<Sink, String> {
        let mut options = OpenOptions::new();
        options.write(true);
        if replace {
            options.create(true).truncate(true);
        } else {
            options.create_new(true);
        }
        let file = options.open(path).map_err(|e| {
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
            out: BufWriter::with_capacity(BUFFER_BYTES, file),
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
            let line = serde_json::to_writer(&mut self.out, out)
                .map_err(|e| e.to_string())
                .and_then(|()| self.out.write_all(b"\n").map_err(|e| e.to_string()));
            if let Err(e) = line {
                self.failed = Some(format!("writing --output {}: {e}", self.path.display()));
                return;
            }
            self.lines += 1;
        }
        if self.last_flush.elapsed() >= FLUSH_EVERY {
            self.last_flush = Instant::now();
            if let Err(e) = self.out.flush() {
                self.failed = Some(format!("writing --output {}: {e}", self.path.display()));
            }
        }
    }

    /// Why writing failed, if it did.
    pub(crate) fn failed(&self) -> Option<&str> {
        self.failed.as_deref()
    }

    /// Flushes everything to the disk; the number of lines written.
    pub(crate) fn finish(&mut self) -> Result<u64, String> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let done = self.out.flush().and_then(|()| self.out.get_ref().sync_data());
        done.map_err(|e| format!("writing --output {}: {e}", self.path.display()))?;
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
}
