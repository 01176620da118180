//! What the balancer does when the load is uneven: set by `--balance`, changed by the
//! `balance` command while the job runs.

use std::fmt;
use std::str::FromStr;

use crate::error::ConfigError;

/// What the balancer does when the load is uneven.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum BalanceMode {
    /// Nothing: it measures (the timeline's imbalance, the Workers view's shares) but
    /// neither proposes nor issues a plan, and a rejoin's rebalance spreads uniformly.
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
