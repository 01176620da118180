//! Errors of the probe.

use std::io;

/// What can go wrong observing a job.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },
    #[error("{0}")]
    Protocol(String),
    #[error("trace {path}, line {line}: {reason}")]
    Trace {
        path: String,
        line: usize,
        reason: String,
    },
    #[error("{0}")]
    Config(String),
}

impl ProbeError {
    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Self {
        ProbeError::Io {
            context: context.into(),
            source,
        }
    }
}
