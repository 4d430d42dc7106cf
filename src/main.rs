//! The `nanolet` binary: a thin shell over the library.

use std::io::IsTerminal;
use std::process::ExitCode;

use nanolet::config::{self, ParseOutcome};

const USAGE: &str = "nanolet: a standalone static-pod runner for edge devices

Usage:
  nanolet run [flags]     run static pods from a manifest directory and/or URL on containerd
  nanolet get pods        list pods of a running agent (kubectl-like; -A, -o wide|json|yaml)
  nanolet describe pod N  one pod with its status and events
  nanolet logs N          a container's log (-c, --previous, --tail N, -f)
  nanolet exec N -- CMD   run a command in a container (CRI ExecSync), exit with its code
  nanolet validate FILE.. check manifests offline, exactly as `run` would
  nanolet images import F import image tarballs into containerd (air-gapped); `images ls`
  nanolet version         print the version
  nanolet help            this text

See `nanolet run --help` for the flags (the kubelet's names and defaults).
";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("run") => run(&args[1..]),
        Some("version" | "--version") => {
            println!(
                "nanolet {} (kubelet API {})",
                nanolet::VERSION,
                nanolet::kubeapi::KUBELET_VERSION
            );
            ExitCode::SUCCESS
        }
        Some(cmd @ ("get" | "describe" | "logs" | "log" | "validate" | "exec" | "images")) => {
            match nanolet::cli::run(cmd, &args[1..]) {
                Some(Ok(())) => ExitCode::SUCCESS,
                Some(Err(e)) if e.downcast_ref::<nanolet::cli::ExitStatus>().is_some() => {
                    let code = e
                        .downcast_ref::<nanolet::cli::ExitStatus>()
                        .map_or(1, |s| s.0);
                    ExitCode::from(u8::try_from(code & 0xff).unwrap_or(1))
                }
                Some(Err(e)) => {
                    eprintln!("{e:#}");
                    ExitCode::FAILURE
                }
                None => ExitCode::from(2),
            }
        }
        Some("help" | "--help" | "-h") | None => {
            print!("{USAGE}\n{}", nanolet::cli::USAGE);
            if args.is_empty() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            }
        }
        Some(other) => {
            eprintln!("nanolet: unknown command {other:?}\n\n{USAGE}");
            ExitCode::from(2)
        }
    }
}

fn run(args: &[String]) -> ExitCode {
    // One malloc arena, before any thread exists (src/malloc.rs: most of the RSS otherwise).
    nanolet::malloc::tune();
    let cfg = match config::parse_run_args(args) {
        Ok(ParseOutcome::Run(cfg)) => cfg,
        Ok(ParseOutcome::Help(text)) => {
            print!("{text}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("nanolet run: {e}");
            return ExitCode::from(2);
        }
    };
    // nanolet's own events at the configured verbosity; libraries (h2, tonic, notify) only warn.
    use tracing_subscriber::prelude::*;
    // RUST_LOG (`nanolet=debug,h2=warn` target syntax) overrides --v when it is set and valid.
    let rust_log = std::env::var("RUST_LOG")
        .ok()
        .filter(|s| !s.trim().is_empty())
        .map(|s| (s.parse::<tracing_subscriber::filter::Targets>(), s));
    let filter = match &rust_log {
        Some((Ok(t), _)) => t.clone(),
        _ => tracing_subscriber::filter::Targets::new()
            .with_target("nanolet", cfg.log_level())
            .with_default(tracing::Level::WARN),
    };
    // Under systemd (stderr connected to the journal) journald adds its own timestamps.
    let journal = std::env::var_os("JOURNAL_STREAM").is_some();
    let ansi = std::io::stderr().is_terminal();
    tracing_subscriber::registry()
        .with(journal.then(|| {
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(false)
                .with_target(false)
                .without_time()
        }))
        .with((!journal).then(|| {
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(ansi)
                .with_target(false)
        }))
        .with(filter)
        .init();
    if let Some((Err(e), s)) = &rust_log {
        tracing::warn!("ignoring RUST_LOG={s:?}: {e}; using --v");
    }
    cfg.log_warnings();
    match nanolet::agent::run(cfg) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let e = anyhow::Error::from(e);
            tracing::error!("nanolet: {e:#}");
            ExitCode::FAILURE
        }
    }
}
