//! Errors of the probe.

use std::io;

/// What can go wrong observing a job.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// The cause is in the message, not in the source chain, so that reports of the chain
    /// do not say it twice.
    #[error("{context}: {cause}")]
    Io { context: String, cause: io::Error },
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
            cause: source,
        }
    }
}
