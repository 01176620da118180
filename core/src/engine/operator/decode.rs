//! Bins from another process, decoded off the worker as soon as their last chunk arrives.
//!
//! A bin moving at `t` cannot be installed before its receiver applies `t`, which waits for
//! every bin of the step. Decoding each at that moment, on the worker, put the decoding of a
//! whole step (128 MB of hash maps for half a 16M-key count, most of it spent faulting in
//! the maps' fresh memory) after the receipt of its last byte, and stalled the worker for
//! all of it. Decoded on arrival, on a decoder thread, decoding overlaps receipt, the
//! chunks' memory is given back as soon as each bin is read, and the worker goes on with
//! records of earlier times and with its own moves meanwhile.
//!
//! A worker that needs a bin whose decoding has not started decodes it itself (so that a
//! step's install uses the worker and the decoder at once); one whose decoding runs waits
//! for it. (A worker that also decoded queued bins while it waited for the rest of a step
//! made a move no faster: on this project's machine both threads spend the step faulting in
//! fresh memory.)
//! Dropping a [`Decoding`] (a failure clears what was arriving) cancels it if it has not
//! started.

use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::Bin;
use super::transfer::decode;

/// A bin being decoded.
pub(crate) struct Decoding<S> {
    slot: Arc<Slot<S>>,
}

struct Slot<S> {
    stage: Mutex<Stage<S>>,
    done: Condvar,
}

enum Stage<S> {
    /// Waiting for the decoder: the bin's chunks, in order.
    Queued(Vec<Vec<u8>>),
    Running,
    Done(Result<Bin<S>, String>),
    /// Taken by its receiver, or cancelled.
    Gone,
}

type Job = Box<dyn FnOnce() + Send>;

/// The process's decoder thread, started with the first bin it is given. One thread: on a
/// machine of few cores the workers need the rest, and a worker that needs a bin not yet
/// started decodes it itself.
fn decoder() -> Option<&'static Mutex<Sender<Job>>> {
    static DECODER: OnceLock<Option<Mutex<Sender<Job>>>> = OnceLock::new();
    DECODER
        .get_or_init(|| {
            let (send, jobs) = channel::<Job>();
            let started = std::thread::Builder::new()
                .name("megaflux-decode".to_string())
                .spawn(move || {
                    for job in jobs {
                        job();
                    }
                });
            // Without a thread of its own (the system refused one), each worker decodes
            // what it receives when it installs it.
            started.ok().map(|_| Mutex::new(send))
        })
        .as_ref()
}

impl<S: Serialize + DeserializeOwned + Send + 'static> Decoding<S> {
    /// Starts decoding a bin from its chunks, in order.
    pub(crate) fn start(chunks: Vec<Vec<u8>>) -> Self {
        let slot = Arc::new(Slot {
            stage: Mutex::new(Stage::Queued(chunks)),
            done: Condvar::new(),
        });
        if let Some(decoder) = decoder() {
            let queued = Arc::clone(&slot);
            // A decoder that stopped leaves the bin queued: its worker decodes it.
            let _ = lock(decoder).send(Box::new(move || queued.run()));
        }
        Decoding { slot }
    }

    /// The decoded bin, or why its bytes are not one: decodes it here if the decoder has
    /// not started it, waits if it has. Once only: a second call is an error.
    pub(crate) fn take(&self) -> Result<Bin<S>, String> {
        let mut stage = lock(&self.slot.stage);
        loop {
            match std::mem::replace(&mut *stage, Stage::Gone) {
                Stage::Queued(chunks) => {
                    drop(stage);
                    return decoded(chunks);
                }
                Stage::Running => {
                    *stage = Stage::Running;
                    stage = self
                        .slot
                        .done
                        .wait(stage)
                        .unwrap_or_else(|poisoned| poisoned.into_inner());
                }
                Stage::Done(bin) => return bin,
                Stage::Gone => return Err("the bin was taken already".to_string()),
            }
        }
    }
}

impl<S: Serialize + DeserializeOwned> Slot<S> {
    /// The decoder's part: decodes the bin unless its worker took it first.
    fn run(&self) {
        let chunks = {
            let mut stage = lock(&self.stage);
            match std::mem::replace(&mut *stage, Stage::Running) {
                Stage::Queued(chunks) => chunks,
                other => {
                    *stage = other;
                    return;
                }
            }
        };
        // A state type whose Deserialize panics must not take the decoder with it (every
        // bin queued after would wait for ever): its receiver reports it as corrupt.
        let bin = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| decoded(chunks)))
            .unwrap_or_else(|_| Err("decoding it panicked".to_string()));
        *lock(&self.stage) = Stage::Done(bin);
        self.done.notify_all();
    }
}

impl<S> Drop for Decoding<S> {
    fn drop(&mut self) {
        let mut stage = lock(&self.slot.stage);
        if matches!(*stage, Stage::Queued(_)) {
            *stage = Stage::Gone;
        }
    }
}

fn decoded<S: Serialize + DeserializeOwned>(chunks: Vec<Vec<u8>>) -> Result<Bin<S>, String> {
    decode(chunks).map_err(|e| e.to_string())
}

/// A thread that panicked while holding the lock left a whole stage (every change is one
/// assignment).
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operator::transfer::encode;

    fn chunks_of(bin: &Bin<Vec<u64>>) -> Vec<Vec<u8>> {
        let mut chunks = Vec::new();
        encode(bin, 64, |_, _, bytes| chunks.push(bytes));
        chunks
    }

    #[test]
    fn a_bin_decodes_once_whoever_gets_to_it_first() {
        let bin = Bin::new((0..100u64).collect::<Vec<_>>());
        for _ in 0..50 {
            let decoding = Decoding::<Vec<u64>>::start(chunks_of(&bin));
            let taken = decoding.take().map(|b| b.state);
            assert_eq!(taken.as_ref(), Ok(&bin.state));
            assert!(decoding.take().is_err());
        }
    }

    #[test]
    fn corrupt_bytes_are_an_error_for_the_receiver() {
        let mut chunks = chunks_of(&Bin::new((0..100u64).collect::<Vec<_>>()));
        chunks.pop();
        let decoding = Decoding::<Vec<u64>>::start(chunks);
        assert!(decoding.take().is_err());
    }
}
