//! The balancer: a skewed run's measured load moves the hot bins by itself, in one plan, and
//! the output is the run's without it, exactly once (a standby's copy too).

use std::time::Duration;

use megaflux::control::ControlHandle;
use megaflux::harness::balancer::{BalanceConfig, BalanceMode};
use megaflux::harness::{RunConfig, run};
use megaflux::skew::Skew;
use megaflux::summary::Summary;

fn config(mode: BalanceMode, replicas: usize) -> RunConfig {
    RunConfig {
        workload: "hashcount".to_string(),
        workers: 2,
        keys: 20_000,
        rate: 40_000,
        duration: Duration::from_secs(5),
        replicas,
        skew: Skew::Zipf(1.5),
        balance: BalanceConfig {
            mode,
            every_s: 1.0,
            ..BalanceConfig::default()
        },
        ..RunConfig::default()
    }
}

fn summary_of(config: RunConfig) -> Summary {
    run(config, ControlHandle::new())
        .expect("the run succeeds")
        .expect("this process hosts worker 0")
}

#[test]
fn a_skewed_run_balances_itself_and_keeps_its_output() {
    for replicas in [1, 2] {
        let plain = summary_of(config(BalanceMode::Off, replicas));
        assert!(plain.balance.is_none());
        let balanced = summary_of(config(BalanceMode::Auto, replicas));
        assert_eq!(balanced.output_digest, plain.output_digest, "replicas {replicas}");
        assert_eq!(balanced.outputs, plain.outputs, "replicas {replicas}");
        let balance = balanced.balance.as_ref().expect("the balancer's summary");
        assert_eq!(balance.mode, "auto");
        let issued: Vec<_> = balance.decisions.iter().filter(|d| d.issued).collect();
        assert!(!issued.is_empty(), "replicas {replicas}: {balance:?}");
        let first = issued[0];
        assert!(first.imbalance_before > 1.2, "{first:?}");
        assert!(
            first.imbalance_predicted <= first.imbalance_before * 0.9,
            "{first:?}"
        );
        assert!(
            balanced
                .migrations
                .iter()
                .any(|m| m.by.as_deref() == Some("balancer") && m.target.starts_with("balance:")),
            "{:?}",
            balanced.migrations
        );
    }
}

#[test]
fn suggest_mode_proposes_and_moves_nothing() {
    let summary = summary_of(config(BalanceMode::Suggest, 1));
    let balance = summary.balance.as_ref().expect("the balancer's summary");
    assert!(!balance.decisions.is_empty(), "{balance:?}");
    assert!(balance.decisions.iter().all(|d| !d.issued));
    assert!(summary.migrations.is_empty(), "{:?}", summary.migrations);
    // One proposal for one steady skew, not one a window.
    assert_eq!(balance.decisions.len(), 1, "{balance:?}");
    // Each latency window says how uneven its records were: the skew the balancer saw.
    let measured: Vec<f64> = summary.timeline.iter().filter_map(|w| w.imbalance).collect();
    assert!(
        measured.len() * 2 >= summary.timeline.len(),
        "{} of {} windows measured",
        measured.len(),
        summary.timeline.len()
    );
    assert!(measured.iter().all(|i| (1.0..=2.0).contains(i)), "{measured:?}");
    assert!(measured.iter().any(|i| *i > 1.2), "{measured:?}");
}
