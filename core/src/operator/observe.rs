//! What observers can read of each stateful operator on a worker: its frontiers and the
//! size of every bin it holds. The harness samples these and reports them as `tracing`
//! events; the operators only keep the cells current.

use std::cell::RefCell;
use std::fmt;
use std::rc::Rc;

use crate::Time;

/// One bin's size on the worker that holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BinSize {
    pub bin: u32,
    pub keys: u64,
    pub bytes: u64,
}

/// An operator's frontiers on this worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frontiers {
    /// Every update before this time has been applied here.
    pub applied: Time,
    /// The control frontier F has seen (`None` for native operators, which have no control).
    pub control: Option<Time>,
}

/// Appends the size of every bin a worker holds, in bin order.
pub type SizeSampler = Box<dyn Fn(&mut Vec<BinSize>)>;

/// One operator as observers see it.
pub struct OperatorProbe {
    pub name: String,
    pub frontiers: Box<dyn Fn() -> Frontiers>,
    pub sizes: SizeSampler,
}

/// The operators of one worker, in the order they were built.
#[derive(Clone, Default)]
pub struct Observers(Rc<RefCell<Vec<OperatorProbe>>>);

impl Observers {
    pub(crate) fn register(&self, probe: OperatorProbe) {
        self.0.borrow_mut().push(probe);
    }

    /// Calls `f` with every registered operator.
    pub fn each(&self, mut f: impl FnMut(&OperatorProbe)) {
        for probe in self.0.borrow().iter() {
            f(probe);
        }
    }
}

impl fmt::Debug for Observers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<String> = self.0.borrow().iter().map(|p| p.name.clone()).collect();
        f.debug_tuple("Observers").field(&names).finish()
    }
}
