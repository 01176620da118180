//! Migration plans: from the current map and a target map, the steps that get there.
//!
//! A step is a set of bin moves issued together at one logical time. Strategies trade the
//! number of steps against the amount of state that moves in any one step.

use std::collections::VecDeque;
use std::fmt;
use std::str::FromStr;

use crate::config::{Map, NONE, Placement, Replicas, Transfer, chained, same_process, transfers, uniform};
use crate::error::ConfigError;

/// One bin's change of holders within a plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Change {
    /// The bin that changes holders.
    pub bin: u32,
    /// Its holders before the change.
    pub from: Replicas,
    /// Its holders after it.
    pub to: Replicas,
}

impl Change {
    /// The copies of state the change takes (none for a swap of roles).
    pub fn transfers(&self) -> impl Iterator<Item = Transfer> {
        transfers(self.from, self.to)
    }

    /// The worker a report names as where the bin goes from and to: the primary's, unless
    /// only the standby changes.
    pub fn endpoints(&self) -> (u32, u32) {
        if self.from.primary != self.to.primary {
            (self.from.primary, self.to.primary)
        } else if self.from.standby != NONE {
            (self.from.standby, self.to.standby)
        } else {
            (self.from.primary, self.to.standby)
        }
    }
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
    /// How the moves are split into steps.
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
    /// The primaries placed by the bins' measured loads (see [`crate::balance`]): resolved
    /// by the plan driver, which knows them; as a shape it leaves the bins where they are.
    Balance,
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Uniform => write!(f, "uniform"),
            Target::Balance => write!(f, "balance"),
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
            None if s == "balance" => Ok(Target::Balance),
            Some(("pack", n)) => match number(n, "worker count")? {
                0 => Err(bad("pack needs at least one worker")),
                n => Ok(Target::Pack(n)),
            },
            Some(("drain", w)) => Ok(Target::Drain(number(w, "worker index")?)),
            Some(("map", list)) => list
                .split(',')
                .map(|w| {
                    let n = number(w.trim(), "worker index")?;
                    // Worker indices are u32 everywhere: a larger one must not wrap to another.
                    u32::try_from(n).map_err(|_| bad(&format!("worker {n} is out of range")))
                })
                .collect::<Result<Map, _>>()
                .map(Target::Map),
            _ => Err(bad("expected uniform, balance, pack:N, drain:W or map:W,W,...")),
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
            Target::Balance => Ok(current.clone()),
            Target::Pack(0) => invalid("target pack:0 leaves the bins no worker".to_string()),
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

impl Target {
    /// The placement this target describes, starting from `current`, on the workers of a
    /// job of `workers` (`per_process` in each process) that `live` marks as serving.
    ///
    /// Primaries go where [`Target::resolve`] puts them, over the live workers only. A bin
    /// that has a standby keeps one: where it is if it can stay (not the new primary, not
    /// drained, live), else on the old primary's worker (roles swap, nothing copied), else
    /// chained after the new primary; and in another process than the primary whenever a
    /// live worker of another process can take it. Degraded bins stay degraded: recovery
    /// gives them standbys.
    pub fn goal(
        &self,
        current: &Placement,
        workers: usize,
        per_process: usize,
        live: &[bool],
    ) -> Result<Placement, ConfigError> {
        let bins = current.len();
        let invalid = ConfigError::Invalid;
        let is_live = |w: u32| live.get(w as usize).copied().unwrap_or(false);
        let alive: Vec<u32> = (0..workers as u32).filter(|w| is_live(*w)).collect();
        if alive.is_empty() {
            return Err(invalid("no worker is live".to_string()));
        }
        let primaries: Map = current.iter().map(|r| r.primary).collect();
        let drained = match self {
            Target::Drain(w) => Some(*w as u32),
            _ => None,
        };
        let goal: Map = match self {
            Target::Uniform if alive.len() == workers => uniform(bins, workers),
            Target::Uniform => (0..bins).map(|b| alive[b % alive.len()]).collect(),
            Target::Balance => primaries.clone(),
            Target::Pack(0) => return Err(invalid("target pack:0 leaves the bins no worker".to_string())),
            Target::Pack(n) if *n > alive.len() => {
                return Err(invalid(format!(
                    "target pack:{n} needs {n} live workers but the job has {}",
                    alive.len()
                )));
            }
            Target::Pack(n) => spread(&primaries, &alive[..*n]),
            Target::Drain(w) => {
                self.resolve(&primaries, workers)?;
                let keep: Vec<u32> = alive.iter().copied().filter(|a| *a as usize != *w).collect();
                if keep.is_empty() {
                    return Err(invalid(format!("target drain:{w} leaves no live worker")));
                }
                spread(&primaries, &keep)
            }
            Target::Map(_) => {
                let map = self.resolve(&primaries, workers)?;
                if let Some(w) = map.iter().find(|w| !is_live(**w)) {
                    return Err(invalid(format!("target map names worker {w}, which has failed")));
                }
                map
            }
        };
        let usable = |w: u32| is_live(w) && Some(w) != drained;
        current
            .iter()
            .zip(&goal)
            .enumerate()
            .map(|(bin, (r, p))| {
                if r.standby == NONE {
                    return Ok(Replicas::single(*p));
                }
                // Where it is, else on the old primary's worker (nothing copied), if that is
                // in another process than the new primary, or no other process can take it.
                let kept = [r.standby, r.primary]
                    .into_iter()
                    .find(|w| *w != *p && usable(*w));
                let standby = match kept {
                    Some(w) if !same_process(w, *p, per_process) => w,
                    kept => {
                        let chained = chained(*p, workers, per_process, usable);
                        match kept {
                            Some(w) if chained == NONE || same_process(chained, *p, per_process) => w,
                            _ => chained,
                        }
                    }
                };
                if standby == NONE {
                    return Err(invalid(format!(
                        "target {self} leaves no worker for the standby of bin {bin}"
                    )));
                }
                Ok(Replicas { primary: *p, standby })
            })
            .collect()
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

/// The changes that turn `current` into `goal`, in bin order.
pub fn changes(current: &Placement, goal: &Placement) -> Vec<Change> {
    current
        .iter()
        .zip(goal)
        .enumerate()
        .filter(|(_, (from, to))| from != to)
        .map(|(bin, (from, to))| Change {
            bin: bin as u32,
            from: *from,
            to: *to,
        })
        .collect()
}

/// Splits `changes` into steps according to `strategy`. Every change appears in exactly
/// one step, and no step is empty.
pub fn steps(strategy: Strategy, changes: Vec<Change>) -> Vec<Vec<Change>> {
    if changes.is_empty() {
        return Vec::new();
    }
    match strategy {
        Strategy::AllAtOnce => vec![changes],
        Strategy::Fluid => changes.into_iter().map(|c| vec![c]).collect(),
        Strategy::Batched(k) => changes.chunks(k.max(1)).map(<[Change]>::to_vec).collect(),
        Strategy::Matched => matched_steps(changes),
    }
}

/// Each step sends at most one bin out of and one bin into each worker: a maximum matching
/// between senders and receivers of the changes that copy one bin, then, greedily, the
/// changes that copy two (both replicas move) where their workers are still free. Changes
/// that copy nothing (roles swap) go in the first step.
///
/// The matching runs on worker pairs, not on bins, so a round costs O(workers³) however
/// many bins remain: packing 2^16 bins stays fast.
fn matched_steps(changes: Vec<Change>) -> Vec<Vec<Change>> {
    let workers = changes
        .iter()
        .flat_map(Change::transfers)
        .map(|t| t.from.max(t.to) as usize + 1)
        .max()
        .unwrap_or(0);
    // pending[s][d]: the one-copy changes from s to d not yet in a step, in bin order.
    let mut pending: Vec<Vec<VecDeque<Change>>> = vec![vec![VecDeque::new(); workers]; workers];
    let mut first = Vec::new();
    let mut doubles = VecDeque::new();
    let mut left = 0;
    for c in changes {
        let copies: Vec<Transfer> = c.transfers().collect();
        match copies.as_slice() {
            [] => first.push(c),
            [t] => {
                pending[t.from as usize][t.to as usize].push_back(c);
                left += 1;
            }
            _ => {
                doubles.push_back(c);
                left += 1;
            }
        }
    }
    let mut steps = Vec::new();
    while left > 0 || !first.is_empty() {
        let mut match_of_dst: Vec<Option<usize>> = vec![None; workers];
        for s in 0..workers {
            let mut seen = vec![false; workers];
            augment(s, &pending, &mut match_of_dst, &mut seen);
        }
        let mut step: Vec<Change> = std::mem::take(&mut first);
        let (mut out, mut inn) = (vec![false; workers], vec![false; workers]);
        for (d, s) in match_of_dst.iter().enumerate() {
            if let Some(s) = *s
                && let Some(c) = pending[s][d].pop_front()
            {
                out[s] = true;
                inn[d] = true;
                step.push(c);
                left -= 1;
            }
        }
        for _ in 0..doubles.len() {
            let Some(c) = doubles.pop_front() else { break };
            if c.transfers()
                .all(|t| !out[t.from as usize] && !inn[t.to as usize])
            {
                for t in c.transfers() {
                    out[t.from as usize] = true;
                    inn[t.to as usize] = true;
                }
                step.push(c);
                left -= 1;
            } else {
                doubles.push_back(c);
            }
        }
        step.sort_by_key(|c| c.bin);
        steps.push(step);
    }
    steps
}

/// Kuhn's augmenting path search from sender `s` over pairs with pending changes.
fn augment(
    s: usize,
    pending: &[Vec<VecDeque<Change>>],
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
    /// How the plan's steps are made and issued.
    pub schedule: Schedule,
    /// When the plan starts, in seconds since the measured run began (it waits for a
    /// running plan to end).
    pub at_secs: f64,
    /// Where the plan leaves the primaries.
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
        // Built in code rather than parsed, pack:0 is refused too (it would divide by zero).
        assert!(Target::Pack(0).resolve(&cur, 2).is_err());
        assert!(
            Target::Pack(0)
                .goal(&crate::config::single(&cur), 2, 2, &[true; 2])
                .is_err()
        );
        for bad in ["map:4294967296", "map:0,4294967297", "pack:0", "map:-1"] {
            assert!(bad.parse::<Target>().is_err(), "{bad}");
        }
        assert!(Target::Drain(2).resolve(&cur, 2).is_err());
        assert!(Target::Map(vec![0; 7]).resolve(&cur, 2).is_err());
        assert!(Target::Map(vec![2; 8]).resolve(&cur, 2).is_err());
        // Bins already on workers 0 and 1 stay; the others fill up the shares.
        let packed = Target::Pack(2).resolve(&uniform(8, 4), 4).unwrap();
        assert_eq!(packed, vec![0, 1, 0, 0, 0, 1, 1, 1]);
    }

    use crate::config::{replicated, single};

    /// Changes of primaries only: each copies one bin from its old to its new worker.
    fn arb_moves() -> impl Gen<Value = Vec<Change>> {
        proptest::collection::vec((0u32..6, 0u32..6), 0..40).prop_map(|pairs| {
            pairs
                .into_iter()
                .enumerate()
                .filter(|(_, (f, t))| f != t)
                .map(|(b, (from, to))| Change {
                    bin: b as u32,
                    from: Replicas::single(from),
                    to: Replicas::single(to),
                })
                .collect()
        })
    }

    /// Changes of bins with two holders: swaps, one replica moving, or both.
    fn arb_changes() -> impl Gen<Value = Vec<Change>> {
        let pair = || {
            (0u32..5, 1u32..5).prop_map(|(p, d)| Replicas {
                primary: p,
                standby: (p + d) % 5,
            })
        };
        proptest::collection::vec((pair(), pair()), 0..40).prop_map(|pairs| {
            pairs
                .into_iter()
                .enumerate()
                .filter(|(_, (f, t))| f != t)
                .map(|(b, (from, to))| Change {
                    bin: b as u32,
                    from,
                    to,
                })
                .collect()
        })
    }

    #[test]
    fn matched_plans_for_many_bins_are_fast_enough_to_run_inline() {
        let cur = single(&uniform(1 << 16, 4));
        let goal = Target::Pack(1).goal(&cur, 4, 4, &[true; 4]).unwrap();
        let steps = steps(Strategy::Matched, changes(&cur, &goal));
        // Three senders, one receiver: one move per step.
        assert_eq!(steps.len(), 3 << 14);
    }

    #[test]
    fn goals_keep_standbys_apart_and_on_live_workers() {
        let cur = replicated(&uniform(8, 3), 3, 3);
        let live = [true, false, true];
        let goal = Target::Uniform.goal(&cur, 3, 3, &live).unwrap();
        for r in &goal {
            assert!(
                r.primary != 1 && r.standby != 1 && r.primary != r.standby,
                "{goal:?}"
            );
        }
        // Packing onto worker 0: bins whose standby was 0 swap roles, nothing is copied.
        let packed = Target::Pack(1).goal(&cur, 3, 3, &[true; 3]).unwrap();
        for (was, now) in cur.iter().zip(&packed) {
            assert_eq!(now.primary, 0);
            if was.standby == 0 {
                assert_eq!(transfers(*was, *now).count(), 0);
            }
        }
        assert!(
            Target::Drain(1)
                .goal(&replicated(&uniform(8, 2), 2, 2), 2, 2, &[true; 2])
                .is_err()
        );
        assert!(Target::Map(vec![1; 8]).goal(&cur, 3, 3, &live).is_err());
        assert!(Target::Pack(3).goal(&cur, 3, 3, &live).is_err());
    }

    #[test]
    fn goals_keep_replicas_in_different_processes_while_two_are_live() {
        use crate::config::colocated;
        // Two processes of two workers: 0 and 1, 2 and 3.
        let cur = replicated(&uniform(16, 4), 4, 2);
        assert_eq!(colocated(&cur, 4, 2), 0);
        let everyone = [true; 4];
        let targets = [
            (Target::Map(vec![1; 16]), everyone),
            (Target::Pack(2), everyone),
            (Target::Drain(2), everyone),
            (Target::Uniform, [true, true, false, true]),
            (Target::Pack(1), [true, true, true, false]),
        ];
        for (target, live) in targets {
            let goal = target.goal(&cur, 4, 2, &live).unwrap();
            assert_eq!(colocated(&goal, 4, 2), 0, "{target}: {goal:?}");
        }
        // With one process left, both replicas share it.
        let goal = Target::Uniform
            .goal(&cur, 4, 2, &[true, true, false, false])
            .unwrap();
        assert_eq!(colocated(&goal, 4, 2), 16);
    }

    proptest! {
        #[test]
        fn every_strategy_moves_everything_once(changes in arb_changes(), k in 1usize..5) {
            for strategy in [Strategy::AllAtOnce, Strategy::Fluid, Strategy::Batched(k), Strategy::Matched] {
                let steps = steps(strategy, changes.clone());
                let mut flat: Vec<Change> = steps.iter().flatten().copied().collect();
                flat.sort_by_key(|c| c.bin);
                prop_assert_eq!(&flat, &changes);
                prop_assert!(steps.iter().all(|s| !s.is_empty()));
            }
        }

        #[test]
        fn matched_steps_copy_at_most_one_bin_per_worker(changes in arb_changes()) {
            for step in steps(Strategy::Matched, changes) {
                let mut out = std::collections::HashSet::new();
                let mut inn = std::collections::HashSet::new();
                for t in step.iter().flat_map(Change::transfers) {
                    prop_assert!(out.insert(t.from));
                    prop_assert!(inn.insert(t.to));
                }
            }
        }

        #[test]
        fn matched_steps_are_matchings_and_maximal(moves in arb_moves()) {
            let steps = steps(Strategy::Matched, moves.clone());
            let mut remaining = moves.clone();
            let ends = |c: &Change| (c.from.primary, c.to.primary);
            for step in &steps {
                let mut out = std::collections::HashSet::new();
                let mut inn = std::collections::HashSet::new();
                for c in step {
                    prop_assert!(out.insert(ends(c).0));
                    prop_assert!(inn.insert(ends(c).1));
                }
                remaining.retain(|m| !step.contains(m));
                // Maximal: no remaining move could have joined this step.
                prop_assert!(!remaining.iter().any(|m| !out.contains(&ends(m).0) && !inn.contains(&ends(m).1)));
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
