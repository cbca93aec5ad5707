//! The `dropmc` binary: see [`dropmc::cli`].

fn main() -> std::process::ExitCode {
    restore_default_sigpipe();
    dropmc::cli::main_with_args(std::env::args_os())
}

/// Rust ignores SIGPIPE, so writing to a closed pipe (`dropmc report | head`)
/// is an error that `println!` turns into a panic. A command-line filter
/// should instead end quietly when its reader has gone: restore the default
/// action, which terminates the process on the signal.
fn restore_default_sigpipe() {
    #[cfg(unix)]
    // SAFETY: called first in `main`, before any thread exists; it only
    // changes the disposition of one signal to the system default.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}
