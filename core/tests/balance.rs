//! The balancer: a skewed run's measured load moves the hot bins by itself, in one plan, and
//! the output is the run's without it, exactly once (a standby's copy too).

use std::sync::OnceLock;
use std::time::Duration;

use megaflux::control::ControlHandle;
use megaflux::harness::balancer::{BalanceConfig, BalanceMode};
use megaflux::harness::{RunConfig, WorkerAt};
use megaflux::job::ParamValues;
use megaflux::plan::MigrationSpec;
use megaflux::summary::Summary;
use megaflux::workload::run;
use proptest::prelude::*;

fn config(mode: BalanceMode, replicas: usize) -> RunConfig {
    RunConfig {
        workload: "hashcount".to_string(),
        workers: 2,
        rate: 40_000,
        duration: Duration::from_secs(5),
        replicas,
        params: ParamValues::new().with("keys", 20_000).with("skew", "zipf:1.5"),
        balance: BalanceConfig {
            mode,
            every_s: 1.0,
            ..BalanceConfig::default()
        },
        ..RunConfig::default()
    }
}

/// The elastic test's offered load, records per second.
const LIGHT_RATE: u64 = 10_000;

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

/// A run that starts packed is elastic: spread by a person onto both workers while its load
/// needs one, the balancer packs it back (DS2's scale-in, sized by the true rates), and the
/// output is the plain run's.
#[test]
fn an_elastic_run_packs_back_what_its_load_does_not_need() {
    let packed = RunConfig {
        placement: Some("pack:1".parse().unwrap()),
        // One step: a fluid spread of 128 bins can outlast a debug build's run on a busy
        // machine, leaving no window without a plan for the balancer to measure.
        migrations: vec!["all-at-once@0.5:uniform".parse().unwrap()],
        // A load one worker carries at well under half its true rate even in a debug build
        // on a machine busy with other tests: at 40k records/s a loaded run measured its one
        // worker too slow to pack onto and evened the skew instead.
        rate: LIGHT_RATE,
        ..config(BalanceMode::Auto, 1)
    };
    let plain = summary_of(RunConfig {
        rate: LIGHT_RATE,
        ..config(BalanceMode::Off, 1)
    });
    let elastic = summary_of(packed);
    assert_eq!(elastic.output_digest, plain.output_digest);
    assert_eq!(elastic.outputs, plain.outputs);
    let balance = elastic.balance.as_ref().expect("the balancer's summary");
    let sized: Vec<_> = balance.decisions.iter().filter(|d| d.workers.is_some()).collect();
    assert_eq!(sized.len(), 1, "{balance:?}");
    assert_eq!(sized[0].workers, Some([2, 1]), "{balance:?}");
    let last = elastic.migrations.last().expect("the balancer's plan");
    assert_eq!(last.by.as_deref(), Some("balancer"));
    assert!(
        last.target.starts_with("balance: 2 to 1 workers"),
        "{}",
        last.target
    );
}

/// The job the property below runs: three workers, two replicas, a steep skew.
fn replicated(mode: BalanceMode) -> RunConfig {
    RunConfig {
        workers: 3,
        duration: Duration::from_secs(4),
        ..config(mode, 2)
    }
}

/// The output of [`replicated`] with nothing moving and nothing failing.
fn plain_output() -> &'static (String, u64) {
    static PLAIN: OnceLock<(String, u64)> = OnceLock::new();
    PLAIN.get_or_init(|| {
        let s = summary_of(replicated(BalanceMode::Off));
        (s.output_digest, s.outputs)
    })
}

/// `PROPTEST_CASES` when set (for long runs), else `default`.
fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(default)
}

/// A balancer's settings, a worker that may fail (and rejoin) and a plan a person may start,
/// each at a time of its own.
fn arb_schedule() -> impl Strategy<Value = RunConfig> {
    (
        (0.5f64..1.5, 1.05f64..1.5),
        proptest::option::of((1usize..3, 0.3f64..3.0, proptest::option::of(0.2f64..1.5))),
        proptest::option::of((0usize..3, 0.2f64..3.5)),
    )
        .prop_map(|((every_s, threshold), failure, migration)| {
            let mut c = replicated(BalanceMode::Auto);
            c.balance.every_s = every_s;
            c.balance.threshold = threshold;
            if let Some((worker, at_secs, rejoin)) = failure {
                c.failures = vec![WorkerAt { worker, at_secs }];
                if let Some(after) = rejoin {
                    c.rejoins = vec![WorkerAt {
                        worker,
                        at_secs: at_secs + after,
                    }];
                }
            }
            if let Some((which, at)) = migration {
                let spec = [
                    "fluid@{}:uniform",
                    "batched:4@{}:pack:2",
                    "all-at-once@{}:balance",
                ][which];
                let spec: MigrationSpec = spec
                    .replace("{}", &format!("{at:.2}"))
                    .parse()
                    .expect("a valid spec");
                c.migrations = vec![spec];
            }
            c
        })
}

proptest! {
    // Each case is a 4-second run: a few by default, more with PROPTEST_CASES.
    #![proptest_config(ProptestConfig { cases: cases(4), max_shrink_iters: 8, ..ProptestConfig::default() })]

    /// Exactly once whatever the balancer does amid failures, rejoins and other plans: the
    /// output of the run with nothing moving.
    #[test]
    fn the_balancer_amid_failures_and_moves_keeps_the_output(config in arb_schedule()) {
        let what = format!("{:?} {:?} {:?} {:?}", config.balance, config.failures, config.rejoins, config.migrations);
        let summary = summary_of(config);
        let (digest, outputs) = plain_output();
        prop_assert_eq!(&summary.output_digest, digest, "{}", what);
        prop_assert_eq!(summary.outputs, *outputs, "{}", what);
    }
}
