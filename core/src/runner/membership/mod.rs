//! Which processes of a cluster are alive, watched beside timely rather than by it.
//!
//! Timely notices a peer only when a connection to it fails; a process that hangs (stopped,
//! swapping, wedged in a system call) keeps its connections open and every peer waits for it
//! for ever. So each cluster process also holds one connection to process 0's *coordinator*
//! ([`Coordinator`], at [`coordinator_address`]), on which both ends send a
//! [`wire::Frame::Beat`] every [`HEARTBEAT`].
//!
//! The invariant: while a run goes on, each member hears of process 0, and process 0 of each
//! member, within [`SILENCE_LIMIT`], or raises [`Event::Lost`] for it (at once when the
//! connection drops). A process that ends its run normally says [`wire::Frame::Bye`] first,
//! so that its connection closing is not taken for a loss. Process 0 also hears here of
//! workers of other processes that failed without the driver knowing ([`Event::Failed`]):
//! failure detection is cluster-wide, not only process 0's.
//!
//! Every connection starts with proofs of the cluster's secret, both ways ([`secret`],
//! [`proofs`]); until a connection proved it, it costs its listener a bounded slot and
//! nothing it sends is acted on ([`strangers`]).

mod admit;
mod coordinator;
mod member;
pub mod proofs;
pub mod secret;
pub mod settings;
pub mod strangers;
pub mod wire;

use std::sync::Arc;
use std::time::Duration;

pub use coordinator::Coordinator;
pub use member::{Hello, Links, Member, NewlyFailed};
pub use secret::Secret;
pub use settings::Settings;

/// How often each end of a membership connection says it is alive.
pub const HEARTBEAT: Duration = Duration::from_millis(100);

/// How long a peer may stay silent before it counts as lost, unless `--peer-timeout` says
/// otherwise: fifty heartbeats. A crashed process's connections close and it is lost at
/// once; only a hung, stopped or cut-off process waits this long. One second was too
/// short for a debug build on a loaded two-core machine: a starved process was "lost" and
/// the cluster restarted without it.
pub const SILENCE_LIMIT: Duration = Duration::from_secs(5);

/// The coordinator listens on process 0's host at its timely port plus this, unless
/// `--coordinator-port` says otherwise. It cannot share timely's port: timely's listener
/// takes any connection that arrives while the cluster forms as one of its peers.
pub const COORDINATOR_PORT_OFFSET: u16 = 1000;

/// What membership tells the run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A process the run depends on is gone: its connection dropped, it fell silent, or it
    /// never came.
    Lost {
        /// Its index.
        process: usize,
        /// What was seen.
        cause: String,
    },
    /// A worker of another process failed without the driver knowing (process 0 only).
    Failed {
        /// The worker's index in the current computation (the last restart order's
        /// numbering); only its own process may report it.
        worker: u32,
    },
    /// The coordinator refused this process (another job's, or a process index taken).
    Refused {
        /// Why, as the coordinator said.
        reason: String,
    },
    /// The coordinator ordered a restart among the survivors of a crash (members only).
    Restart(Restart),
    /// A process started again for a lost one's place (`--join`) connected: the job
    /// restarts to take it in (process 0 only).
    Join {
        /// The place it takes, by index at the job's start.
        process: usize,
    },
}

/// A restart the coordinator orders after it lost a process: the survivors leave the broken
/// timely computation and start generation `generation` among themselves, from the
/// committed frontier.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Restart {
    /// The generation to start (the job's first computation is generation 0).
    pub generation: u32,
    /// The processes that take part, by their index at the job's start, in order: the new
    /// computation's process `i` is `survivors[i]`.
    pub survivors: Vec<usize>,
    /// Every output before it is written for good; the new computation starts there.
    pub committed: u64,
    /// The job's clock when process 0 gave the order (see [`wire::Frame::Restart`]).
    pub clock_ns: u64,
    /// The run's last measured epoch, if process 0 had fixed it (a stop, or the input's
    /// end): every process of the new computation ends there, however far its clock is.
    pub end: Option<u64>,
}

/// Where membership's news goes; called from membership's threads, once per loss.
pub type OnEvent = Arc<dyn Fn(Event) + Send + Sync>;

/// Why membership could not start.
#[derive(Debug, thiserror::Error)]
pub enum MembershipError {
    /// Process 0's entry in the host list names no port.
    #[error("process 0's address {0:?} has no port")]
    NoPort(String),
    /// The coordinator's port would be past 65535.
    #[error(
        "the coordinator's port (process 0's port {0} + {COORDINATOR_PORT_OFFSET}) is past 65535: give one with --coordinator-port"
    )]
    PortRange(u16),
    /// The coordinator cannot listen.
    #[error(
        "the coordinator cannot listen on {address}: {cause} (pick another port with --coordinator-port)"
    )]
    Listen {
        /// The address it tried.
        address: String,
        /// The system's reason.
        cause: String,
    },
    /// A thread could not start.
    #[error("starting the membership thread: {0}")]
    Thread(String),
}

/// The coordinator's address: process 0's host at `port`, or at its timely port plus
/// [`COORDINATOR_PORT_OFFSET`].
pub fn coordinator_address(addresses: &[String], port: Option<u16>) -> Result<String, MembershipError> {
    let first = addresses
        .first()
        .and_then(|a| a.split_whitespace().next())
        .unwrap_or_default();
    let (host, timely_port) = first
        .rsplit_once(':')
        .and_then(|(h, p)| Some((h, p.parse::<u16>().ok()?)))
        .ok_or_else(|| MembershipError::NoPort(first.to_string()))?;
    let port = match port {
        Some(p) => p,
        None => timely_port
            .checked_add(COORDINATOR_PORT_OFFSET)
            .ok_or(MembershipError::PortRange(timely_port))?,
    };
    Ok(format!("{host}:{port}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_coordinator_sits_beside_process_0() {
        let hosts = vec!["127.0.0.1:2101".to_string(), "127.0.0.1:2102".to_string()];
        assert_eq!(coordinator_address(&hosts, None).unwrap(), "127.0.0.1:3101");
        assert_eq!(coordinator_address(&hosts, Some(9000)).unwrap(), "127.0.0.1:9000");
        let high = vec!["h:65000".to_string()];
        assert!(
            coordinator_address(&high, None)
                .unwrap_err()
                .to_string()
                .contains("--coordinator-port")
        );
        assert!(coordinator_address(&["nowhere".to_string()], None).is_err());
    }
}
