//! The `dropmc` binary: see [`dropmc::cli`].

fn main() -> std::process::ExitCode {
    dropmc::cli::main_with_args(std::env::args_os())
}
