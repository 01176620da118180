//! `megaflux`: run migrating dataflows and watch them.

mod cli;

use std::process::ExitCode;

fn main() -> ExitCode {
    cli::main()
}
