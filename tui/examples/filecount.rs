//! `filecount`: hashcount's logic (a hash map of counters per bin, outputs `(key, count)`) on
//! keys read from a file, one decimal `u64` per line, in one binary with the built-in
//! workloads, so that `bench` sets the file source against the generator in one sitting:
//!
//! ```sh
//! python3 -c "import random; r = random.Random(42); print('\n'.join(str(r.getrandbits(64) % 4000000) for _ in range(12000000)))" > keys.txt
//! cargo run --release -p megaflux-tui --example filecount -- bench --workloads hashcount,filecount \
//!     --input keys.txt --no-preload --variants none --rates 400000 --duration 20
//! ```

use std::process::ExitCode;

use megaflux::job::{Job, Operators};
use megaflux::timely::dataflow::StreamVec;
use megaflux::{Bin, RunConfig, Source, Time, bins::mix64};
use rustc_hash::FxHashMap;

struct FileCount;

impl Job for FileCount {
    type In = u64;
    type Out = (u64, u64);

    fn name(&self) -> &str {
        "filecount"
    }

    fn source(&self, _run: &RunConfig) -> Source<u64> {
        Source::lines(|line: &str| line.trim().parse::<u64>())
    }

    fn dataflow<'s>(
        &self,
        keys: StreamVec<'s, Time, u64>,
        ops: &Operators<'s>,
    ) -> StreamVec<'s, Time, (u64, u64)> {
        // The bin key hashcount gives a key.
        ops.unary(
            keys,
            "filecount",
            |k: &u64| mix64(*k),
            |_t, bin: &mut Bin<FxHashMap<u64, u64>>, keys, out| {
                for k in keys.drain(..) {
                    let c = bin.state.entry(k).or_insert(0);
                    *c += 1;
                    out.push((k, *c));
                }
            },
        )
    }
}

fn main() -> ExitCode {
    megaflux_tui::main(megaflux::workload::builtin().with(FileCount))
}
