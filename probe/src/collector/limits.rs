//! What a connection may cost the collector: every bound on memory, time and rate that a
//! client meets, named here so that none is a literal somewhere else.

use std::time::Duration;

/// Most events in one frame to a subscriber or from an exporter (a few hundred kB).
pub const FRAME_EVENTS: usize = 2048;
/// Most bytes in one frame of events to a subscriber: well under the wire's limit, so
/// that no mix of events (a command's request is up to [`Limits::command_bytes`]) makes a
/// frame that cannot be sent.
pub const FRAME_BYTES: usize = 1 << 20;
/// Bytes of frames queued for one subscriber before it starts losing events. Frames are
/// encoded once and shared, so all subscribers together hold about this much more than
/// the fastest of them.
pub const SUBSCRIBER_BYTES: usize = 8 << 20;
/// Largest frame a welcomed exporter may send: its process sends at most [`FRAME_EVENTS`]
/// events a frame, a few hundred kB.
pub const EXPORTER_FRAME_BYTES: usize = 4 << 20;
/// Bytes of exporters' frames read and not yet taken in by the collector's loop, all
/// exporters together: an exporter past it waits (and its connection is not read).
pub const INBOX_BYTES: usize = 32 << 20;
/// Bytes a subscriber may always have queued, whatever the others hold: a viewer that keeps
/// up stays under it and never loses events to viewers that do not.
pub const FAIR_BYTES: usize = 1 << 20;
/// Bytes all subscribers together may have queued past their [`FAIR_BYTES`] (counted for
/// each subscriber, shared frames as often as they are queued): many stalled viewers cost
/// the job this much, not [`SUBSCRIBER_BYTES`] each.
pub const SUBSCRIBERS_BYTES: usize = 32 << 20;
/// Longest refusal reason sent or kept, in characters: a reason can quote what the client
/// sent, and a client can send a lot.
pub const REASON_CHARS: usize = 160;

/// The bounds a collector holds its clients to.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Largest frame before the hello is accepted (a hello is well under a kilobyte).
    pub hello_bytes: usize,
    /// How long a new connection may take to say hello and read the answer.
    pub hello_timeout: Duration,
    /// Connections that have not been welcomed yet; more are closed at once.
    pub pending: usize,
    /// Subscribers at once.
    pub subscribers: usize,
    /// Largest frame a subscriber may send (one command).
    pub command_bytes: usize,
    /// Commands a subscriber may send in a burst, and per second after it.
    pub commands_burst: u32,
    /// Commands a subscriber may send per second once its burst is spent.
    pub commands_per_s: u32,
    /// How long a subscriber may leave a frame unread before it is closed.
    pub send_timeout: Duration,
    /// Refusal reasons kept for the report (the rest are counted).
    pub reasons_kept: usize,
    /// How long a welcomed exporter may send nothing before it is taken for gone (a live
    /// process sends its workers' statistics several times a second).
    pub exporter_quiet: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            hello_bytes: 4 << 10,
            hello_timeout: Duration::from_secs(5),
            pending: 32,
            subscribers: 64,
            command_bytes: 64 << 10,
            commands_burst: 32,
            commands_per_s: 16,
            send_timeout: Duration::from_secs(30),
            reasons_kept: 32,
            exporter_quiet: Duration::from_secs(60),
        }
    }
}

/// `reason` cut to [`REASON_CHARS`] characters (marked when cut).
pub fn short(reason: &str) -> String {
    match reason.char_indices().nth(REASON_CHARS) {
        None => reason.to_string(),
        Some((end, _)) => format!("{}… ({} bytes)", &reason[..end], reason.len()),
    }
}

pub use megaflux::rate::Rate;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_cut_on_a_character_boundary() {
        assert_eq!(short("fine"), "fine");
        let long = "é".repeat(10_000);
        let cut = short(&long);
        assert!(cut.starts_with(&"é".repeat(REASON_CHARS)));
        assert!(cut.ends_with("(20000 bytes)"), "{cut}");
        assert!(cut.chars().count() < REASON_CHARS + 20);
    }
}
