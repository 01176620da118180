//! Bins handed between workers of one process as they are, without encoding.
//!
//! Workers of one process share memory, so a bin moving to another worker of the same
//! process need not be encoded, cut into chunks and decoded entry by entry (two passes over
//! its state, and a rebuilt hash table, on the two workers the move stalls): F puts the
//! bin itself in its operator's [`Mailbox`] and sends a token in place of the chunks, a
//! [`StateChunk`] whose `total` is [`HANDED`]. S takes the bin out when the token arrives
//! and installs it at its move time as it would a decoded one.
//!
//! The token keeps every guarantee of the chunks it replaces: it travels on the state
//! stream at the move's time, so S's state-transfer frontier passes that time only once it
//! arrived, and F put the bin in the mailbox before it sent the token. Hence a mailbox holds
//! the bin of `(time, bin, receiver)` exactly from the token's sending until its receipt.
//!
//! Bins going to another process, copies (a bin sent to two holders at once) and bins of a
//! job that keeps shipped copies for a restart travel encoded, as before.

use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use super::Bin;
use super::transfer::StateChunk;
use crate::Time;

/// `StateChunk::total` of a token: the bin itself waits in the operator's mailbox.
pub const HANDED: u32 = 0;

/// Every mailbox of one process's workers in one computation, by operator.
///
/// One per process, shared by all its workers (an `Arc` the worker closure captures): a
/// worker given a `Handoffs` of its own could not find the bins other workers hand it.
pub struct Handoffs {
    per_process: usize,
    boxes: Mutex<HashMap<Vec<usize>, Arc<dyn Any + Send + Sync>>>,
}

impl std::fmt::Debug for Handoffs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handoffs")
            .field("per_process", &self.per_process)
            .field("operators", &lock(&self.boxes).len())
            .finish()
    }
}

impl Handoffs {
    /// Mailboxes for a process of `per_process` workers (timely numbers the workers of
    /// process `p` from `p * per_process`).
    pub fn new(per_process: usize) -> Self {
        Handoffs {
            per_process: per_process.max(1),
            boxes: Mutex::default(),
        }
    }

    /// The mailbox of the operator at `address` (its dataflow address: the same on every
    /// worker, since every worker builds the same dataflows).
    pub(crate) fn mailbox<S: Send + 'static>(&self, address: &[usize]) -> Arc<Mailbox<S>> {
        let mut boxes = lock(&self.boxes);
        let shared = boxes
            .entry(address.to_vec())
            .or_insert_with(|| {
                Arc::new(Mailbox::<S> {
                    per_process: self.per_process,
                    bins: Mutex::default(),
                })
            })
            .clone();
        match shared.downcast::<Mailbox<S>>() {
            Ok(mailbox) => mailbox,
            Err(_) => panic!("two operators at dataflow address {address:?} keep different state types"),
        }
    }
}

/// Bins handed to workers of this process by one operator, by move time, bin and receiver.
pub(crate) struct Mailbox<S> {
    per_process: usize,
    bins: Mutex<HashMap<(Time, u32, u32), Bin<S>>>,
}

impl<S> Mailbox<S> {
    /// Whether workers `a` and `b` run in the same process.
    pub(crate) fn same_process(&self, a: u32, b: u32) -> bool {
        a as usize / self.per_process == b as usize / self.per_process
    }

    /// Leaves `bin` for worker `to`, which installs it at `time`; returns the token to send
    /// it in place of the bin's chunks.
    pub(crate) fn hand(&self, time: Time, index: u32, to: u32, mut bin: Bin<S>) -> StateChunk {
        // Times scheduled during one call of the logic are registered right after it.
        bin.fresh.clear();
        lock(&self.bins).insert((time, index, to), bin);
        StateChunk {
            dest: to,
            bin: index,
            seq: 0,
            total: HANDED,
            bytes: Vec::new(),
        }
    }

    /// The bin a token for worker `me` at `time` stands for.
    pub(crate) fn take(&self, time: Time, index: u32, me: u32) -> Option<Bin<S>> {
        lock(&self.bins).remove(&(time, index, me))
    }
}

/// A worker that panicked while holding the lock left the map whole (every operation on it
/// is one insert or remove), so the others go on with it.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bin_waits_for_its_receiver_only() {
        let handoffs = Handoffs::new(2);
        let mailbox = handoffs.mailbox::<Vec<u64>>(&[0, 3]);
        let token = mailbox.hand(7, 5, 1, Bin::new(vec![1, 2, 3]));
        assert_eq!((token.dest, token.bin, token.total), (1, 5, HANDED));
        // The same operator's mailbox on another worker is the same one.
        let other = handoffs.mailbox::<Vec<u64>>(&[0, 3]);
        assert!(other.take(7, 5, 0).is_none() && other.take(6, 5, 1).is_none());
        assert_eq!(other.take(7, 5, 1).map(|b| b.state), Some(vec![1, 2, 3]));
        assert!(mailbox.take(7, 5, 1).is_none());
        // Another operator's is not.
        handoffs
            .mailbox::<Vec<u64>>(&[0, 3])
            .hand(7, 5, 1, Bin::new(vec![4]));
        assert!(handoffs.mailbox::<Vec<u64>>(&[0, 4]).take(7, 5, 1).is_none());
    }

    #[test]
    fn processes_are_runs_of_workers() {
        let mailbox = Handoffs::new(2).mailbox::<()>(&[1]);
        assert!(mailbox.same_process(0, 1) && mailbox.same_process(2, 3));
        assert!(!mailbox.same_process(1, 2) && !mailbox.same_process(0, 3));
    }
}
