//! The commands behind `nanolet`'s argv (Go's cmd/): [`main`] dispatches; `run` is the agent
//! (flags, logging, then `kubelet::run`); the client commands (`get`, `describe`, `logs`,
//! `exec`, `images`, `validate`); the generated man page and completions.

mod admin;
pub mod client;
pub mod docgen;
mod run;
mod stream;

use std::process::ExitCode;

const USAGE: &str = "nanolet: a standalone static-pod runner for edge devices

Usage:
  nanolet run [flags]     run static pods from a manifest directory and/or URL on containerd
  nanolet get pods        list pods of a running agent (kubectl-like; -A, -o wide|json|yaml)
  nanolet describe pod N  one pod with its status and events
  nanolet logs N          a container's log (-c, --previous, --tail N, -f)
  nanolet exec N -- CMD   run a command in a container (CRI ExecSync), exit with its code
  nanolet validate FILE.. check manifests offline, exactly as `run` would
  nanolet images import F import image tarballs into containerd (air-gapped); `images ls`
  nanolet admin-kubeconfig
                          write a kubeconfig for this device's local administrator (kubectl
                          get/exec/port-forward on the kubelet server; run as root)
  nanolet version         print the version
  nanolet completion SH   print the completion script for SH: bash or zsh
  nanolet man             print the man page (roff; `nanolet man | man -l -`)
  nanolet help            this text

See `nanolet run --help` for the flags (the kubelet's names and defaults).
";

/// `nanolet ARGS...` (without the program name): the exit code.
pub fn main(args: Vec<String>) -> ExitCode {
    if args.first().map(String::as_str) != Some("run") {
        // Client commands are Unix filters: a closed pipe (`nanolet get pods | head -1`) ends
        // them quietly. Rust starts with SIGPIPE ignored, so printing would fail with EPIPE
        // and `print!` panics, which aborts the process (panic = "abort"). `run` keeps it
        // ignored: a client closing its connection must never kill the agent.
        // SAFETY: single-threaded at this point; SIG_DFL installs no handler code.
        unsafe {
            let _ = nix::sys::signal::signal(
                nix::sys::signal::Signal::SIGPIPE,
                nix::sys::signal::SigHandler::SigDfl,
            );
        }
    }
    match args.first().map(String::as_str) {
        Some("run") => run::run(&args[1..]),
        Some("version" | "--version") => {
            print!("{}", run::version_text());
            ExitCode::SUCCESS
        }
        Some("admin-kubeconfig") => match self::admin::run(&args[1..]) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("nanolet admin-kubeconfig: {e:#}");
                ExitCode::FAILURE
            }
        },
        Some("man") => {
            print!("{}", self::docgen::man_page());
            ExitCode::SUCCESS
        }
        Some("completion") => match args.get(1).and_then(|s| self::docgen::completion(s)) {
            Some(script) if args.len() == 2 => {
                print!("{script}");
                ExitCode::SUCCESS
            }
            _ => {
                eprintln!(
                    "Usage: nanolet completion SHELL   (SHELL: {})",
                    self::docgen::SHELLS.join(" or ")
                );
                ExitCode::from(2)
            }
        },
        Some(
            cmd @ ("get" | "describe" | "logs" | "log" | "validate" | "exec" | "port-forward"
            | "images"),
        ) => match self::client::run(cmd, &args[1..]) {
            Some(Ok(())) => ExitCode::SUCCESS,
            Some(Err(e)) if e.downcast_ref::<self::client::ExitStatus>().is_some() => {
                let code = e
                    .downcast_ref::<self::client::ExitStatus>()
                    .map_or(1, |s| s.0);
                ExitCode::from(u8::try_from(code & 0xff).unwrap_or(1))
            }
            Some(Err(e)) => {
                eprintln!("{e:#}");
                ExitCode::FAILURE
            }
            None => ExitCode::from(2),
        },
        Some("help" | "--help" | "-h") | None => {
            print!("{USAGE}\n{}", self::client::USAGE);
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
