//! `megaflux`: run migrating dataflows and watch them.

use std::process::ExitCode;

fn main() -> ExitCode {
    megaflux_tui::main(megaflux::workload::builtin())
}
