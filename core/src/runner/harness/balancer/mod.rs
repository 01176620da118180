//! The balancer on worker 0: watches the workers' measured loads (`Board`) and, when the
//! busiest stays above `--balance-threshold` times the mean for `--balance-every` while no
//! plan runs, proposes the `balance` plan (`suggest`) or issues it (`auto`).
//!
//! Hysteresis keeps a steady load from making plan after plan: no plan unless it predicts
//! at least [`MIN_GAIN`] lower imbalance, and nothing is judged on a window that saw a plan
//! (the board starts afresh when one ends).
//!
//! A decision is judged: the first whole window after its plan ended measures the
//! imbalance it achieved, and a plan that achieved less than half the gain it predicted
//! doubles the cooldown (from `--balance-every`, at most [`MAX_COOLDOWN`]) before the next
//! decision; one that achieved at least half sets it back.
//!
//! The operator's word stands: a worker the user drained or left out is neither counted
//! nor given bins ([`PlanDriver::placeable`]), and a plan of the balancer's that the user
//! cancelled is not issued again while the same worker stays the busiest over the
//! threshold (once the load evens out, the hold ends).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::loads::{Board, LoadReport, WindowSums};
pub use crate::balance::BalanceMode;
use crate::balance::{Balanced, Decision, Loads};
use crate::driver::PlanDriver;
use crate::error::ConfigError;
use crate::plan::{Schedule, Strategy};
use crate::scale;

/// The least improvement a balancer's plan must predict: the imbalance after at most this
/// fraction of the imbalance before.
pub const MIN_GAIN: f64 = 0.9;
/// The longest the balancer waits after a plan of its own before it decides again.
pub const MAX_COOLDOWN: Duration = Duration::from_secs(60);
/// `--balance-threshold` unless given.
pub const DEFAULT_THRESHOLD: f64 = 1.2;
/// `--balance-every` unless given.
pub const DEFAULT_EVERY: Duration = Duration::from_secs(2);
/// `--balance-strategy` unless given.
pub const DEFAULT_STRATEGY: Schedule = Schedule {
    strategy: Strategy::Fluid,
    pipelined: false,
};

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
    /// `--balance-max-bytes`: the most bytes of state one placement by load moves (a
    /// decision of the balancer's, a `balance` plan, a rebalance after a rejoin).
    #[serde(default = "no_cap", skip_serializing_if = "is_no_cap")]
    pub max_bytes: u64,
}

fn no_cap() -> u64 {
    u64::MAX
}

fn is_no_cap(bytes: &u64) -> bool {
    *bytes == u64::MAX
}

impl Default for BalanceConfig {
    fn default() -> Self {
        BalanceConfig {
            mode: BalanceMode::default(),
            threshold: DEFAULT_THRESHOLD,
            every_s: DEFAULT_EVERY.as_secs_f64(),
            strategy: DEFAULT_STRATEGY,
            max_bytes: u64::MAX,
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
    /// Since when (seconds into the run) the load has been uneven, if it is, and the
    /// worker that has been the busiest throughout.
    uneven_since: Option<f64>,
    uneven_worker: Option<u32>,
    /// Whether a plan ran (or failures waited) at the last turn.
    was_busy: bool,
    /// Whether a proposal stands (`suggest`; the driver holds it), and since when it was
    /// made or last refreshed.
    suggested: bool,
    suggested_at: f64,
    /// Since when a standing proposal's reason has lapsed (the load even, or moving bins no
    /// help), if it has: one even window of a noisy load does not withdraw it.
    lapsed_since: Option<f64>,
    /// Each latency window's records per worker, until its imbalance is known.
    windows: WindowSums,
    workers: usize,
    /// The busiest worker of the last plan `auto` issued.
    issued_for: Option<u32>,
    /// The user cancelled the plan issued for this busiest worker: none is issued for it
    /// again until the load evens out.
    held_for: Option<u32>,
    /// The issued plan whose achievement is still to be measured: the imbalance before it
    /// and the one predicted.
    judging: Option<(f64, f64)>,
    /// After a plan of its own, no decision before this (seconds into the run).
    quiet_until: f64,
    /// The cooldown the next judged plan starts from, in seconds.
    cooldown_s: f64,
}

/// What the balancer would do with a window's loads.
struct Proposal {
    plan: Balanced,
    /// Sizing: (workers serving now, workers needed, what they were sized by, in words).
    sizing: Option<(usize, usize, String)>,
    /// The busiest serving worker.
    busiest: Option<u32>,
}

impl Balancer {
    pub(crate) fn new(config: BalanceConfig, elastic: bool, bins: usize, workers: usize) -> Self {
        Balancer {
            config,
            elastic,
            board: Board::new(bins, workers, 0.0),
            uneven_since: None,
            uneven_worker: None,
            was_busy: false,
            suggested: false,
            suggested_at: 0.0,
            lapsed_since: None,
            windows: WindowSums::default(),
            workers,
            issued_for: None,
            held_for: None,
            judging: None,
            quiet_until: 0.0,
            cooldown_s: config.every_s,
        }
    }

    /// What it does from now on (the `balance` command): a proposal no longer stands, and
    /// placements after a rejoin go by load unless it is `off`.
    pub(crate) fn set_mode(&mut self, mode: BalanceMode, driver: &mut PlanDriver, now_s: f64) {
        if mode != self.config.mode {
            self.withdraw(driver, &format!("the balancer was set to {mode}"), now_s);
            self.uneven_since = None;
            self.held_for = None;
        }
        self.config.mode = mode;
        driver.set_balancing(mode != BalanceMode::Off);
    }

    /// One turn of worker 0's loop, `now_s` into the measured run: takes the workers'
    /// reports, and once a window closes, gives the driver its loads and decides.
    pub(crate) fn turn(&mut self, reports: Vec<LoadReport>, driver: &mut PlanDriver, now_s: f64) {
        self.take(&reports, driver);
        if driver.take_cancelled_balance() {
            self.held_for = self.issued_for;
        }
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
            // An elastic run's idle workers are not uneven load, nor are workers the user
            // excluded.
            let counted = if self.elastic {
                driver.serving()
            } else {
                driver.placeable()
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
        let live: Vec<u32> = driver.placeable();
        // Sizing compares records: the ones offered, and the workers' true rates.
        let load_of = |w: u32| loads.applied.get(w as usize).copied().unwrap_or(0.0);
        let work = loads.work();
        let work_of = |w: u32| work.get(w as usize).copied().unwrap_or(0.0);
        // Sized by what the sources offer: what the workers applied stops at what they
        // can, and an overloaded set would grow by a step at a time.
        let load = live.iter().map(|w| load_of(*w)).sum::<f64>().max(loads.offered);
        let serving = driver.serving();
        let busiest = serving
            .iter()
            .copied()
            .max_by(|a, b| work_of(*a).total_cmp(&work_of(*b)));
        if !self.elastic {
            let plan = driver.place_by(loads, &live);
            return Proposal {
                plan,
                sizing: None,
                busiest,
            };
        }
        // Per operator, its input over its true rate (DS2); where no operator was timed, the
        // records offered over the workers' true rate.
        let (needed, by) = match scale::busy_needed(loads.offered, &loads.operators) {
            Some(busy) => (
                scale::workers_needed(busy, 1.0, serving.len(), live.len()),
                Some(format!(
                    "{} records/s need {busy:.2} busy seconds per second over {} (each by its own input and true rate)",
                    per_s(loads.offered),
                    match loads.operators.iter().filter(|o| o.busy > 0.0).count() {
                        1 => "1 operator".to_string(),
                        n => format!("{n} operators"),
                    }
                )),
            ),
            None => {
                let rates: Vec<Option<f64>> = serving
                    .iter()
                    .map(|w| loads.true_rates.get(*w as usize).copied().flatten())
                    .collect();
                match scale::true_rate(&rates) {
                    Some(r) => (
                        scale::workers_needed(load, r, serving.len(), live.len()),
                        Some(format!(
                            "{} records/s at a true rate of {} records/s",
                            per_s(load),
                            per_s(r)
                        )),
                    ),
                    None => (serving.len(), None),
                }
            }
        };
        let idle: Vec<u32> = live.iter().copied().filter(|w| !serving.contains(w)).collect();
        let with_load: Vec<(u32, f64)> = serving.iter().map(|w| (*w, load_of(*w))).collect();
        let active = scale::choose(&with_load, &idle, needed);
        let mut plan = scale::onto(&current, &loads.bins, &loads.bytes, &active, &driver.movable());
        let sizing = by
            .filter(|_| needed != serving.len())
            .map(|by| (serving.len(), needed, by));
        plan.workers = sizing.as_ref().map(|(now, needed, _)| [*now, *needed]);
        Proposal {
            plan,
            sizing,
            busiest,
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
        if let Some((before, predicted)) = self.judging.take() {
            self.achieved(driver, (before, predicted, plan.before), now_s);
        }
        if self.config.mode == BalanceMode::Off {
            // Measuring is not deciding.
            return;
        }
        if proposal.sizing.is_none() && plan.before <= self.config.threshold {
            self.uneven_since = None;
            self.held_for = None;
            if self.lapsed(now_s) {
                self.withdraw(driver, "the load evened out", now_s);
            }
            return;
        }
        // A spell of uneven load is one worker's: another busiest starts it afresh.
        if proposal.sizing.is_none() && self.uneven_worker != proposal.busiest {
            self.uneven_since = None;
            self.uneven_worker = proposal.busiest;
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
        if self.held_for.is_some() && self.held_for == proposal.busiest {
            // The user cancelled the plan made for this: not again until the load changes.
            return;
        }
        if now_s + 1e-9 < self.quiet_until {
            return;
        }
        // A proposal stands until the load evens out or a plan runs, refreshed each
        // `--balance-every` it stands: accepted, it moves what the load is now.
        if !self.suggested {
            self.decide(proposal, driver, now_s - since, now_s);
        } else if now_s - self.suggested_at + 1e-9 >= self.config.every_s {
            self.refresh(proposal, driver, now_s);
        }
    }

    /// Replaces the standing proposal with this window's, and says so.
    fn refresh(&mut self, proposal: Proposal, driver: &mut PlanDriver, now_s: f64) {
        let plan = proposal.plan;
        let [serving, needed] = plan.workers.map_or([None, None], |[a, b]| [Some(a), Some(b)]);
        tracing::info!(
            target: "megaflux::balance",
            phase = "refreshed",
            imbalance = plan.before, predicted = plan.after, bins = plan.moved.len(), bytes = plan.bytes,
            serving, needed, strategy = %self.config.strategy, reason = %moves(&plan), run_s = now_s
        );
        driver.balance_log().refreshed(now_s, &plan);
        driver.propose(Some(plan));
        self.suggested_at = now_s;
    }

    /// Proposes or starts the plan (uneven for `uneven_s`), and says so with its reason.
    fn decide(&mut self, proposal: Proposal, driver: &mut PlanDriver, uneven_s: f64, now_s: f64) {
        let Proposal {
            plan,
            sizing,
            busiest,
        } = proposal;
        let why = match sizing {
            Some((now, needed, by)) => format!(
                "{by}: {needed} workers at {:.0} % each, {now} serve",
                scale::TARGET_UTILISATION * 100.0,
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
            imbalance_achieved: None,
        };
        self.uneven_since = None;
        if auto {
            self.issued_for = busiest;
            self.judging = Some((plan.before, plan.after));
            if let Err(e) = driver.start_balance(self.config.strategy, plan, "balancer", now_s) {
                self.judging = None;
                decision.issued = false;
                tracing::warn!(target: "megaflux::balance", phase = "refused", reason = %e, run_s = now_s);
            }
        } else {
            driver.propose(Some(plan));
            self.suggested = true;
            self.suggested_at = now_s;
        }
        driver.balance_log().decided(decision);
    }

    /// Notes what the last plan achieved (`before`, `predicted` and `achieved` imbalance,
    /// measured `now_s`), and sets the cooldown by it.
    fn achieved(
        &mut self,
        driver: &mut PlanDriver,
        (before, predicted, achieved): (f64, f64, f64),
        now_s: f64,
    ) {
        driver.balance_log().achieved(achieved);
        tracing::info!(
            target: "megaflux::balance",
            phase = "achieved", imbalance = achieved, predicted, run_s = now_s
        );
        let (gain, got) = (before - predicted, before - achieved);
        self.cooldown_s = if got < gain / 2.0 {
            (self.cooldown_s * 2.0).min(MAX_COOLDOWN.as_secs_f64())
        } else {
            self.config.every_s
        };
        self.quiet_until = now_s + self.cooldown_s;
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
mod tests;
