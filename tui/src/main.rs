//! `megaflux`: run migrating dataflows and watch them.

mod bench;
mod cli;
mod observe;
mod report;

use std::process::ExitCode;

fn main() -> ExitCode {
    cli::main()
}

// Memory a worker frees after shipping bins away goes back to the system promptly, so
// migrations do not ratchet up the job's resident memory (glibc keeps it per thread arena).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
