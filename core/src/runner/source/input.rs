//! `--input`: a file, standard input, a TCP socket or a Kafka topic, what a file or a topic
//! held when it was read (so that a re-run can check it reads the same records), and errors
//! that name the input and line.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::kafka::{End, KafkaInput, Partition};
use crate::error::ConfigError;

/// How long connecting to a `tcp:` input may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Read buffer of an input.
const READ_BUFFER: usize = 1 << 16;

/// Where a job reads its records: `--input` as given, and, for a file read by a recorded run,
/// its size and hash (trace headers carry them; a re-run checks the file against them).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Input {
    /// `-` for standard input, `tcp:HOST:PORT` for a socket, or a file's path (absolute once
    /// [`Input::resolve`] ran).
    pub from: String,
    /// What the file held when it was read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<FileId>,
    /// A topic's partitions and the offsets read from each ([`Input::resolve`] fixes them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partitions: Option<Vec<Partition>>,
}

/// What a run read, for its summary: the kind of input, as given, and a topic's partitions
/// with the offsets read from each.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputSummary {
    /// `file`, `stdin`, `tcp`, `stream` (a named pipe or a device) or `kafka`.
    pub kind: String,
    /// The input as given.
    pub from: String,
    /// A topic's partitions: `{id, from, to}` each (`to` is absent for a stream).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub partitions: Vec<Partition>,
}

/// A file's size and content hash (XXH3, 64 bits, as 16 hex digits).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileId {
    /// Its size in bytes.
    pub bytes: u64,
    /// XXH3-64 of its whole content.
    pub xxh3: String,
}

/// Where an [`Input`] is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Location {
    /// A regular file (or a path that does not exist here: another process's file).
    File(PathBuf),
    /// A path to something that is not a regular file: a named pipe, a device. It is read
    /// as a stream (records due as they arrive), never twice.
    Stream(PathBuf),
    /// This process's standard input.
    Stdin,
    /// A TCP server to connect to, which sends records as lines.
    Tcp(String),
    /// A Kafka topic, each message's value a line.
    Kafka(KafkaInput),
}

/// An input that cannot be read, or a record in it that cannot be parsed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{input}{}: {reason}", line.map(|l| format!(" line {l}")).unwrap_or_default())]
pub struct InputError {
    /// The input, as the user named it.
    pub input: String,
    /// The line (1-based) of the record, for a record that cannot be parsed.
    pub line: Option<u64>,
    /// What is wrong.
    pub reason: String,
}

impl InputError {
    pub(crate) fn at(input: &str, line: u64, reason: impl Into<String>) -> Self {
        InputError {
            input: input.to_string(),
            line: Some(line),
            reason: reason.into(),
        }
    }

    pub(crate) fn of(input: &str, reason: impl Into<String>) -> Self {
        InputError {
            input: input.to_string(),
            line: None,
            reason: reason.into(),
        }
    }
}

impl FromStr for Input {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, ConfigError> {
        if s.trim().is_empty() {
            return Err(ConfigError::Invalid(
                "--input is empty: give a file, - for standard input, or tcp:HOST:PORT".into(),
            ));
        }
        KafkaInput::parse(s).map_err(|e| ConfigError::Invalid(format!("--input {s}: {e}")))?;
        if let Some(addr) = s.strip_prefix("tcp:")
            && !addr
                .rsplit_once(':')
                .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok())
        {
            return Err(ConfigError::Invalid(format!(
                "--input {s}: expected tcp:HOST:PORT, e.g. tcp:127.0.0.1:9000"
            )));
        }
        Ok(Input {
            from: s.to_string(),
            file: None,
            partitions: None,
        })
    }
}

impl Input {
    /// Where it is.
    pub fn location(&self) -> Location {
        if let Ok(Some(kafka)) = KafkaInput::parse(&self.from) {
            return Location::Kafka(kafka);
        }
        match self.from.as_str() {
            "-" => Location::Stdin,
            other => match other.strip_prefix("tcp:") {
                Some(addr) => Location::Tcp(addr.to_string()),
                None => {
                    let path = PathBuf::from(other);
                    match std::fs::metadata(&path) {
                        Ok(m) if !m.is_file() && !m.is_dir() => Location::Stream(path),
                        _ => Location::File(path),
                    }
                }
            },
        }
    }

    /// Whether a re-run can read the same records again: a file can, and a topic read up to
    /// an end (`?end=`); a stream cannot.
    pub fn rereadable(&self) -> bool {
        match self.location() {
            Location::File(_) => true,
            Location::Kafka(k) => k.end != End::Never,
            _ => false,
        }
    }

    /// What the summary says of it.
    pub fn summary(&self) -> InputSummary {
        let kind = match self.location() {
            Location::File(_) => "file",
            Location::Stream(_) => "stream",
            Location::Stdin => "stdin",
            Location::Tcp(_) => "tcp",
            Location::Kafka(_) => "kafka",
        };
        InputSummary {
            kind: kind.to_string(),
            from: self.from.clone(),
            partitions: self.partitions.clone().unwrap_or_default(),
        }
    }

    /// The input as messages name it.
    pub fn name(&self) -> String {
        match self.location() {
            Location::Stdin => "standard input".to_string(),
            _ => self.from.clone(),
        }
    }

    /// Makes a file's path absolute (a re-run may start elsewhere) and checks that it is a
    /// file this process can open (a named pipe is not opened here: that would wait for
    /// its writer).
    pub fn resolve(&mut self) -> Result<(), ConfigError> {
        if let Location::Kafka(kafka) = self.location() {
            // A re-run's partitions are the recorded ones.
            if self.partitions.is_none() {
                let partitions = kafka
                    .resolve()
                    .map_err(|e| ConfigError::Invalid(format!("--input {}: {e}", self.from)))?;
                self.partitions = Some(partitions);
            }
            return Ok(());
        }
        let (Location::File(path) | Location::Stream(path)) = self.location() else {
            return Ok(());
        };
        let bad = |why: String| ConfigError::Invalid(format!("--input {}: {why}", path.display()));
        let absolute = std::fs::canonicalize(&path).map_err(|e| bad(e.to_string()))?;
        if absolute.is_dir() {
            return Err(bad("is a directory, not a file".into()));
        }
        if absolute.is_file() {
            File::open(&absolute).map_err(|e| bad(e.to_string()))?;
        }
        self.from = absolute.display().to_string();
        Ok(())
    }

    /// Where the file it names is gone, takes the file of the same name in `dir` instead (a
    /// trace's input kept beside it, moved with it): whether it did. The file it takes is
    /// still checked against the recorded size and hash ([`Input::check_unchanged`]).
    pub fn look_beside(&mut self, dir: &Path) -> bool {
        let Location::File(path) = self.location() else {
            return false;
        };
        let Some(name) = path.file_name() else {
            return false;
        };
        let beside = dir.join(name);
        if path.exists() || !beside.is_file() {
            return false;
        }
        match std::fs::canonicalize(&beside) {
            Ok(absolute) => {
                self.from = absolute.display().to_string();
                true
            }
            Err(_) => false,
        }
    }

    /// Notes the file's size and hash (reading it once).
    pub fn identify(&mut self) -> Result<(), InputError> {
        if let Location::File(path) = self.location() {
            self.file = Some(identify(&path).map_err(|e| InputError::of(&self.from, e.to_string()))?);
        }
        Ok(())
    }

    /// Checks that the file holds what it held when it was identified: same size, same hash.
    pub fn check_unchanged(&self) -> Result<(), InputError> {
        if let (Location::Kafka(kafka), Some(partitions)) = (self.location(), &self.partitions) {
            return kafka
                .check_held(partitions)
                .map_err(|e| InputError::of(&self.from, e));
        }
        let (Location::File(path), Some(was)) = (self.location(), &self.file) else {
            return Ok(());
        };
        let now = identify(&path).map_err(|e| InputError::of(&self.from, e.to_string()))?;
        if &now != was {
            return Err(InputError::of(
                &self.from,
                format!(
                    "is not the file the trace read: it had {} bytes with hash {}, it has {} bytes with hash {}",
                    was.bytes, was.xxh3, now.bytes, now.xxh3
                ),
            ));
        }
        Ok(())
    }

    /// Opens it for reading (connects, for a socket).
    pub(crate) fn open(&self) -> Result<Box<dyn BufRead + Send>, InputError> {
        let failed = |e: std::io::Error| InputError::of(&self.name(), e.to_string());
        Ok(match self.location() {
            Location::File(path) | Location::Stream(path) => Box::new(BufReader::with_capacity(
                READ_BUFFER,
                File::open(path).map_err(failed)?,
            )),
            Location::Stdin => Box::new(BufReader::with_capacity(READ_BUFFER, std::io::stdin())),
            Location::Kafka(kafka) => {
                let partitions = match &self.partitions {
                    Some(p) => p.clone(),
                    None => kafka.resolve().map_err(|e| InputError::of(&self.from, e))?,
                };
                Box::new(
                    kafka
                        .open(&partitions)
                        .map_err(|e| InputError::of(&self.from, e))?,
                )
            }
            Location::Tcp(addr) => {
                let mut last = None;
                let addrs = addr.to_socket_addrs().map_err(failed)?;
                let mut stream = None;
                for a in addrs {
                    match TcpStream::connect_timeout(&a, CONNECT_TIMEOUT) {
                        Ok(s) => {
                            stream = Some(s);
                            break;
                        }
                        Err(e) => last = Some(e),
                    }
                }
                let stream = stream.ok_or_else(|| {
                    InputError::of(
                        &self.name(),
                        last.map_or("the address resolves to nothing".to_string(), |e| e.to_string()),
                    )
                })?;
                Box::new(BufReader::with_capacity(READ_BUFFER, stream))
            }
        })
    }
}

/// A file's size and XXH3-64.
fn identify(path: &Path) -> std::io::Result<FileId> {
    let mut file = File::open(path)?;
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    let mut buffer = vec![0u8; 1 << 20];
    let mut bytes = 0u64;
    loop {
        let n = file.read(&mut buffer)?;
        if n == 0 {
            break;
        }
        hasher.update(&buffer[..n]);
        bytes += n as u64;
    }
    Ok(FileId {
        bytes,
        xxh3: format!("{:016x}", hasher.digest()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_parse_by_their_form() {
        let at = |s: &str| s.parse::<Input>().map(|i| i.location());
        assert_eq!(at("-"), Ok(Location::Stdin));
        assert_eq!(
            at("tcp:localhost:9000"),
            Ok(Location::Tcp("localhost:9000".into()))
        );
        assert_eq!(at("views.csv"), Ok(Location::File("views.csv".into())));
        for bad in ["", "tcp:9000", "tcp::1", "tcp:host:port"] {
            assert!(bad.parse::<Input>().is_err(), "{bad}");
        }
    }

    #[test]
    fn a_changed_file_is_noticed() {
        let dir = std::env::temp_dir().join(format!("megaflux-input-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("views.csv");
        std::fs::write(&path, "u1,home,1\n").unwrap();
        let mut input: Input = path.display().to_string().parse().unwrap();
        input.resolve().unwrap();
        input.identify().unwrap();
        assert_eq!(input.file.as_ref().unwrap().bytes, 10);
        assert!(input.check_unchanged().is_ok());
        std::fs::write(&path, "u1,home,2\n").unwrap();
        let e = input.check_unchanged().unwrap_err().to_string();
        assert!(e.contains("is not the file the trace read"), "{e}");
        let mut missing: Input = dir.join("nope.csv").display().to_string().parse().unwrap();
        assert!(missing.resolve().unwrap_err().to_string().contains("nope.csv"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
