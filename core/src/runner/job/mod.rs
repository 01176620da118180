//! Your own dataflow: a [`Job`] is a source of records and a dataflow over them, written once
//! against [`Operators`]; [`crate::harness::run_job`] runs it with everything the built-in
//! workloads have (the control plane and its plans, moves, failures and rejoins; replicas and
//! failover; open-loop latency; the probe's events; the summary and the output digest;
//! `--output`), and `megaflux_tui::main` gives a binary the whole `megaflux` command line
//! for it. The built-in workloads are jobs like any other ([`crate::workload::builtin`]).
//!
//! # The contract
//!
//! * **Deterministic logic.** An operator's logic must give the same outputs and leave the
//!   same state for the same state and records in the same order: no wall clock, no
//!   randomness that is not seeded, no iteration over a hash map into the outputs (a
//!   random hasher's order differs between replicas, and any map's order changes when a
//!   move or recovery copy rebuilds it). With `--replicas 2` two workers run it on the same
//!   records and either may be the one whose outputs leave; a re-run must give the recorded
//!   digest. The runner hands each (time, bin) its records in one order on every replica:
//!   by sending worker, or, in a job that restarts after a crash (whose restart numbers
//!   the workers afresh), by their encoding, the same before and after any restart.
//!   Debug builds stop a job whose replicas emit different outputs for a (time, bin) (their
//!   number or a hash of them; see [`crate::stateful_unary`]).
//! * **Serializable state.** A bin's state moves between processes encoded with bincode 1,
//!   as records and outputs do: it is `Serialize + DeserializeOwned + Default` (empty for a
//!   bin that holds nothing yet). [`crate::size::StateSize`] tells observers its keys and
//!   bytes (implemented for the standard collections, numbers, `String`, `Option`, `Box`
//!   and tuples; `impl StateSize for MyState {}` estimates one's own from its type).
//! * **Serde rules.** bincode is not self-describing: the state, the records and the
//!   outputs must not use untagged or internally tagged enums, `#[serde(flatten)]`,
//!   `skip_serializing_if`, `serde_json::Value` or anything else that needs
//!   `deserialize_any`. Within one process nothing is encoded, so such a type would only
//!   fail in a cluster: debug builds (and `--check-serde`) round-trip the first record,
//!   output and bin state of every operator and stop the job naming the operator and type.
//! * **Bins.** Each record has a 64-bit *bin key*, well mixed: use
//!   [`crate::bins::hash_key`] on the record's key. The bin count (`--bins`) is a power of
//!   two from 16 to 65536, many more than workers; a bin is the unit that moves.
//! * **Scheduled work** (window ends, timeouts) is asked for with [`crate::Bin::schedule`]
//!   and moves with its bin; logic is then called for the bin at that time even with no
//!   records.
//! * **Control.** Worker 0 sends every configuration change (the runner's control plane
//!   does); every migrateable operator of a job shares the one control stream, so a bin
//!   moves in all of them at the same logical time.
//! * **Records and outputs** cross workers: they are `ExchangeData` (serde) and `Clone`;
//!   outputs are also `Hash` (the digest) and are written by `--output` as serde serializes
//!   them to JSON.

pub mod params;
pub mod registry;

use std::hash::Hash;
use std::marker::PhantomData;
use std::sync::Arc;

use timely::ExchangeData;
use timely::dataflow::StreamVec;

pub use params::{Flag, ParamValues, Params};
pub use registry::{AnyJob, Jobs, Takes};

use crate::Time;
use crate::config::ControlInst;
use crate::harness::RunConfig;
pub use crate::harness::drain::Drain;
use crate::operator::{Bin, StatefulConfig, native_unary, sides, stateful_unary};
use crate::size::BinState;
use crate::source::Source;

/// A dataflow the runner can run: where its records come from and what it computes.
///
/// ```no_run
/// use megaflux::job::{Job, Operators};
/// use megaflux::source::Source;
/// use megaflux::{Bin, RunConfig, Time, bins::hash_key};
/// use megaflux::timely::dataflow::StreamVec;
/// use std::collections::BTreeMap;
///
/// /// Counts words read one per line.
/// struct Words;
///
/// impl Job for Words {
///     type In = String;
///     type Out = (String, u64);
///     fn name(&self) -> &str {
///         "words"
///     }
///     fn source(&self, _run: &RunConfig) -> Source<String> {
///         Source::lines(|line: &str| Ok::<_, String>(line.to_string()))
///     }
///     fn dataflow<'s>(
///         &self,
///         words: StreamVec<'s, Time, String>,
///         ops: &Operators<'s>,
///     ) -> StreamVec<'s, Time, (String, u64)> {
///         ops.unary(
///             words,
///             "count",
///             |w: &String| hash_key(w),
///             |_t, bin: &mut Bin<BTreeMap<String, u64>>, words, out| {
///                 for w in words.drain(..) {
///                     let n = bin.state.entry(w.clone()).or_insert(0);
///                     *n += 1;
///                     out.push((w, *n));
///                 }
///             },
///         )
///     }
/// }
/// ```
pub trait Job: Send + Sync + 'static {
    /// The records the source gives.
    type In: ExchangeData + Clone;
    /// The job's outputs: what `--output` writes, one JSON line each, and the digest hashes.
    type Out: ExchangeData + Clone + Hash;

    /// The job's name: `--workload` picks it, traces and summaries name it.
    fn name(&self) -> &str;

    /// Where its records come from in the run `run` describes (which may read the job's own
    /// flags, `--seed` and other settings).
    fn source(&self, run: &RunConfig) -> Source<Self::In>;

    /// Builds the dataflow from the source's records to the outputs, with the stateful
    /// operators `ops` makes (migrateable, or their plain-timely twins in a `--native` run)
    /// and any timely operators around them. Called once on every worker.
    fn dataflow<'s>(
        &self,
        input: StreamVec<'s, Time, Self::In>,
        ops: &Operators<'s>,
    ) -> StreamVec<'s, Time, Self::Out>;

    /// The job's own flags (`--gap-ms 500`): `megaflux run --help` lists them under the
    /// job's name, the trace header records their values, the processes of a cluster must
    /// agree on them, and `replay --rerun` restores them. Read a value with
    /// [`RunConfig::get`]. None by default.
    ///
    /// ```
    /// use megaflux::job::{Flag, Params};
    ///
    /// const GAP_MS: Flag<u64> = Flag::new("gap-ms", "200", "Pause that ends a session, in ms");
    /// let params = Params::new().with(&GAP_MS);
    /// # assert!(params.declares("gap-ms"));
    /// ```
    fn params(&self) -> Params {
        Params::new()
    }

    /// Why the values of the job's own flags in `run` do not go together, if they do not
    /// (each value alone is checked against its [`Flag`] before): the run is refused.
    fn validate(&self, run: &RunConfig) -> Result<(), String> {
        let _ = run;
        Ok(())
    }

    /// A few words on the state the run `run` will hold, for the line `megaflux run` prints
    /// as it starts (`1000000 keys`).
    fn describe(&self, run: &RunConfig) -> Option<String> {
        let _ = run;
        None
    }

    /// About how many bytes of state the run `run` will hold in all (one replica, all
    /// processes), if the job can tell before it starts: a run whose share cannot fit in
    /// this machine's memory is then refused before it fills it.
    fn state_bytes(&self, run: &RunConfig) -> Option<u64> {
        let _ = run;
        None
    }

    /// How long after the run's last epoch the work its operators scheduled for later times
    /// (open windows, timeouts) still matters: the end of a run lets it run that far, and
    /// counts and writes its outputs. [`Drain::All`] (the default) runs it until none is
    /// left; a job whose work re-arms itself (a periodic timer) or reaches far ahead says
    /// how far ([`Drain::For`]: a session window of 30 s drains 30 s), or [`Drain::Off`]
    /// (the generated workloads, whose scheduled work reaches minutes past the end).
    /// `--drain` overrides it, and `--duration` caps every run, the drain included: a drain
    /// cut short writes every output of the times before where it stopped, and the summary
    /// says what was left (`drain`). `run` is the run's settings (the job's own flags).
    fn drain(&self, run: &RunConfig) -> Drain {
        let _ = run;
        Drain::All
    }

    /// Whether the job may run with adaptive epochs (`--epochs adaptive`), which send a
    /// worker's due records in batches, each record at its batch's logical time: at or
    /// before its own, and in another order against other workers' records than its own time
    /// gives. Yes only if the outputs, their times aside, do not depend on that: per-key
    /// counts, maps, symmetric joins. No (the default) when the logic gives times a meaning:
    /// windows, timeouts, "the auction is known before its bids". A job that says no is
    /// refused `--epochs adaptive` before it starts, and `--epochs auto` (the CLI's
    /// default) runs it with fixed epochs.
    fn allows_adaptive_epochs(&self) -> bool {
        false
    }
}

/// Makes the stateful operators of a job's dataflow: migrateable ones driven by the run's
/// control stream, or, in a `--native` run, their plain-timely twins with the same logic.
///
/// The runner makes one per worker; a dataflow built outside the runner makes its own.
pub struct Operators<'s> {
    /// `None` in a native run.
    control: Option<StreamVec<'s, Time, ControlInst>>,
    config: StatefulConfig,
    run: Arc<RunConfig>,
}

impl<'s> Operators<'s> {
    /// Migrateable operators on `control`, the job's one control stream, with `config`.
    pub fn migrating(
        control: StreamVec<'s, Time, ControlInst>,
        config: StatefulConfig,
        run: Arc<RunConfig>,
    ) -> Self {
        Operators {
            control: Some(control),
            config,
            run,
        }
    }

    /// The plain-timely twins, with `config`'s initial placement for good.
    pub fn native(config: StatefulConfig, run: Arc<RunConfig>) -> Self {
        Operators {
            control: None,
            config,
            run,
        }
    }

    /// A stateful operator on one input (see [`crate::stateful_unary`]): `bin_key` gives
    /// each record's bin key; `logic` is called once per time and bin that has records or
    /// scheduled work, in time order, with that time's records of the bin (in one order on
    /// every replica), and pushes its outputs for that time. `name` names the operator in
    /// events and on the dashboard; give each operator of a job its own.
    pub fn unary<R, S, O, K, L>(
        &self,
        data: StreamVec<'s, Time, R>,
        name: &str,
        bin_key: K,
        logic: L,
    ) -> StreamVec<'s, Time, O>
    where
        R: ExchangeData + Clone,
        S: BinState,
        O: Clone + serde::Serialize + serde::de::DeserializeOwned + 'static,
        K: Fn(&R) -> u64 + 'static,
        L: FnMut(Time, &mut Bin<S>, &mut Vec<R>, &mut Vec<O>) + 'static,
    {
        match &self.control {
            Some(control) => stateful_unary(data, control.clone(), &self.config, name, bin_key, logic),
            None => native_unary(data, &self.config, name, bin_key, logic),
        }
    }

    /// A stateful operator on two inputs keyed into the same bins (a join): like
    /// [`Operators::unary`], with each input's records handed to `logic` separately.
    #[allow(clippy::too_many_arguments)]
    pub fn binary<R1, R2, S, O, K1, K2, L>(
        &self,
        left: StreamVec<'s, Time, R1>,
        right: StreamVec<'s, Time, R2>,
        name: &str,
        bin_key_left: K1,
        bin_key_right: K2,
        logic: L,
    ) -> StreamVec<'s, Time, O>
    where
        R1: ExchangeData + Clone,
        R2: ExchangeData + Clone,
        S: BinState,
        O: Clone + serde::Serialize + serde::de::DeserializeOwned + 'static,
        K1: Fn(&R1) -> u64 + 'static,
        K2: Fn(&R2) -> u64 + 'static,
        L: FnMut(Time, &mut Bin<S>, &mut Vec<R1>, &mut Vec<R2>, &mut Vec<O>) + 'static,
    {
        let (merged, key, logic) = sides(left, right, bin_key_left, bin_key_right, logic);
        self.unary(merged, name, key, logic)
    }

    /// The settings every stateful operator of the job shares (bins, the initial placement,
    /// replicas), for building operators with [`crate::stateful_unary`] directly.
    pub fn stateful(&self) -> &StatefulConfig {
        &self.config
    }

    /// The control stream of the run (for [`crate::stateful_unary`] directly; `None` in a
    /// native run): every migrateable operator of a job must take this one.
    pub fn control(&self) -> Option<StreamVec<'s, Time, ControlInst>> {
        self.control.clone()
    }

    /// Whether this is a `--native` run (no migration: [`Operators::unary`] makes the twins).
    pub fn is_native(&self) -> bool {
        self.control.is_none()
    }

    /// The run's settings.
    pub fn run(&self) -> &RunConfig {
        &self.run
    }
}

/// A job made of a name, a source and a closure that builds its dataflow: see [`from_fn`].
pub struct FnJob<I, O, F> {
    name: String,
    source: Source<I>,
    build: F,
    _types: PhantomData<fn() -> O>,
}

/// A [`Job`] from a closure: `build` builds the dataflow from the records `source` gives.
///
/// ```no_run
/// use megaflux::job::from_fn;
/// use megaflux::source::Source;
/// use megaflux::{Bin, bins::hash_key};
///
/// let words = from_fn("words", Source::lines(|l: &str| Ok::<_, String>(l.to_string())), |words, ops| {
///     ops.unary(words, "count", |w: &String| hash_key(w), |_t, bin: &mut Bin<Vec<String>>, words, out| {
///         bin.state.extend(words.drain(..));
///         out.push(bin.state.len() as u64);
///     })
/// });
/// # let _ = words;
/// ```
pub fn from_fn<I, O, F>(name: &str, source: Source<I>, build: F) -> FnJob<I, O, F>
where
    I: ExchangeData + Clone,
    O: ExchangeData + Clone + Hash,
    F: for<'s> Fn(StreamVec<'s, Time, I>, &Operators<'s>) -> StreamVec<'s, Time, O> + Send + Sync + 'static,
{
    FnJob {
        name: name.to_string(),
        source,
        build,
        _types: PhantomData,
    }
}

impl<I, O, F> Job for FnJob<I, O, F>
where
    I: ExchangeData + Clone,
    O: ExchangeData + Clone + Hash,
    F: for<'s> Fn(StreamVec<'s, Time, I>, &Operators<'s>) -> StreamVec<'s, Time, O> + Send + Sync + 'static,
{
    type In = I;
    type Out = O;

    fn name(&self) -> &str {
        &self.name
    }

    fn source(&self, _run: &RunConfig) -> Source<I> {
        self.source.clone()
    }

    fn dataflow<'s>(&self, input: StreamVec<'s, Time, I>, ops: &Operators<'s>) -> StreamVec<'s, Time, O> {
        (self.build)(input, ops)
    }
}
