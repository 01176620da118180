//! SIGINT and SIGTERM in a headless run: the first stops the job as `q` does on the
//! dashboard (the summary, every output of the times before the stop written and the file
//! flushed); a second kills the process at once.

use megaflux::control::ControlHandle;

/// Takes SIGINT and SIGTERM for the rest of the process's life. On a process other than
/// the first of a cluster a stop cannot be asked for (process 0 decides when the job ends):
/// the first signal says so, the second kills.
#[cfg(unix)]
pub(crate) fn stop_on_signals(control: ControlHandle, first_process: bool) -> std::io::Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    use signal_hook::iterator::Signals;

    let mut signals = Signals::new([SIGINT, SIGTERM])?;
    std::thread::Builder::new()
        .name("megaflux-signals".into())
        .spawn(move || {
            let mut seen = false;
            for signal in signals.forever() {
                let name = if signal == SIGINT { "SIGINT" } else { "SIGTERM" };
                if seen {
                    eprintln!("megaflux: {name} again: killed at once");
                    std::process::exit(128 + signal);
                }
                seen = true;
                if first_process {
                    eprintln!(
                        "megaflux: {name}: stopping; every output of the times before the stop is written (a second signal kills at once)"
                    );
                    control.stop();
                } else {
                    eprintln!(
                        "megaflux: {name}: this process runs on to the job's end, which process 0 decides (q there, or a signal to it); a second signal kills this process at once"
                    );
                }
            }
        })?;
    Ok(())
}

/// Elsewhere signals keep their default action.
#[cfg(not(unix))]
pub(crate) fn stop_on_signals(_control: ControlHandle, _first_process: bool) -> std::io::Result<()> {
    Ok(())
}
