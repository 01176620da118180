//! `--output FILE`: every output as one line of JSON (the record as serde serializes it).
//!
//! Lines are written whole: each commit appends complete lines, and a write that fails is
//! undone to the last complete line before the job stops, so neither a crash nor a full disk
//! leaves half a line. A file is never resumed: an existing one is kept (the run refuses to
//! start) unless `--force` replaces it.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use super::{Batch, RunIdentity, Sink, SinkError};
use crate::Time;

/// The output file of a run.
#[derive(Debug)]
pub(crate) struct FileSink {
    path: PathBuf,
    file: File,
    /// The file's length: every byte before it is a written, whole line.
    written: u64,
    /// Every output before it is in the file.
    upto: Time,
}

impl FileSink {
    /// Creates the file at `path`; one that exists is kept unless `replace`.
    pub(crate) fn create(path: &Path, replace: bool) -> Result<FileSink, SinkError> {
        let failed = |reason: String| SinkError {
            sink: path.display().to_string(),
            reason,
        };
        let file = crate::files::create(path, replace).map_err(|e| {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                failed("exists: give another file, or --force to replace it".into())
            } else {
                failed(format!("creating it: {e}"))
            }
        })?;
        Ok(FileSink {
            path: path.to_path_buf(),
            file,
            written: 0,
            upto: 0,
        })
    }

    fn failed(&self, reason: String) -> SinkError {
        SinkError {
            sink: self.path.display().to_string(),
            reason,
        }
    }
}

impl Sink for FileSink {
    fn recover(&mut self, _run: &RunIdentity) -> Result<Time, SinkError> {
        Ok(0)
    }

    /// Appends the batch's lines; a write that fails is cut back to the last whole line.
    fn commit(&mut self, batch: Batch) -> Result<(), SinkError> {
        if let Err(e) = self.file.write_all(&batch.lines) {
            let undone = match self.file.set_len(self.written) {
                Ok(()) => String::new(),
                Err(t) => format!(" (and cutting it back to its last whole line failed: {t})"),
            };
            return Err(self.failed(format!("writing: {e}{undone}")));
        }
        self.written += batch.lines.len() as u64;
        self.upto = batch.upto;
        Ok(())
    }

    fn committed(&mut self) -> Result<Time, SinkError> {
        Ok(self.upto)
    }

    fn finish(&mut self) -> Result<Time, SinkError> {
        self.file
            .sync_data()
            .map_err(|e| self.failed(format!("writing: {e}")))?;
        Ok(self.upto)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{FLUSH_EVERY, Output, Writer};
    use super::*;

    fn identity() -> RunIdentity {
        RunIdentity {
            settings: serde_json::Map::new(),
            not_resumable: None,
        }
    }

    fn writer(path: &Path, replace: bool) -> Result<Writer, SinkError> {
        Writer::open(&Output::File(path.to_path_buf()), replace, &identity())
    }

    #[test]
    fn outputs_are_lines_of_json_and_files_are_kept() {
        let dir = std::env::temp_dir().join(format!("megaflux-sink-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("out.jsonl");
        let _ = std::fs::remove_file(&path);
        let mut sink = writer(&path, false).unwrap();
        sink.write(3, &[("u17".to_string(), 3u64), ("u2".to_string(), 1)]);
        let summary = sink.finish().unwrap();
        assert_eq!((summary.rows, summary.committed_time), (2, Time::MAX));
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "[\"u17\",3]\n[\"u2\",1]\n"
        );
        let e = writer(&path, false).unwrap_err().to_string();
        assert!(e.contains("exists") && e.contains("--force"), "{e}");
        assert!(writer(&path, true).is_ok());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn what_it_holds_reaches_the_file_in_time_without_new_outputs() {
        let dir = std::env::temp_dir().join(format!("megaflux-sink-tick-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("out.jsonl");
        let mut sink = writer(&path, true).unwrap();
        sink.write(1, &[1u64, 2]);
        std::thread::sleep(FLUSH_EVERY);
        sink.tick();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "1\n2\n");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_write_that_fails_stops_the_sink_naming_the_file() {
        let mut sink = writer(Path::new("/dev/full"), true).unwrap();
        sink.write(1, &[("u17".to_string(), 3u64)]);
        let e = sink.finish().unwrap_err();
        assert!(e.starts_with("--output /dev/full: writing: "), "{e}");
        assert_eq!(sink.failed(), Some(e.as_str()));
        sink.write(2, &[("u2".to_string(), 1u64)]);
        assert_eq!(sink.finish().unwrap_err(), e, "nothing more is taken");
    }
}
