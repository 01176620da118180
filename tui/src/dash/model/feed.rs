//! What the header and the status bar say of the feed: the job's throughput, the events
//! lost and where, and whether the feed has gone quiet.

use super::{Connection, Dash};

/// A live view with no event for this long says it is stale.
pub const STALE_AFTER_S: f64 = 3.0;

impl Dash {
    /// The dashboard's clock moved to `at`. A live job's clock moves with it between
    /// events, so that elapsed times and ETAs do not freeze while the feed is quiet (the
    /// next event's clock takes over).
    pub(super) fn tick(&mut self, at: f64) {
        let step = (at - self.tick).max(0.0);
        self.tick = self.tick.max(at);
        if matches!(self.connection, Connection::Live(_)) {
            self.now_s += step;
        }
    }

    /// Seconds since a live feed last said anything, once that is [`STALE_AFTER_S`] or
    /// more (a trace or a closed feed is never stale: it says so otherwise).
    pub fn stale_s(&self) -> Option<f64> {
        let quiet = self.tick - self.heard_at;
        (matches!(self.connection, Connection::Live(_)) && quiet >= STALE_AFTER_S).then_some(quiet)
    }

    /// Events the job lost before they reached its collector (missing from the trace and
    /// from every view), over every process (saturating: the counts come from the network).
    pub fn job_lost(&self) -> u64 {
        self.view()
            .dropped
            .iter()
            .filter(|(place, _)| place.ends_with(" queue"))
            .fold(0u64, |sum, (_, n)| sum.saturating_add(*n))
    }

    /// Events this view missed: those its queue had no room for, and those the collector
    /// dropped for it.
    pub fn view_lost(&self) -> u64 {
        let collector = self.subscriber.map_or(0, |id| {
            let place = format!(" subscriber {id}");
            self.view()
                .dropped
                .iter()
                .filter(|(p, _)| p.ends_with(&place))
                .fold(0u64, |sum, (_, n)| sum.saturating_add(*n))
        });
        self.lost.saturating_add(collector)
    }

    /// Records per second the job's sources sent, and (when the job says) its stateful
    /// operators applied, over every worker's last interval.
    pub fn throughput(&self) -> (f64, Option<f64>) {
        let workers = self.view().workers.values();
        let sent = workers.clone().map(|w| w.records_per_s).sum();
        let applied = workers
            .map(|w| w.applied_per_s)
            .try_fold(0.0, |sum, a| a.map(|a| sum + a));
        (sent, applied)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dash::model::Msg;

    #[test]
    fn a_quiet_live_feed_is_stale_and_its_clock_goes_on() {
        let mut d = Dash::new(Connection::Live("test".into()), None);
        d.update(Msg::Tick(1.0));
        d.update(Msg::Events(Vec::new()));
        d.update(Msg::Tick(2.0));
        assert_eq!(d.stale_s(), None);
        d.update(Msg::Tick(1.0 + STALE_AFTER_S));
        assert_eq!(d.stale_s(), Some(STALE_AFTER_S));
        assert_eq!(d.now_s, 1.0 + STALE_AFTER_S);
        let mut trace = Dash::new(Connection::Trace("t".into()), None);
        trace.update(Msg::Tick(100.0));
        assert_eq!(trace.stale_s(), None);
        assert_eq!(trace.now_s, 0.0);
    }
}
