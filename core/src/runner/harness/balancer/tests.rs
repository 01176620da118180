//! The balancer's policy fed scripted load reports: its exact decisions.

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
        ended_ns: window * 1_000_000_000,
        bins,
        ..LoadReport::default()
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
    assert_eq!(
        log.decisions[0].imbalance_achieved,
        Some(1.0),
        "as predicted: {log:?}"
    );
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

/// `auto` under `config`'s defaults.
fn auto() -> BalanceConfig {
    BalanceConfig {
        mode: BalanceMode::Auto,
        ..BalanceConfig::default()
    }
}

#[test]
fn a_worker_the_user_drained_is_neither_counted_nor_given_bins() {
    use crate::plan::Target;
    let schedule = Schedule {
        strategy: Strategy::AllAtOnce,
        pipelined: false,
    };
    let map = [0, 1, 2, 0, 1, 2];
    let mut driver = PlanDriver::single(&map, 3);
    let mut balancer = Balancer::new(auto(), false, map.len(), 3);
    let mut time = 0;
    driver
        .start(schedule, &Target::Drain(2), 0.0)
        .expect("the drain starts");
    complete(&mut driver, &mut time, 0.0);
    let drained = driver.primaries();
    assert!(!drained.contains(&2), "{drained:?}");
    // An even load on workers 0 and 1: worker 2 is no idle worker to spread onto.
    let even = [10; 6];
    let mut second = 0u64;
    for _ in 0..10 {
        second += 1;
        let now = driver.primaries();
        let reports = (0..3).map(|w| report(w, second, &now, &even)).collect();
        balancer.turn(reports, &mut driver, second as f64);
        assert!(!driver.busy(), "second {second}: no plan for an even load");
    }
    // A skew between them is evened between them.
    let bins_of_0: Vec<usize> = (0..6).filter(|b| drained[*b] == 0).collect();
    let mut skew = [1u64; 6];
    for b in &bins_of_0 {
        skew[*b] = 100;
    }
    for _ in 0..10 {
        second += 1;
        let now = driver.primaries();
        let reports = (0..3).map(|w| report(w, second, &now, &skew)).collect();
        balancer.turn(reports, &mut driver, second as f64);
        complete(&mut driver, &mut time, second as f64);
    }
    let log = driver.balance_log().summary("auto".into());
    assert!(!log.decisions.is_empty(), "the skew is evened: {log:?}");
    assert!(!driver.primaries().contains(&2), "{:?}", driver.primaries());
    // Every window was measured over the two workers the user left serving.
    assert!(
        log.measured.iter().take(10).all(|[_, i]| (*i - 1.0).abs() < 1e-9),
        "{log:?}"
    );
}

#[test]
fn a_plan_the_user_cancelled_is_not_issued_again_until_the_load_evens_out() {
    const SKEW: [u64; 4] = [100, 100, 10, 10];
    const EVEN: [u64; 4] = [50, 50, 50, 50];
    let map = [0, 0, 1, 1];
    let mut driver = PlanDriver::single(&map, 2);
    let mut balancer = Balancer::new(auto(), false, map.len(), 2);
    let (mut second, mut time) = (0u64, 0);
    let mut turn = |balancer: &mut Balancer, driver: &mut PlanDriver, records: &[u64]| {
        second += 1;
        let now = driver.primaries();
        let reports = (0..2).map(|w| report(w, second, &now, records)).collect();
        balancer.turn(reports, driver, second as f64);
        second
    };
    turn(&mut balancer, &mut driver, &SKEW);
    let at = turn(&mut balancer, &mut driver, &SKEW);
    assert!(driver.busy(), "the balancer's plan runs");
    driver
        .command(crate::control::Command::CancelPlan, at as f64)
        .expect("the user cancels it");
    complete(&mut driver, &mut time, at as f64);
    assert_eq!(driver.primaries(), map, "cancelled before a step went out");
    for _ in 0..10 {
        let at = turn(&mut balancer, &mut driver, &SKEW);
        assert!(
            !driver.busy(),
            "second {at}: the same skew, the plan not issued again"
        );
    }
    assert_eq!(driver.balance_log().summary("auto".into()).decisions.len(), 1);
    // The load evened out and skewed again: a new reason, a new plan.
    turn(&mut balancer, &mut driver, &EVEN);
    turn(&mut balancer, &mut driver, &SKEW);
    turn(&mut balancer, &mut driver, &SKEW);
    assert!(driver.busy(), "a plan for the new skew");
    assert_eq!(driver.balance_log().summary("auto".into()).decisions.len(), 2);
}

#[test]
fn an_uneven_spell_is_one_worker_busiest_throughout() {
    // Worker 0 busiest, then worker 1, by turns: each window uneven, no spell of 2 s.
    const ZERO_BUSY: [u64; 4] = [100, 100, 10, 10];
    const ONE_BUSY: [u64; 4] = [10, 10, 100, 100];
    let map = [0, 0, 1, 1];
    let mut driver = PlanDriver::single(&map, 2);
    let mut balancer = Balancer::new(auto(), false, map.len(), 2);
    for second in 1..=10u64 {
        let records = if second % 2 == 0 { &ZERO_BUSY } else { &ONE_BUSY };
        let reports = (0..2).map(|w| report(w, second, &map, records)).collect();
        balancer.turn(reports, &mut driver, second as f64);
        assert!(!driver.busy(), "second {second}: no worker was busiest for 2 s");
    }
    let log = driver.balance_log().summary("auto".into());
    assert!(log.decisions.is_empty(), "{log:?}");
    assert!(
        log.measured.iter().all(|[_, i]| *i > 1.2),
        "every window uneven: {log:?}"
    );
}

#[test]
fn a_plan_that_achieved_less_than_half_its_gain_doubles_the_cooldown() {
    // Whatever worker 0 holds is hot: moving bins off it achieves nothing.
    let map = [0, 0, 1, 1];
    let mut driver = PlanDriver::single(&map, 2);
    let mut balancer = Balancer::new(auto(), false, map.len(), 2);
    let mut time = 0;
    for second in 1..=20u64 {
        let now = driver.primaries();
        let records: Vec<u64> = now.iter().map(|w| if *w == 0 { 100 } else { 10 }).collect();
        let reports = (0..2).map(|w| report(w, second, &now, &records)).collect();
        balancer.turn(reports, &mut driver, second as f64);
        complete(&mut driver, &mut time, second as f64);
    }
    let log = driver.balance_log().summary("auto".into());
    let d = &log.decisions;
    assert!(d.len() >= 2, "{log:?}");
    let achieved = d[0].imbalance_achieved.expect("measured after the plan");
    assert!(achieved > d[0].imbalance_predicted + 0.1, "{log:?}");
    // The cooldown doubled from 2 s to 4 s after the first judgement.
    assert!(d[1].at_s >= d[0].at_s + 4.0, "{log:?}");
    if let Some(third) = d.get(2) {
        assert!(third.at_s >= d[1].at_s + 8.0, "and again, to 8 s: {log:?}");
    }
}

#[test]
fn off_measures_every_window_and_decides_nothing_until_set_to_auto() {
    const SKEW: [u64; 4] = [100, 100, 10, 10];
    let map = [0, 0, 1, 1];
    let config = BalanceConfig {
        mode: BalanceMode::Off,
        ..BalanceConfig::default()
    };
    let mut driver = PlanDriver::single(&map, 2);
    let mut balancer = Balancer::new(config, false, map.len(), 2);
    let mut second = 0u64;
    let mut turn = |balancer: &mut Balancer, driver: &mut PlanDriver| {
        second += 1;
        let now = driver.primaries();
        let reports = (0..2).map(|w| report(w, second, &now, &SKEW)).collect();
        balancer.turn(reports, driver, second as f64);
        second
    };
    let mut at = 0;
    for _ in 0..10 {
        at = turn(&mut balancer, &mut driver);
        assert!(!balancer.suggested && !driver.busy());
    }
    let log = driver.balance_log().summary("off".into());
    assert!(log.decisions.is_empty(), "{log:?}");
    assert_eq!(log.measured.len(), 10, "every window measured: {log:?}");
    assert!(log.measured.iter().all(|[_, i]| (i - 200.0 / 110.0).abs() < 1e-9));
    assert!(
        (1..=10).all(|w| driver.balance().of_window(w as usize).is_some()),
        "each latency window's imbalance"
    );
    // Turned on while the job runs: the skew has been there all along, so the next whole
    // window decides.
    balancer.set_mode(BalanceMode::Auto, &mut driver, at as f64);
    let mut started = None;
    for _ in 0..3 {
        let at = turn(&mut balancer, &mut driver);
        if driver.busy() {
            started = Some(at);
            break;
        }
    }
    assert!(
        started.is_some(),
        "auto issued no plan: {:?}",
        driver.balance_log().summary("auto".into())
    );
}

#[test]
fn a_standing_proposal_is_refreshed_each_interval_with_the_load_of_now() {
    // Worker 0's bins are hot, then, from second 5, worker 1's.
    const FIRST: [u64; 4] = [100, 100, 10, 10];
    const THEN: [u64; 4] = [10, 10, 100, 100];
    let map = [0, 0, 1, 1];
    let mut driver = PlanDriver::single(&map, 2);
    let mut balancer = Balancer::new(BalanceConfig::default(), false, map.len(), 2);
    for second in 1..=12u64 {
        let records = if second < 5 { FIRST } else { THEN };
        let reports = (0..2).map(|w| report(w, second, &map, &records)).collect();
        balancer.turn(reports, &mut driver, second as f64);
    }
    assert!(balancer.suggested, "a proposal stands");
    let log = driver.balance_log().summary("suggest".into());
    assert_eq!(log.decisions.len(), 1, "one proposal, refreshed: {log:?}");
    assert!(
        log.decisions[0].at_s > 5.0,
        "refreshed after the load changed: {log:?}"
    );
    // Accepted now, it moves worker 1's load, not the one it was first made for.
    let fluid = DEFAULT_STRATEGY;
    driver
        .command(
            crate::control::Command::StartPlan {
                schedule: fluid,
                target: crate::plan::Target::Balance,
            },
            12.0,
        )
        .expect("the proposal starts");
    let mut time = 0;
    complete(&mut driver, &mut time, 12.0);
    let after = driver.primaries();
    assert_eq!(
        (load_of(0, &after, &THEN), load_of(1, &after, &THEN)),
        (110, 110),
        "{after:?}"
    );
}
