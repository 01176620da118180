//! The bins as the views order and select them, who holds each, and what a move would do
//! to every worker's share.

use super::Dash;

impl Dash {
    /// The bins in the order the bins view shows them: by owner, then by number.
    pub fn order(&self) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.bins()).collect();
        order.sort_by_key(|b| (self.owner(*b).unwrap_or(u32::MAX), *b));
        order
    }

    /// The selected bins: from the anchor to the cursor in view order, or the cursor's bin.
    pub fn selection(&self) -> Vec<usize> {
        if self.bins() == 0 {
            return Vec::new();
        }
        let order = self.order();
        let at = |bin: usize| order.iter().position(|b| *b == bin).unwrap_or(0);
        let (a, c) = (at(self.anchor.unwrap_or(self.cursor)), at(self.cursor));
        let mut chosen = order[a.min(c)..=a.max(c)].to_vec();
        chosen.sort_unstable();
        chosen
    }

    /// Moves the cursor `delta` places in view order.
    pub(super) fn step(&mut self, delta: isize) {
        let order = self.order();
        if order.is_empty() {
            return;
        }
        let at = order.iter().position(|b| *b == self.cursor).unwrap_or(0) as isize;
        let to = (at + delta).clamp(0, order.len() as isize - 1);
        self.cursor = order[to as usize];
    }

    /// The operator the bins view shows, and its bins.
    pub fn operator_bins(&self) -> Option<(&String, &Vec<megaflux_probe::model::BinView>)> {
        let ops = &self.view().operators;
        ops.iter().nth(self.operator.min(ops.len().saturating_sub(1)))
    }

    /// The primary of a bin: where the control plane placed it, else where the first
    /// operator that knows it reported it.
    pub fn owner(&self, bin: usize) -> Option<u32> {
        let job = self.view();
        match job.placement.get(bin) {
            Some(holders) => holders.primary,
            None => job
                .operators
                .values()
                .find_map(|bins| bins.get(bin).and_then(|b| b.owner)),
        }
    }

    /// The standby of a bin, if the job keeps one and it has one.
    pub fn standby(&self, bin: usize) -> Option<u32> {
        let job = self.view();
        match job.placement.get(bin) {
            Some(h) => h.standby,
            None => job
                .operators
                .values()
                .find_map(|bins| bins.get(bin).and_then(|b| b.standby)),
        }
    }

    /// Whether a bin of a replicated job has one replica left.
    pub fn degraded(&self, bin: usize) -> bool {
        let job = self.view();
        job.replicated && job.placement.get(bin).is_some_and(|h| h.degraded())
    }

    /// Whether a bin lost every replica.
    pub fn lost(&self, bin: usize) -> bool {
        self.view()
            .placement
            .get(bin)
            .is_some_and(|h| h.primary.is_none())
    }

    /// Every worker's (bins, keys, bytes) summed over operators, after moving `bins` to
    /// `worker` (or as it is, when `moved` is empty).
    pub fn worker_totals(&self, moved: &[usize], worker: usize) -> Vec<(u64, u64, u64)> {
        let mut totals = vec![(0u64, 0u64, 0u64); self.peers().max(1)];
        let bins = self.bins();
        for bin in 0..bins {
            let owner = if moved.contains(&bin) {
                Some(worker as u32)
            } else {
                self.owner(bin)
            };
            let Some(owner) = owner else { continue };
            let Some(t) = totals.get_mut(owner as usize) else {
                continue;
            };
            // Saturating: the sizes come from the network.
            t.0 = t.0.saturating_add(1);
            for ops in self.view().operators.values() {
                if let Some(b) = ops.get(bin) {
                    t.1 = t.1.saturating_add(b.keys);
                    t.2 = t.2.saturating_add(b.bytes);
                }
            }
        }
        totals
    }
}
