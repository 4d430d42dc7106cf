//! `nanolet run`: flags and config file, logging (journald priorities when stderr is the
//! journal, control characters escaped), then [`crate::kubelet::run`].

use std::io::IsTerminal;
use std::process::ExitCode;

use crate::kubeletconfig::{self, ParseOutcome};

/// `nanolet version` / `nanolet run --version`: the version, then the build's commit, target
/// triple and features, one per line.
pub(super) fn version_text() -> String {
    format!(
        "nanolet {} (kubelet API {})\ncommit: {}\ntarget: {}\nfeatures: {}\n",
        crate::VERSION,
        crate::KUBELET_VERSION,
        crate::GIT_COMMIT,
        crate::TARGET,
        if crate::FEATURES.is_empty() {
            "none"
        } else {
            crate::FEATURES
        },
    )
}

pub(super) fn run(args: &[String]) -> ExitCode {
    // One malloc arena, before any thread exists (src/malloc.rs: most of the RSS otherwise).
    crate::malloc::tune();
    if args.iter().any(|a| a == "--version") {
        print!("{}", version_text());
        return ExitCode::SUCCESS;
    }
    let cfg = match kubeletconfig::parse_run_args(args) {
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
    // Under systemd, with stderr connected to the journal: `<N>` priority prefixes, no
    // timestamps (journald adds its own), no colours.
    let journal = stderr_is_journal();
    let ansi = std::io::stderr().is_terminal();
    tracing_subscriber::registry()
        .with(journal.then(|| {
            tracing_subscriber::fmt::layer()
                .fmt_fields(EscapedFields)
                .event_format(SdPriority(
                    tracing_subscriber::fmt::format()
                        .with_ansi(false)
                        .with_target(false)
                        .without_time(),
                ))
                .with_writer(std::io::stderr)
                .with_ansi(false)
        }))
        .with((!journal).then(|| {
            tracing_subscriber::fmt::layer()
                .fmt_fields(EscapedFields)
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
    match crate::kubelet::run(cfg) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let e = anyhow::Error::from(e);
            tracing::error!("nanolet: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Whether stderr is journald's stream (sd-daemon(3), systemd.exec(5) `$JOURNAL_STREAM`): the
/// variable holds the stream's `device:inode`, and only when fd 2 still is that file (not, say,
/// a file a wrapper script redirected it to, with the variable inherited) are lines journal
/// records.
fn stderr_is_journal() -> bool {
    use std::os::fd::AsFd;
    use std::os::unix::fs::MetadataExt;
    let Some(stream) = std::env::var_os("JOURNAL_STREAM") else {
        return false;
    };
    let Ok(fd) = std::io::stderr().as_fd().try_clone_to_owned() else {
        return false;
    };
    let Ok(meta) = std::fs::File::from(fd).metadata() else {
        return false;
    };
    stream
        .to_str()
        .is_some_and(|s| journal_stream_is(s, meta.dev(), meta.ino()))
}

/// `$JOURNAL_STREAM` (`<device>:<inode>`, decimal) names the file with this device and inode.
fn journal_stream_is(stream: &str, dev: u64, ino: u64) -> bool {
    stream.split_once(':').is_some_and(|(d, i)| {
        d.parse::<u64>().is_ok_and(|d| d == dev) && i.parse::<u64>().is_ok_and(|i| i == ino)
    })
}

/// The sd-daemon(3) priority of a level: journald takes a line's leading `<N>` as its
/// priority (`SyslogLevelPrefix=`, on by default).
fn sd_priority(level: tracing::Level) -> u8 {
    match level {
        tracing::Level::ERROR => 3, // SD_ERR
        tracing::Level::WARN => 4,  // SD_WARNING
        tracing::Level::INFO => 6,  // SD_INFO
        _ => 7,                     // SD_DEBUG (DEBUG, TRACE)
    }
}

/// An event format that writes each line with its [`sd_priority`] prefix, then the inner
/// format (the fields still through [`EscapedFields`], so a line stays one line and one record).
struct SdPriority<F>(F);

impl<S, N, F> tracing_subscriber::fmt::FormatEvent<S, N> for SdPriority<F>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
    F: tracing_subscriber::fmt::FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut writer: tracing_subscriber::fmt::format::Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        write!(writer, "<{}>", sd_priority(*event.metadata().level()))?;
        self.0.format_event(ctx, writer, event)
    }
}

/// How every log line's fields (the message included, and span fields) are written:
/// tracing-subscriber's default `name=value` format with each control character escaped by
/// `crate::config::write_escaped` (`\n`, `\0`, `\u{1b}`). This is the one place that escapes
/// logs: manifest names, file names, URLs and error texts reach many log statements, as
/// `%Display` fields (which tracing writes raw) or inside messages, and an escape here covers
/// them all, so a NUL or ESC in a manifest never reaches the terminal or journal raw and a
/// newline in a file name never splits a line. (Field names lose their italics on a terminal:
/// the default format writes no styling to this escaping writer.)
struct EscapedFields;

impl<'w> tracing_subscriber::fmt::FormatFields<'w> for EscapedFields {
    fn format_fields<R: tracing_subscriber::field::RecordFields>(
        &self,
        mut writer: tracing_subscriber::fmt::format::Writer<'w>,
        fields: R,
    ) -> std::fmt::Result {
        let mut escaping = Escaping(&mut writer);
        tracing_subscriber::fmt::format::DefaultFields::new().format_fields(
            tracing_subscriber::fmt::format::Writer::new(&mut escaping),
            fields,
        )
    }
}

/// A `fmt::Write` that escapes control characters on the way to the log line.
struct Escaping<'a, 'w>(&'a mut tracing_subscriber::fmt::format::Writer<'w>);

impl std::fmt::Write for Escaping<'_, '_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        crate::config::write_escaped(&mut *self.0, s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn control_characters_in_any_field_are_escaped_and_a_line_stays_one_line() {
        use tracing_subscriber::prelude::*;
        let buf = Buf::default();
        let writer = buf.clone();
        let sub = tracing_subscriber::registry().with(
            tracing_subscriber::fmt::layer()
                .fmt_fields(EscapedFields)
                .with_ansi(false)
                .without_time()
                .with_writer(move || writer.clone()),
        );
        let file = std::path::PathBuf::from("/m/a\nb.yaml");
        let name = "web\0\x1b[31mred";
        tracing::subscriber::with_default(sub, || {
            let span = tracing::info_span!("pod", origin = %file.display());
            let _in = span.enter();
            tracing::warn!(file = %file.display(), pod = %name, debug = ?name, "rejected {name}");
        });
        let out = String::from_utf8(buf.0.lock().unwrap_or_else(|e| e.into_inner()).clone())
            .unwrap_or_default();
        assert_eq!(out.lines().count(), 1, "{out:?}");
        assert!(
            !out.trim_end_matches('\n').contains(['\n', '\0', '\x1b']),
            "{out:?}"
        );
        assert!(out.contains("file=/m/a\\nb.yaml"), "{out}");
        assert!(out.contains("pod{origin=/m/a\\nb.yaml}"), "{out}");
        assert!(out.contains("pod=web\\0\\u{1b}[31mred"), "{out}");
        assert!(out.contains("rejected web\\0"), "{out}");
    }

    #[test]
    fn version_names_commit_target_and_features() {
        let t = version_text();
        let lines: Vec<&str> = t.lines().collect();
        assert!(
            lines[0].starts_with(&format!("nanolet {} ", crate::VERSION)),
            "{t}"
        );
        assert_eq!(lines[1], format!("commit: {}", crate::GIT_COMMIT));
        // build.rs: a 40-hex commit in a git checkout, "unknown" outside one.
        assert!(
            crate::GIT_COMMIT == "unknown"
                || (crate::GIT_COMMIT.len() == 40
                    && crate::GIT_COMMIT.bytes().all(|b| b.is_ascii_hexdigit())),
            "{t}"
        );
        assert_eq!(lines[2], format!("target: {}", crate::TARGET));
        assert!(crate::TARGET.contains("-linux-"), "{t}");
        assert_eq!(
            lines[3],
            if cfg!(feature = "tls") {
                "features: tls"
            } else {
                "features: none"
            }
        );
    }

    #[test]
    fn journal_stream_must_name_stderrs_device_and_inode() {
        assert!(journal_stream_is("64769:123456", 64769, 123456));
        assert!(!journal_stream_is("64769:123457", 64769, 123456));
        assert!(!journal_stream_is("1:123456", 64769, 123456));
        assert!(!journal_stream_is("", 64769, 123456));
        assert!(!journal_stream_is("64769", 64769, 123456));
    }

    #[test]
    fn journal_lines_carry_sd_daemon_priorities_and_no_timestamp_or_colour() {
        use tracing_subscriber::prelude::*;
        let buf = Buf::default();
        let writer = buf.clone();
        let sub = tracing_subscriber::registry()
            .with(
                tracing_subscriber::fmt::layer()
                    .fmt_fields(EscapedFields)
                    .event_format(SdPriority(
                        tracing_subscriber::fmt::format()
                            .with_ansi(false)
                            .with_target(false)
                            .without_time(),
                    ))
                    .with_ansi(false)
                    .with_writer(move || writer.clone()),
            )
            .with(tracing_subscriber::filter::LevelFilter::TRACE);
        tracing::subscriber::with_default(sub, || {
            tracing::error!(pod = "a\nb", "e");
            tracing::warn!("w");
            tracing::info!("i");
            tracing::debug!("d");
            tracing::trace!("t");
        });
        let out = String::from_utf8(buf.0.lock().unwrap_or_else(|e| e.into_inner()).clone())
            .unwrap_or_default();
        let prefixes: Vec<&str> = out.lines().map(|l| &l[..l.len().min(3)]).collect();
        assert_eq!(prefixes, ["<3>", "<4>", "<6>", "<7>", "<7>"], "{out}");
        assert!(!out.contains('\x1b'), "{out:?}");
        assert!(out.lines().all(|l| !l[3..].starts_with("20")), "{out}");
    }
}
