//! Migration plans: from the current map and a target map, the steps that get there.
//!
//! A step is a set of bin moves issued together at one logical time. Strategies trade the
//! number of steps against the amount of state that moves in any one step.

use std::collections::VecDeque;
use std::fmt;
use std::str::FromStr;

use serde::Serialize;

use crate::config::Map;
use crate::error::ConfigError;

/// One bin move: `bin` goes to worker `to`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Move {
    pub bin: u32,
    pub from: u32,
    pub to: u32,
}

/// How a plan splits its moves into steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    /// Every move in one step.
    AllAtOnce,
    /// One bin per step.
    Fluid,
    /// `k` bins per step.
    Batched(usize),
    /// Each step moves at most one bin out of and one bin into each worker.
    Matched,
}

/// A strategy plus how its steps are issued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Schedule {
    pub strategy: Strategy,
    /// Issue each step at the next epoch without waiting for the previous one to complete.
    pub pipelined: bool,
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Strategy::AllAtOnce => write!(f, "all-at-once"),
            Strategy::Fluid => write!(f, "fluid"),
            Strategy::Batched(k) => write!(f, "batched:{k}"),
            Strategy::Matched => write!(f, "matched"),
        }
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.strategy)?;
        if self.pipelined {
            write!(f, "+pipelined")?;
        }
        Ok(())
    }
}

impl FromStr for Schedule {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (name, pipelined) = match s.strip_suffix("+pipelined") {
            Some(name) => (name, true),
            None => (s, false),
        };
        let strategy = match name {
            "all-at-once" => Strategy::AllAtOnce,
            "fluid" => Strategy::Fluid,
            "matched" => Strategy::Matched,
            other => match other.strip_prefix("batched:").map(str::parse::<usize>) {
                Some(Ok(k)) if k > 0 => Strategy::Batched(k),
                _ => return Err(ConfigError::Strategy(s.to_string())),
            },
        };
        Ok(Schedule { strategy, pipelined })
    }
}

/// Where a plan should leave the bins.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// Bin `i` on worker `i mod workers`.
    Uniform,
    /// All bins on workers `0..n`, spread evenly.
    Pack(usize),
    /// No bins on worker `w`; its bins spread over the others.
    Drain(usize),
    /// An explicit map.
    Map(Map),
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Uniform => write!(f, "uniform"),
            Target::Pack(n) => write!(f, "pack:{n}"),
            Target::Drain(w) => write!(f, "drain:{w}"),
            Target::Map(m) => {
                write!(f, "map:")?;
                for (i, w) in m.iter().enumerate() {
                    if i > 0 {
                        write!(f, ",")?;
                    }
                    write!(f, "{w}")?;
                }
                Ok(())
            }
        }
    }
}

impl FromStr for Target {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = |reason: &str| ConfigError::Target {
            spec: s.to_string(),
            reason: reason.to_string(),
        };
        let number = |v: &str, what: &str| {
            v.parse::<usize>()
                .map_err(|_| bad(&format!("`{v}` is not a {what}")))
        };
        match s.split_once(':') {
            None if s == "uniform" => Ok(Target::Uniform),
            Some(("pack", n)) => match number(n, "worker count")? {
                0 => Err(bad("pack needs at least one worker")),
                n => Ok(Target::Pack(n)),
            },
            Some(("drain", w)) => Ok(Target::Drain(number(w, "worker index")?)),
            Some(("map", list)) => list
                .split(',')
                .map(|w| number(w.trim(), "worker index").map(|w| w as u32))
                .collect::<Result<Map, _>>()
                .map(Target::Map),
            _ => Err(bad("expected uniform, pack:N, drain:W or map:W,W,...")),
        }
    }
}

impl Target {
    /// The map this target describes for `bins` bins on `workers` workers, starting from
    /// `current` (targets keep bins in place where they can).
    pub fn resolve(&self, current: &Map, workers: usize) -> Result<Map, ConfigError> {
        let bins = current.len();
        let invalid = |m: String| Err(ConfigError::Invalid(m));
        match self {
            Target::Uniform => Ok(crate::config::uniform(bins, workers)),
            Target::Pack(n) if *n > workers => invalid(format!(
                "target pack:{n} needs {n} workers but the job has {workers}"
            )),
            Target::Pack(n) => Ok(spread(current, &(0..*n as u32).collect::<Vec<_>>())),
            Target::Drain(w) if *w >= workers => invalid(format!(
                "target drain:{w} names worker {w} but the job has {workers} workers (0..{})",
                workers - 1
            )),
            Target::Drain(_) if workers < 2 => invalid("target drain needs at least two workers".to_string()),
            Target::Drain(w) => {
                let keep: Vec<u32> = (0..workers as u32).filter(|x| *x as usize != *w).collect();
                Ok(spread(current, &keep))
            }
            Target::Map(m) if m.len() != bins => invalid(format!(
                "target map has {} entries but the job has {bins} bins",
                m.len()
            )),
            Target::Map(m) => match m.iter().find(|w| **w as usize >= workers) {
                Some(w) => invalid(format!(
                    "target map names worker {w} but the job has {workers} workers"
                )),
                None => Ok(m.clone()),
            },
        }
    }
}

/// Spreads all bins evenly over `allowed`, keeping bins that are already on an allowed
/// worker in place while that worker is below its share.
fn spread(current: &Map, allowed: &[u32]) -> Map {
    let bins = current.len();
    let n = allowed.len();
    let share = |i: usize| bins / n + usize::from(i < bins % n);
    let slot = |w: u32| allowed.iter().position(|a| *a == w);
    let mut load = vec![0usize; n];
    let mut map = vec![u32::MAX; bins];
    for (b, w) in current.iter().enumerate() {
        if let Some(i) = slot(*w)
            && load[i] < share(i)
        {
            load[i] += 1;
            map[b] = *w;
        }
    }
    let mut next = 0;
    for entry in map.iter_mut().filter(|w| **w == u32::MAX) {
        while load[next] >= share(next) {
            next += 1;
        }
        load[next] += 1;
        *entry = allowed[next];
    }
    map
}

/// The moves that turn `current` into `target`, in bin order.
pub fn moves(current: &Map, target: &Map) -> Vec<Move> {
    current
        .iter()
        .zip(target)
        .enumerate()
        .filter(|(_, (from, to))| from != to)
        .map(|(bin, (from, to))| Move {
            bin: bin as u32,
            from: *from,
            to: *to,
        })
        .collect()
}

/// Splits `moves` into steps according to `strategy`. Every move appears in exactly one
/// step, and no step is empty.
pub fn steps(strategy: Strategy, moves: Vec<Move>) -> Vec<Vec<Move>> {
    if moves.is_empty() {
        return Vec::new();
    }
    match strategy {
        Strategy::AllAtOnce => vec![moves],
        Strategy::Fluid => moves.into_iter().map(|m| vec![m]).collect(),
        Strategy::Batched(k) => moves.chunks(k.max(1)).map(<[Move]>::to_vec).collect(),
        Strategy::Matched => matched_steps(moves),
    }
}

/// Repeatedly takes a maximum matching between sending and receiving workers: each step
/// moves at most one bin out of and one bin into each worker.
///
/// The matching runs on worker pairs, not on bins, so a round costs O(workers³) however
/// many bins remain: packing 2^16 bins stays fast.
fn matched_steps(moves: Vec<Move>) -> Vec<Vec<Move>> {
    let workers = moves
        .iter()
        .map(|m| m.from.max(m.to) as usize + 1)
        .max()
        .unwrap_or(0);
    // pending[s][d]: the moves from s to d not yet in a step, in bin order.
    let mut pending: Vec<Vec<VecDeque<Move>>> = vec![vec![VecDeque::new(); workers]; workers];
    let mut left = moves.len();
    for m in moves {
        pending[m.from as usize][m.to as usize].push_back(m);
    }
    let mut steps = Vec::new();
    while left > 0 {
        let mut match_of_dst: Vec<Option<usize>> = vec![None; workers];
        for s in 0..workers {
            let mut seen = vec![false; workers];
            augment(s, &pending, &mut match_of_dst, &mut seen);
        }
        let mut step: Vec<Move> = match_of_dst
            .iter()
            .enumerate()
            .filter_map(|(d, s)| s.and_then(|s| pending[s][d].pop_front()))
            .collect();
        step.sort_by_key(|m| m.bin);
        left -= step.len();
        steps.push(step);
    }
    steps
}

/// Kuhn's augmenting path search from sender `s` over pairs with pending moves.
fn augment(
    s: usize,
    pending: &[Vec<VecDeque<Move>>],
    match_of_dst: &mut [Option<usize>],
    seen: &mut [bool],
) -> bool {
    for d in 0..pending.len() {
        if pending[s][d].is_empty() || seen[d] {
            continue;
        }
        seen[d] = true;
        if match match_of_dst[d] {
            None => true,
            Some(other) => augment(other, pending, match_of_dst, seen),
        } {
            match_of_dst[d] = Some(s);
            return true;
        }
    }
    false
}

/// A migration requested for a point in the run: `STRATEGY@SECS:TARGET`.
#[derive(Clone, Debug, PartialEq)]
pub struct MigrationSpec {
    pub schedule: Schedule,
    pub at_secs: f64,
    pub target: Target,
}

impl FromStr for MigrationSpec {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = |reason: &str| ConfigError::Migration {
            spec: s.to_string(),
            reason: reason.to_string(),
        };
        let (schedule, rest) = s
            .split_once('@')
            .ok_or_else(|| bad("expected STRATEGY@SECS:TARGET, e.g. fluid@10:pack:1"))?;
        let (secs, target) = rest
            .split_once(':')
            .ok_or_else(|| bad("expected SECS:TARGET after `@`"))?;
        let at_secs = secs
            .parse::<f64>()
            .ok()
            .filter(|x| x.is_finite() && *x >= 0.0)
            .ok_or_else(|| bad(&format!("`{secs}` is not a time in seconds")))?;
        Ok(MigrationSpec {
            schedule: schedule.parse()?,
            at_secs,
            target: target.parse()?,
        })
    }
}

impl fmt::Display for MigrationSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}:{}", self.schedule, self.at_secs, self.target)
    }
}

#[cfg(test)]
mod tests {
    use super::Strategy;
    use super::*;
    use crate::config::uniform;
    use proptest::prelude::{Strategy as Gen, prop_assert, prop_assert_eq, proptest};

    #[test]
    fn parses_specs() {
        let m: MigrationSpec = "fluid@10:pack:1".parse().unwrap();
        assert_eq!(m.schedule.strategy, Strategy::Fluid);
        assert_eq!(m.at_secs, 10.0);
        assert_eq!(m.target, Target::Pack(1));
        let m: MigrationSpec = "batched:8+pipelined@2.5:uniform".parse().unwrap();
        assert_eq!(m.schedule.strategy, Strategy::Batched(8));
        assert!(m.schedule.pipelined);
        assert_eq!(m.to_string(), "batched:8+pipelined@2.5:uniform");
        for bad in [
            "fluid",
            "fluid@x:uniform",
            "slow@1:uniform",
            "batched:0@1:uniform",
            "fluid@1:pack",
            "fluid@1:pack:0",
            "fluid@1:drain:-1",
            "fluid@1:spread",
            "fluid@-1:uniform",
        ] {
            assert!(bad.parse::<MigrationSpec>().is_err(), "{bad}");
        }
    }

    #[test]
    fn targets_resolve() {
        let cur = uniform(8, 2);
        assert_eq!(Target::Pack(1).resolve(&cur, 2).unwrap(), vec![0; 8]);
        assert_eq!(Target::Drain(0).resolve(&cur, 2).unwrap(), vec![1; 8]);
        assert!(Target::Pack(3).resolve(&cur, 2).is_err());
        assert!(Target::Drain(2).resolve(&cur, 2).is_err());
        assert!(Target::Map(vec![0; 7]).resolve(&cur, 2).is_err());
        assert!(Target::Map(vec![2; 8]).resolve(&cur, 2).is_err());
        // Bins already on workers 0 and 1 stay; the others fill up the shares.
        let packed = Target::Pack(2).resolve(&uniform(8, 4), 4).unwrap();
        assert_eq!(packed, vec![0, 1, 0, 0, 0, 1, 1, 1]);
    }

    fn arb_moves() -> impl Gen<Value = Vec<Move>> {
        proptest::collection::vec((0u32..6, 0u32..6), 0..40).prop_map(|pairs| {
            pairs
                .into_iter()
                .enumerate()
                .filter(|(_, (f, t))| f != t)
                .map(|(b, (from, to))| Move {
                    bin: b as u32,
                    from,
                    to,
                })
                .collect()
        })
    }

    #[test]
    fn matched_plans_for_many_bins_are_fast_enough_to_run_inline() {
        let cur = uniform(1 << 16, 4);
        let goal = Target::Pack(1).resolve(&cur, 4).unwrap();
        let steps = steps(Strategy::Matched, moves(&cur, &goal));
        // Three senders, one receiver: one move per step.
        assert_eq!(steps.len(), 3 << 14);
    }

    proptest! {
        #[test]
        fn every_strategy_moves_everything_once(moves in arb_moves(), k in 1usize..5) {
            for strategy in [Strategy::AllAtOnce, Strategy::Fluid, Strategy::Batched(k), Strategy::Matched] {
                let steps = steps(strategy, moves.clone());
                let mut flat: Vec<Move> = steps.iter().flatten().copied().collect();
                flat.sort_by_key(|m| m.bin);
                prop_assert_eq!(&flat, &moves);
                prop_assert!(steps.iter().all(|s| !s.is_empty()));
            }
        }

        #[test]
        fn matched_steps_are_matchings_and_maximal(moves in arb_moves()) {
            let steps = steps(Strategy::Matched, moves.clone());
            let mut remaining = moves.clone();
            for step in &steps {
                let mut out = std::collections::HashSet::new();
                let mut inn = std::collections::HashSet::new();
                for m in step {
                    prop_assert!(out.insert(m.from));
                    prop_assert!(inn.insert(m.to));
                }
                remaining.retain(|m| !step.contains(m));
                // Maximal: no remaining move could have joined this step.
                prop_assert!(!remaining.iter().any(|m| !out.contains(&m.from) && !inn.contains(&m.to)));
            }
        }

        #[test]
        fn spread_targets_are_balanced(bins_log in 4u32..9, workers in 1usize..7, n in 1usize..7) {
            let bins = 1usize << bins_log;
            let cur = uniform(bins, workers);
            if n <= workers {
                let map = Target::Pack(n).resolve(&cur, workers).unwrap();
                let mut load = vec![0usize; workers];
                for w in &map { load[*w as usize] += 1; }
                for (w, l) in load.iter().enumerate() {
                    if w < n { prop_assert!(*l == bins / n || *l == bins / n + 1); } else { prop_assert_eq!(*l, 0); }
                }
            }
        }
    }
}
