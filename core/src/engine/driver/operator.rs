//! The operator's word on where bins may go. A worker the user drained (`drain:W`) or left
//! out (`pack:N`) is *excluded*: no placement the driver or the balancer makes on its own (a
//! `balance` plan, a rebalance after a rejoin) puts a bin on it, and the balancer does not
//! count it as idle, until a plan of the user's gives it bins again (`uniform`, a wider
//! `pack`, a map or a move that puts a primary on it). A plan of the balancer's that the
//! user cancelled is not made again for the same reason (the same busiest worker) until the
//! load has evened out. The user may also pin bins where they are (no placement by load
//! moves them), exclude or include a worker by command, and cap the bytes a placement by
//! load moves at once (`--balance-max-bytes`).

use super::PlanDriver;
use crate::balance::Movable;
use crate::error::CommandError;
use crate::plan::Target;

impl PlanDriver {
    /// Notes what a plan the user started to `target` says of the workers.
    pub(super) fn heed(&mut self, target: &Target) {
        match target {
            Target::Drain(w) => self.set_excluded(*w as u32, true),
            Target::Pack(n) => {
                for w in 0..self.workers as u32 {
                    self.set_excluded(w, w as usize >= *n);
                }
            }
            Target::Uniform => self.excluded.fill(false),
            Target::Map(map) => {
                for w in map.iter() {
                    self.set_excluded(*w, false);
                }
            }
            Target::Balance => {}
        }
    }

    pub(super) fn set_excluded(&mut self, worker: u32, excluded: bool) {
        if let Some(e) = self.excluded.get_mut(worker as usize) {
            *e = excluded;
        }
    }

    /// The workers the user excluded (drained or left out), in order.
    pub fn excluded(&self) -> Vec<u32> {
        (0..self.workers as u32)
            .filter(|w| self.excluded[*w as usize])
            .collect()
    }

    /// The live workers that placements made by the driver or the balancer may use: those
    /// the user has not excluded (every live one, if the user excluded them all).
    pub fn placeable(&self) -> Vec<u32> {
        let live: Vec<u32> = self.live().collect();
        let kept: Vec<u32> = live
            .iter()
            .copied()
            .filter(|w| !self.excluded[*w as usize])
            .collect();
        if kept.is_empty() { live } else { kept }
    }

    /// Pins `bins` where they are (or frees them): see [`Movable::pinned`].
    pub(super) fn pin(&mut self, bins: &[usize], pinned: bool) -> Result<(), CommandError> {
        let count = self.placement().len();
        if let Some(&bin) = bins.iter().find(|b| **b >= count) {
            return Err(CommandError::UnknownBin { bin, bins: count });
        }
        if self.pinned.len() < count {
            self.pinned.resize(count, false);
        }
        for b in bins {
            self.pinned[*b] = pinned;
        }
        Ok(())
    }

    /// The bins the user pinned, in order.
    pub fn pinned(&self) -> Vec<u32> {
        (0..self.pinned.len() as u32)
            .filter(|b| self.pinned[*b as usize])
            .collect()
    }

    /// Caps the bytes one placement by load moves (`--balance-max-bytes`).
    pub fn set_max_bytes(&mut self, max_bytes: u64) {
        self.max_bytes = max_bytes;
    }

    /// What placements by load may move: the bins not pinned, up to the byte cap.
    pub fn movable(&self) -> Movable<'_> {
        Movable {
            pinned: &self.pinned,
            max_bytes: self.max_bytes,
        }
    }

    /// Whether the user cancelled a plan of the balancer's since the last call.
    pub fn take_cancelled_balance(&mut self) -> bool {
        std::mem::take(&mut self.balance_cancelled)
    }
}

#[cfg(test)]
mod tests {
    use crate::config::uniform;
    use crate::driver::PlanDriver;
    use crate::error::CommandError;
    use crate::plan::{Schedule, Strategy, Target};

    const ALL_AT_ONCE: Schedule = Schedule {
        strategy: Strategy::AllAtOnce,
        pipelined: false,
    };

    #[test]
    fn a_drain_or_a_pack_excludes_until_the_user_gives_the_worker_bins_again() {
        let mut d = PlanDriver::single(&uniform(8, 4), 4);
        assert_eq!(d.placeable(), [0, 1, 2, 3]);
        d.start(ALL_AT_ONCE, &Target::Drain(2), 0.0).unwrap();
        assert_eq!(d.excluded(), [2]);
        assert_eq!(d.placeable(), [0, 1, 3]);
        d.heed(&Target::Pack(2));
        assert_eq!(d.excluded(), [2, 3]);
        d.heed(&Target::Map(vec![0, 3, 0, 1, 0, 1, 0, 1]));
        assert_eq!(d.excluded(), [2]);
        d.heed(&Target::Balance);
        assert_eq!(d.excluded(), [2]);
        d.heed(&Target::Uniform);
        assert!(d.excluded().is_empty());
    }

    #[test]
    fn commands_exclude_include_and_pin() {
        use crate::control::Command;
        let mut d = PlanDriver::single(&uniform(8, 4), 4);
        d.command(
            Command::Exclude {
                worker: 1,
                excluded: true,
            },
            0.0,
        )
        .unwrap();
        assert_eq!(d.placeable(), [0, 2, 3]);
        d.command(
            Command::Exclude {
                worker: 1,
                excluded: false,
            },
            0.0,
        )
        .unwrap();
        assert_eq!(d.placeable(), [0, 1, 2, 3]);
        assert!(
            d.command(
                Command::Exclude {
                    worker: 4,
                    excluded: true
                },
                0.0
            )
            .is_err()
        );
        d.command(
            Command::Pin {
                bins: vec![1, 5],
                pinned: true,
            },
            0.0,
        )
        .unwrap();
        assert_eq!(d.pinned(), [1, 5]);
        d.command(
            Command::Pin {
                bins: vec![5],
                pinned: false,
            },
            0.0,
        )
        .unwrap();
        assert_eq!(d.pinned(), [1]);
        assert_eq!(
            d.command(
                Command::Pin {
                    bins: vec![8],
                    pinned: true
                },
                0.0
            ),
            Err(CommandError::UnknownBin { bin: 8, bins: 8 })
        );
        assert_eq!(d.pinned(), [1], "a refused pin pins nothing");
    }

    #[test]
    fn a_refused_plan_excludes_nothing() {
        let mut d = PlanDriver::single(&uniform(8, 4), 4);
        assert!(d.start(ALL_AT_ONCE, &Target::Drain(9), 0.0).is_err());
        assert!(d.excluded().is_empty());
    }
}
