//! The balancer on worker 0: watches the workers' measured loads (`Board`) and, when the
//! busiest stays above `--balance-threshold` times the mean for `--balance-every` while no
//! plan runs, proposes the `balance` plan (`suggest`) or issues it (`auto`).
//!
//! Hysteresis keeps a steady load from making plan after plan: no plan unless it predicts
//! at least [`MIN_GAIN`] lower imbalance, and nothing is judged on a window that saw a plan
//! (the board starts afresh when one ends).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::loads::{Board, LoadReport, WindowSums};
use crate::balance::{Balanced, Decision, Loads};
use crate::driver::PlanDriver;
use crate::error::ConfigError;
use crate::plan::{Schedule, Strategy};
use crate::scale;

/// The least improvement a balancer's plan must predict: the imbalance after at most this
/// fraction of the imbalance before.
pub const MIN_GAIN: f64 = 0.9;
/// `--balance-threshold` unless given.
pub const DEFAULT_THRESHOLD: f64 = 1.2;
/// `--balance-every` unless given.
pub const DEFAULT_EVERY: Duration = Duration::from_secs(2);
/// `--balance-strategy` unless given.
pub const DEFAULT_STRATEGY: Schedule = Schedule {
    strategy: Strategy::Fluid,
    pipelined: false,
};

/// What the balancer does when the load is uneven.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum BalanceMode {
    /// Nothing (and the workers send no load reports).
    Off,
    /// Proposes the plan; a user starts it (the dashboard's key, or a `balance` plan).
    #[default]
    Suggest,
    /// Issues the plan.
    Auto,
}

impl fmt::Display for BalanceMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BalanceMode::Off => "off",
            BalanceMode::Suggest => "suggest",
            BalanceMode::Auto => "auto",
        })
    }
}

impl FromStr for BalanceMode {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, ConfigError> {
        match s {
            "off" => Ok(BalanceMode::Off),
            "suggest" => Ok(BalanceMode::Suggest),
            "auto" => Ok(BalanceMode::Auto),
            _ => Err(ConfigError::Invalid(format!(
                "--balance {s}: expected off, suggest or auto"
            ))),
        }
    }
}

/// How the run balances itself (`--balance*`).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct BalanceConfig {
    /// `--balance`.
    #[serde(with = "super::config::text")]
    pub mode: BalanceMode,
    /// `--balance-threshold`: max / mean worker load above which the load is uneven.
    pub threshold: f64,
    /// `--balance-every`: how long the load must stay uneven, in seconds.
    pub every_s: f64,
    /// `--balance-strategy`: how the balancer's plans move bins.
    #[serde(with = "super::config::text")]
    pub strategy: Schedule,
}

impl Default for BalanceConfig {
    fn default() -> Self {
        BalanceConfig {
            mode: BalanceMode::default(),
            threshold: DEFAULT_THRESHOLD,
            every_s: DEFAULT_EVERY.as_secs_f64(),
            strategy: DEFAULT_STRATEGY,
        }
    }
}

impl BalanceConfig {
    /// Checks the settings.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(self.threshold.is_finite() && self.threshold > 1.0) {
            return Err(ConfigError::Invalid(format!(
                "--balance-threshold {}: must be above 1 (the busiest worker's load over the mean)",
                self.threshold
            )));
        }
        if !(self.every_s.is_finite() && self.every_s > 0.0 && self.every_s <= 3600.0) {
            return Err(ConfigError::Invalid(format!(
                "--balance-every {}: must be above 0 and at most 3600 seconds",
                self.every_s
            )));
        }
        Ok(())
    }
}

/// Worker 0's balancer.
pub(crate) struct Balancer {
    config: BalanceConfig,
    /// The run started packed (`--placement pack:N`): the set of workers serving is sized
    /// by the measured true rates ([`crate::scale`]), and balanced within.
    elastic: bool,
    board: Board,
    /// Since when (seconds into the run) the load has been uneven, if it is.
    uneven_since: Option<f64>,
    /// Whether a plan ran (or failures waited) at the last turn.
    was_busy: bool,
    /// Whether a proposal stands (`suggest`; the driver holds it).
    suggested: bool,
    /// Since when a standing proposal's reason has lapsed (the load even, or moving bins no
    /// help), if it has: one even window of a noisy load does not withdraw it.
    lapsed_since: Option<f64>,
    /// Each latency window's records per worker, until its imbalance is known.
    windows: WindowSums,
    workers: usize,
}

/// What the balancer would do with a window's loads.
struct Proposal {
    plan: Balanced,
    /// Sizing: (workers serving now, workers needed, the true rate sized by).
    sizing: Option<(usize, usize, f64)>,
    /// The busiest serving worker, and the offered load in records/s.
    busiest: Option<u32>,
    load: f64,
}

impl Balancer {
    pub(crate) fn new(config: BalanceConfig, elastic: bool, bins: usize, workers: usize) -> Self {
        Balancer {
            config,
            elastic,
            board: Board::new(bins, workers, 0.0),
            uneven_since: None,
            was_busy: false,
            suggested: false,
            lapsed_since: None,
            windows: WindowSums::default(),
            workers,
        }
    }

    /// One turn of worker 0's loop, `now_s` into the measured run: takes the workers'
    /// reports, and once a window closes, gives the driver its loads and decides.
    pub(crate) fn turn(&mut self, reports: Vec<LoadReport>, driver: &mut PlanDriver, now_s: f64) {
        self.take(&reports, driver);
        let busy = driver.busy() || driver.urgent();
        if busy != self.was_busy {
            // A window that saw bins move says neither where their load was nor is: the
            // measure starts afresh as a plan begins and as it ends (once each: this runs on
            // every turn of worker 0's loop, and a reset allocates per bin).
            self.board.reset(now_s);
            self.uneven_since = None;
            self.withdraw(driver, "a plan, a failure or a rejoin is under way", now_s);
            driver.set_loads(None);
            self.was_busy = busy;
        }
        if busy || !self.board.tick(now_s) {
            return;
        }
        let loads = self.board.loads();
        driver.set_loads(loads.clone());
        let Some(loads) = loads else { return };
        let proposal = self.propose(&loads, driver);
        self.judge(proposal, driver, now_s);
    }

    /// Takes the reports into the board, and each latency window's imbalance into the
    /// driver's log once every live worker reported it.
    fn take(&mut self, reports: &[LoadReport], driver: &mut PlanDriver) {
        for r in reports {
            self.board.take(r);
            self.windows.take(r, self.workers);
        }
        if !reports.is_empty() {
            // An elastic run's idle workers are not uneven load.
            let counted = if self.elastic {
                driver.serving()
            } else {
                driver.live().collect()
            };
            for (window, imbalance) in self.windows.settle(&counted) {
                driver.balance_log().window(window, imbalance);
            }
        }
    }

    /// The plan for a window's loads: balanced over the live workers, or, elastic, over as
    /// many as the true rates say the load needs.
    fn propose(&self, loads: &Loads, driver: &PlanDriver) -> Proposal {
        let current = driver.primaries();
        let live: Vec<u32> = driver.live().collect();
        let load_of = |w: u32| loads.workers.get(w as usize).copied().unwrap_or(0.0);
        // Sized by what the sources offer: what the workers applied stops at what they
        // can, and an overloaded set would grow by a step at a time.
        let load = live.iter().map(|w| load_of(*w)).sum::<f64>().max(loads.offered);
        let serving = driver.serving();
        let busiest = serving
            .iter()
            .copied()
            .max_by(|a, b| load_of(*a).total_cmp(&load_of(*b)));
        if !self.elastic {
            let plan = crate::balance::balanced(&current, &loads.bins, &loads.bytes, &live);
            return Proposal {
                plan,
                sizing: None,
                busiest,
                load,
            };
        }
        let rates: Vec<Option<f64>> = serving
            .iter()
            .map(|w| loads.true_rates.get(*w as usize).copied().flatten())
            .collect();
        let rate = scale::true_rate(&rates);
        let needed = rate.map_or(serving.len(), |r| {
            scale::workers_needed(load, r, serving.len(), live.len())
        });
        let idle: Vec<u32> = live.iter().copied().filter(|w| !serving.contains(w)).collect();
        let with_load: Vec<(u32, f64)> = serving.iter().map(|w| (*w, load_of(*w))).collect();
        let active = scale::choose(&with_load, &idle, needed);
        let mut plan = scale::onto(&current, &loads.bins, &loads.bytes, &active);
        let sizing = rate
            .filter(|_| needed != serving.len())
            .map(|r| (serving.len(), needed, r));
        plan.workers = sizing.map(|(now, needed, _)| [now, needed]);
        Proposal {
            plan,
            sizing,
            busiest,
            load,
        }
    }

    /// Decides on a window's proposal: nothing, propose it (`suggest`) or start it (`auto`).
    fn judge(&mut self, proposal: Proposal, driver: &mut PlanDriver, now_s: f64) {
        let plan = &proposal.plan;
        driver.balance_log().measured(now_s, plan.before);
        tracing::info!(
            target: "megaflux::balance",
            phase = "measured", imbalance = plan.before, predicted = plan.after, run_s = now_s
        );
        if proposal.sizing.is_none() && plan.before <= self.config.threshold {
            self.uneven_since = None;
            if self.lapsed(now_s) {
                self.withdraw(driver, "the load evened out", now_s);
            }
            return;
        }
        let since = *self
            .uneven_since
            .get_or_insert(now_s - super::loads::WINDOW.as_secs_f64());
        if now_s - since + 1e-9 < self.config.every_s {
            return;
        }
        let helps = proposal.sizing.is_some() || plan.after <= plan.before * MIN_GAIN;
        if plan.moved.is_empty() || !helps {
            // Uneven, but moving bins cannot help enough (one bin may carry it all).
            self.uneven_since = Some(now_s);
            if self.lapsed(now_s) {
                self.withdraw(driver, "moving bins would no longer help enough", now_s);
            }
            return;
        }
        self.lapsed_since = None;
        // A proposal stands until the load evens out or a plan runs: the loads of each window
        // differ a little, and so would the next proposal.
        if !self.suggested {
            self.decide(proposal, driver, now_s - since, now_s);
        }
    }

    /// Proposes or starts the plan (uneven for `uneven_s`), and says so with its reason.
    fn decide(&mut self, proposal: Proposal, driver: &mut PlanDriver, uneven_s: f64, now_s: f64) {
        let Proposal {
            plan,
            sizing,
            busiest,
            load,
        } = proposal;
        let why = match sizing {
            Some((now, needed, rate)) => format!(
                "{} records/s need {needed} workers at {:.0} % of their true rate of {} records/s, {now} serve",
                per_s(load),
                scale::TARGET_UTILISATION * 100.0,
                per_s(rate),
            ),
            None => format!(
                "worker {} at {:.2}x mean for {uneven_s:.1} s",
                busiest.map_or("?".to_string(), |w| w.to_string()),
                plan.before,
            ),
        };
        let reason = format!("{why}; {}; predicted {:.2}x", moves(&plan), plan.after);
        let auto = self.config.mode == BalanceMode::Auto;
        let [serving, needed] = plan.workers.map_or([None, None], |[a, b]| [Some(a), Some(b)]);
        tracing::info!(
            target: "megaflux::balance",
            phase = if auto { "issued" } else { "suggested" },
            imbalance = plan.before, predicted = plan.after, bins = plan.moved.len(), bytes = plan.bytes,
            serving, needed, strategy = %self.config.strategy, reason = %reason, run_s = now_s
        );
        let mut decision = Decision {
            at_s: now_s,
            imbalance_before: plan.before,
            imbalance_predicted: plan.after,
            bins: plan.moved.len(),
            bytes: plan.bytes,
            strategy: self.config.strategy.to_string(),
            issued: auto,
            workers: plan.workers,
        };
        self.uneven_since = None;
        if auto {
            if let Err(e) = driver.start_balance(self.config.strategy, plan, "balancer", now_s) {
                decision.issued = false;
                tracing::warn!(target: "megaflux::balance", phase = "refused", reason = %e, run_s = now_s);
            }
        } else {
            driver.propose(Some(plan));
            self.suggested = true;
        }
        driver.balance_log().decided(decision);
    }

    /// Drops the standing proposal, if there is one, and says why (the dashboard stops
    /// offering it).
    /// Whether a standing proposal's reason, lapsed in this window, has stayed lapsed for
    /// `--balance-every` (as long as the load had to be uneven for it to be made).
    fn lapsed(&mut self, now_s: f64) -> bool {
        let since = *self
            .lapsed_since
            .get_or_insert(now_s - super::loads::WINDOW.as_secs_f64());
        now_s - since + 1e-9 >= self.config.every_s
    }

    fn withdraw(&mut self, driver: &mut PlanDriver, why: &str, now_s: f64) {
        self.lapsed_since = None;
        if std::mem::take(&mut self.suggested) {
            driver.propose(None);
            tracing::info!(target: "megaflux::balance", phase = "withdrawn", reason = why, run_s = now_s);
        }
    }
}

/// How many of a plan's bins go to which worker, and their bytes (bins go both ways: a hot
/// bin out, cooler ones back).
fn moves(plan: &Balanced) -> String {
    let mut to = std::collections::BTreeMap::<u32, usize>::new();
    for w in plan.moved.iter().filter_map(|b| plan.map.get(*b as usize)) {
        *to.entry(*w).or_default() += 1;
    }
    let to: Vec<String> = to.iter().map(|(w, n)| format!("{n} to worker {w}")).collect();
    format!(
        "{} bins ({}): {}",
        plan.moved.len(),
        crate::size::human(plan.bytes),
        to.join(", ")
    )
}

/// Records per second as people read them: `2.0M`, `650k`, `900`.
fn per_s(r: f64) -> String {
    if r >= 1e6 {
        format!("{:.1}M", r / 1e6)
    } else if r >= 1e3 {
        format!("{:.0}k", r / 1e3)
    } else {
        format!("{r:.0}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Worker `w`'s report of one second in which bin `b` took `records[b]` records (the
    /// bins of `map` that `w` holds).
    fn report(w: u32, window: u64, map: &[u32], records: &[u64]) -> LoadReport {
        let bins = (0..map.len() as u32)
            .filter(|b| map[*b as usize] == w)
            .map(|b| (b, records[b as usize], 1024))
            .collect();
        LoadReport {
            worker: w,
            window,
            interval_ns: 1_000_000_000,
            busy_ns: 0,
            sent: 0,
            bins,
        }
    }

    #[test]
    fn a_standing_proposal_outlives_one_even_window_but_not_an_even_spell() {
        const UNEVEN: [u64; 4] = [100, 100, 10, 10];
        const EVEN: [u64; 4] = [50, 50, 50, 50];
        let map = [0, 0, 1, 1];
        let mut driver = PlanDriver::single(&map, 2);
        let mut balancer = Balancer::new(BalanceConfig::default(), false, map.len(), 2);
        let mut second = 0u64;
        let mut turn = |balancer: &mut Balancer, driver: &mut PlanDriver, records: &[u64]| {
            second += 1;
            let reports = (0..2).map(|w| report(w, second, &map, records)).collect();
            balancer.turn(reports, driver, second as f64);
            balancer.suggested
        };
        // Uneven for `--balance-every` (2 s, two windows): one proposal, which stands.
        let standing: Vec<bool> = [UNEVEN, UNEVEN, UNEVEN]
            .iter()
            .map(|r| turn(&mut balancer, &mut driver, r))
            .collect();
        assert_eq!(standing, [false, true, true]);
        // A noisy window that looks even withdraws nothing, and the load uneven again
        // proposes nothing new.
        assert!(turn(&mut balancer, &mut driver, &EVEN));
        for _ in 0..3 {
            assert!(turn(&mut balancer, &mut driver, &UNEVEN));
        }
        assert_eq!(driver.balance_log().summary("suggest".into()).decisions.len(), 1);
        // Even for 2 s: withdrawn.
        assert!(turn(&mut balancer, &mut driver, &EVEN));
        assert!(!turn(&mut balancer, &mut driver, &EVEN));
    }

    // The policy fed scripted load reports: its exact decisions, which a run's depend on
    // how its workers were scheduled (core/tests/balance.rs asserts what holds whatever).

    /// As [`report`], timed: the worker was busy `busy_ns` of the second (its true rate is
    /// its records per busy second).
    fn timed(w: u32, window: u64, map: &[u32], records: &[u64], busy_ns: u64) -> LoadReport {
        LoadReport {
            busy_ns,
            ..report(w, window, map, records)
        }
    }

    /// Worker `w`'s load under `map`.
    fn load_of(w: u32, map: &[u32], records: &[u64]) -> u64 {
        (0..map.len()).filter(|b| map[*b] == w).map(|b| records[b]).sum()
    }

    /// Issues the driver's running plan step by step, each complete once the output passes
    /// it, until it is done.
    fn complete(driver: &mut PlanDriver, time: &mut crate::Time, now_s: f64) {
        for _ in 0..1000 {
            if !driver.busy() {
                return;
            }
            *time += 1;
            driver.set_time(*time);
            let _ = driver.poll(*time, *time - 1, now_s);
        }
        panic!("the plan did not complete");
    }

    #[test]
    fn an_even_load_makes_no_decision() {
        const EVEN: [u64; 4] = [50, 50, 50, 50];
        let map = [0, 0, 1, 1];
        for mode in [BalanceMode::Suggest, BalanceMode::Auto] {
            let mut driver = PlanDriver::single(&map, 2);
            let config = BalanceConfig {
                mode,
                ..BalanceConfig::default()
            };
            let mut balancer = Balancer::new(config, false, map.len(), 2);
            for second in 1..=30u64 {
                let reports = (0..2).map(|w| report(w, second, &map, &EVEN)).collect();
                balancer.turn(reports, &mut driver, second as f64);
                assert!(!balancer.suggested && !driver.busy(), "{mode}: second {second}");
            }
            let log = driver.balance_log().summary(mode.to_string());
            assert!(log.decisions.is_empty(), "{mode}: {log:?}");
            assert_eq!(log.measured.len(), 30, "{mode}: every window judged even");
        }
    }

    #[test]
    fn auto_issues_one_plan_that_evens_a_steady_skew_and_none_once_it_is_even() {
        // Worker 0 holds both hot bins: 200 records/s against 20.
        const SKEW: [u64; 4] = [100, 100, 10, 10];
        let map = [0, 0, 1, 1];
        let config = BalanceConfig {
            mode: BalanceMode::Auto,
            ..BalanceConfig::default()
        };
        let mut driver = PlanDriver::single(&map, 2);
        let mut balancer = Balancer::new(config, false, map.len(), 2);
        let (mut second, mut time) = (0u64, 0);
        let turn = |balancer: &mut Balancer, driver: &mut PlanDriver, second: &mut u64| {
            *second += 1;
            let now = driver.primaries();
            let reports = (0..2).map(|w| report(w, *second, &now, &SKEW)).collect();
            balancer.turn(reports, driver, *second as f64);
        };
        // Uneven for `--balance-every` (2 s): the plan starts at the second window.
        turn(&mut balancer, &mut driver, &mut second);
        assert!(!driver.busy());
        turn(&mut balancer, &mut driver, &mut second);
        assert!(driver.busy(), "the balancer's plan runs");
        let decisions = driver.balance_log().summary("auto".into()).decisions;
        assert_eq!(decisions.len(), 1, "{decisions:?}");
        let d = &decisions[0];
        assert!(d.issued && d.workers.is_none(), "{d:?}");
        assert!((d.imbalance_before - 200.0 / 110.0).abs() < 1e-9, "{d:?}");
        assert!(d.imbalance_predicted <= d.imbalance_before * MIN_GAIN, "{d:?}");
        // Nothing is judged while it runs.
        turn(&mut balancer, &mut driver, &mut second);
        complete(&mut driver, &mut time, second as f64);
        // The plan evened the load: as predicted, and no plan follows while it stays so.
        let after = driver.primaries();
        let (w0, w1) = (load_of(0, &after, &SKEW), load_of(1, &after, &SKEW));
        assert_eq!((w0, w1), (110, 110), "{after:?}");
        for _ in 0..20 {
            turn(&mut balancer, &mut driver, &mut second);
            assert!(!driver.busy());
        }
        let log = driver.balance_log().summary("auto".into());
        assert_eq!(log.decisions.len(), 1, "{log:?}");
    }

    #[test]
    fn suggest_mode_proposes_once_and_starts_nothing() {
        const SKEW: [u64; 4] = [100, 100, 10, 10];
        let map = [0, 0, 1, 1];
        let mut driver = PlanDriver::single(&map, 2);
        let mut balancer = Balancer::new(BalanceConfig::default(), false, map.len(), 2);
        for second in 1..=20u64 {
            let reports = (0..2).map(|w| report(w, second, &map, &SKEW)).collect();
            balancer.turn(reports, &mut driver, second as f64);
            assert!(!driver.busy(), "nothing starts");
            assert_eq!(balancer.suggested, second >= 2, "second {second}");
        }
        assert_eq!(driver.primaries(), map, "nothing moved");
        let log = driver.balance_log().summary("suggest".into());
        assert_eq!(log.decisions.len(), 1, "one proposal for a steady skew: {log:?}");
        assert!(!log.decisions[0].issued);
        // The proposal, if started, evens the load.
        let plan = driver.by_load().expect("loads measured");
        let (w0, w1) = (load_of(0, &plan.map, &SKEW), load_of(1, &plan.map, &SKEW));
        assert_eq!((w0, w1), (110, 110), "{plan:?}");
    }

    #[test]
    fn an_elastic_run_spread_wider_than_its_load_needs_is_packed_back_once() {
        // 100 records/s over two workers that each apply 50 records in a busy millisecond:
        // one worker carries it far below half its true rate.
        const LIGHT: [u64; 4] = [25, 25, 25, 25];
        let map = [0, 1, 0, 1];
        let config = BalanceConfig {
            mode: BalanceMode::Auto,
            ..BalanceConfig::default()
        };
        let mut driver = PlanDriver::single(&map, 2);
        driver.set_elastic(true);
        let mut balancer = Balancer::new(config, true, map.len(), 2);
        let mut time = 0;
        for second in 1..=30u64 {
            let now = driver.primaries();
            let reports = (0..2)
                .map(|w| timed(w, second, &now, &LIGHT, 1_000_000))
                .collect();
            balancer.turn(reports, &mut driver, second as f64);
            complete(&mut driver, &mut time, second as f64);
        }
        let log = driver.balance_log().summary("auto".into());
        let sized: Vec<_> = log.decisions.iter().filter(|d| d.workers.is_some()).collect();
        assert_eq!(sized.len(), 1, "{log:?}");
        assert_eq!(sized[0].workers, Some([2, 1]), "{log:?}");
        assert!(sized[0].issued);
        assert_eq!(driver.serving().len(), 1, "packed onto one worker");
        assert_eq!(log.decisions.len(), 1, "nothing more for a steady load: {log:?}");
    }
}
