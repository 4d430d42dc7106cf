//! The `nanolet` binary: argv to [`nanolet::cmd::main`], nothing else.

fn main() -> std::process::ExitCode {
    nanolet::cmd::main(std::env::args().skip(1).collect())
}
