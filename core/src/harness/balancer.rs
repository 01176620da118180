//! The balancer on worker 0: watches the workers' measured loads ([`Board`]) and, when the
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
use crate::balance::{Balanced, Decision};
use crate::driver::PlanDriver;
use crate::error::ConfigError;
use crate::plan::{Schedule, Strategy};

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
    board: Board,
    /// Since when (seconds into the run) the load has been uneven, if it is.
    uneven_since: Option<f64>,
    /// Whether a plan ran (or failures waited) at the last turn.
    was_busy: bool,
    /// The plan proposed and not taken, if any (`suggest`).
    suggested: Option<Balanced>,
    /// Each latency window's records per worker, until its imbalance is known.
    windows: WindowSums,
    workers: usize,
}

impl Balancer {
    pub(crate) fn new(config: BalanceConfig, bins: usize, workers: usize) -> Self {
        Balancer {
            config,
            board: Board::new(bins, workers, 0.0),
            uneven_since: None,
            was_busy: false,
            suggested: None,
            windows: WindowSums::default(),
            workers,
        }
    }

    /// One turn of worker 0's loop, `now_s` into the measured run: takes the workers'
    /// reports, and once a window closes, gives the driver its loads and decides.
    pub(crate) fn turn(&mut self, reports: Vec<LoadReport>, driver: &mut PlanDriver, now_s: f64) {
        for r in &reports {
            self.board.take(r);
            self.windows.take(r, self.workers);
        }
        if !reports.is_empty() {
            let live: Vec<u32> = driver.live().collect();
            for (window, imbalance) in self.windows.settle(&live) {
                driver.balance_log().window(window, imbalance);
            }
        }
        let busy = driver.busy() || driver.urgent();
        if busy != self.was_busy {
            // A window that saw bins move says neither where their load was nor is: the
            // measure starts afresh as a plan begins and as it ends (once each: this runs on
            // every turn of worker 0's loop, and a reset allocates per bin).
            self.board.reset(now_s);
            self.uneven_since = None;
            self.withdraw("a plan runs", now_s);
            driver.set_loads(None);
            self.was_busy = busy;
        }
        if busy {
            return;
        }
        if !self.board.tick(now_s) {
            return;
        }
        let loads = self.board.loads();
        let busiest = loads
            .as_ref()
            .and_then(|l| (0..l.workers.len()).max_by(|a, b| l.workers[*a].total_cmp(&l.workers[*b])));
        driver.set_loads(loads);
        let Ok(plan) = driver.by_load() else {
            return;
        };
        driver.balance_log().measured(now_s, plan.before);
        tracing::info!(
            target: "megaflux::balance",
            phase = "measured", imbalance = plan.before, predicted = plan.after, run_s = now_s
        );
        if plan.before <= self.config.threshold {
            self.uneven_since = None;
            self.withdraw("the load evened out", now_s);
            return;
        }
        let since = *self
            .uneven_since
            .get_or_insert(now_s - super::loads::WINDOW.as_secs_f64());
        if now_s - since + 1e-9 < self.config.every_s {
            return;
        }
        if plan.moved.is_empty() || plan.after > plan.before * MIN_GAIN {
            // Uneven, but moving bins cannot help enough (one bin may carry it all).
            self.uneven_since = Some(now_s);
            return;
        }
        // A proposal stands until the load evens out or a plan runs: the loads of each window
        // differ a little, and so would the next proposal.
        if self.suggested.is_some() {
            return;
        }
        let issued = self.config.mode == BalanceMode::Auto;
        // Bins go both ways (a hot bin out, cooler ones back): say how many go where.
        let mut to = std::collections::BTreeMap::<u32, usize>::new();
        for w in plan.moved.iter().filter_map(|b| plan.map.get(*b as usize)) {
            *to.entry(*w).or_default() += 1;
        }
        let to: Vec<String> = to.iter().map(|(w, n)| format!("{n} to worker {w}")).collect();
        let reason = format!(
            "worker {} at {:.2}x mean for {:.1} s; {} bins ({}): {}; predicted {:.2}x",
            busiest.map_or("?".to_string(), |w| w.to_string()),
            plan.before,
            now_s - since,
            plan.moved.len(),
            crate::size::human(plan.bytes),
            to.join(", "),
            plan.after
        );
        let decision = Decision {
            at_s: now_s,
            imbalance_before: plan.before,
            imbalance_predicted: plan.after,
            bins: plan.moved.len(),
            bytes: plan.bytes,
            strategy: self.config.strategy.to_string(),
            issued,
        };
        tracing::info!(
            target: "megaflux::balance",
            phase = if issued { "issued" } else { "suggested" },
            imbalance = plan.before, predicted = plan.after, bins = plan.moved.len(), bytes = plan.bytes,
            strategy = %self.config.strategy, reason = %reason, run_s = now_s
        );
        driver.balance_log().decided(decision);
        self.uneven_since = None;
        if issued {
            if let Err(e) = driver.start_balance(self.config.strategy, plan, "balancer", now_s) {
                tracing::warn!(target: "megaflux::balance", phase = "refused", reason = %e, run_s = now_s);
            }
        } else {
            self.suggested = Some(plan);
        }
    }

    /// Drops the standing proposal, if there is one, and says why (the dashboard stops
    /// offering it).
    fn withdraw(&mut self, why: &str, now_s: f64) {
        if self.suggested.take().is_some() {
            tracing::info!(target: "megaflux::balance", phase = "withdrawn", reason = why, run_s = now_s);
        }
    }
}
