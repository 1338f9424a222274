//! The `golem-orch` binary: a thin shell over the `golem_orch` library.

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
