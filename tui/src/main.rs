//! `megaflux`: run migrating dataflows and watch them.

use std::process::ExitCode;

fn main() -> ExitCode {
    megaflux_tui::cli::main()
}

// Memory a worker frees after shipping bins away goes back to the system promptly, so
// migrations do not ratchet up the job's resident memory (glibc keeps it per thread arena).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
