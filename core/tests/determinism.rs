//! The operators' determinism contract, checked in debug builds: logic that decides what to
//! emit by a hash map's iteration order makes the two replicas of a bin emit different
//! outputs, which would leak duplicates (or lose outputs) silently after a failure. The run
//! stops instead, naming the operator, the bin and the time.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use megaflux::control::ControlHandle;
use megaflux::epoch::EpochLen;
use megaflux::harness::Pace;
use megaflux::job::{Job, Operators};
use megaflux::source::Generator;
use megaflux::timely::dataflow::StreamVec;
use megaflux::{Bin, Bins, RunConfig, RunError, Source, Time, bins::hash_key, run_job};

mod common;

/// Keys by index, 64 of them.
struct Keys;

impl Generator<u64> for Keys {
    fn records(&self, _index: usize, _peers: usize) -> Box<dyn FnMut(u64, Time) -> u64> {
        Box::new(|i, _| i.wrapping_mul(0x9E37_79B9_7F4A_7C15) % 64)
    }
}

/// Per bin, the keys seen; what it emits at each time.
#[derive(Clone, Copy, Debug)]
enum Emit {
    /// The smallest even key.
    Ordered,
    /// The first key a `HashMap` (random order per replica) yields, if it is even: the
    /// replicas emit different numbers of outputs.
    SomeHashed,
    /// The first key a `HashMap` yields: one output on both replicas, not the same one.
    OneHashed,
}

struct FirstKey {
    emit: Emit,
}

impl Job for FirstKey {
    type In = u64;
    type Out = u64;

    fn name(&self) -> &str {
        "first-key"
    }

    fn source(&self, _run: &RunConfig) -> Source<u64> {
        Source::generated(Keys)
    }

    fn dataflow<'s>(&self, input: StreamVec<'s, Time, u64>, ops: &Operators<'s>) -> StreamVec<'s, Time, u64> {
        let emit = self.emit;
        ops.unary(
            input,
            "first-key",
            |k: &u64| hash_key(k),
            move |_t, bin: &mut Bin<Seen>, records: &mut Vec<u64>, out: &mut Vec<u64>| {
                for k in records.drain(..) {
                    bin.state.hashed.insert(k, ());
                    bin.state.sorted.insert(k, ());
                }
                let first = match emit {
                    Emit::Ordered => bin.state.sorted.keys().find(|k| *k % 2 == 0).copied(),
                    Emit::SomeHashed => bin.state.hashed.keys().next().copied().filter(|k| k % 2 == 0),
                    Emit::OneHashed => bin.state.hashed.keys().next().copied(),
                };
                out.extend(first);
            },
        )
    }
}

#[derive(Default, serde::Serialize, serde::Deserialize)]
struct Seen {
    hashed: HashMap<u64, ()>,
    sorted: BTreeMap<u64, ()>,
}

impl megaflux::size::StateSize for Seen {
    fn keys(&self) -> usize {
        self.sorted.len()
    }
    fn bytes(&self) -> usize {
        self.sorted.len() * 16
    }
}

fn run(emit: Emit) -> Result<(), RunError> {
    let config = RunConfig {
        workload: "first-key".into(),
        workers: 2,
        bins: Bins::new(16).unwrap(),
        rate: 20_000,
        duration: Duration::from_secs(1),
        epoch: EpochLen::MS,
        pace: Pace::Max,
        replicas: 2,
        ..RunConfig::default()
    };
    let what = format!("the {emit:?} run");
    common::in_time(&what, move || {
        run_job(Arc::new(FirstKey { emit }), config, ControlHandle::new()).map(|_| ())
    })
}

#[test]
fn replicas_that_diverge_stop_the_run_naming_the_bin() {
    for emit in [Emit::SomeHashed, Emit::OneHashed] {
        match run(emit) {
            Err(RunError::Worker(message)) => {
                assert!(
                    message.contains("first-key: the replicas of bin")
                        && message.contains("diverged at time"),
                    "{message}"
                );
            }
            other => panic!("the run went on with diverging replicas: {other:?}"),
        }
    }
    // The same logic over an ordered map keeps its replicas together.
    run(Emit::Ordered).expect("deterministic logic runs");
}
