//! Container logs: the CRI log format (`<RFC3339Nano> <stream> <P|F> <text>`) parsed and
//! reassembled, `kubectl logs` options, and `follow` across rotations.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::{ApiOutcome, QueryError, bad_request, fail, not_found};
use crate::nodestatus::NodeContext;
use crate::status::StatusStore;
use crate::timeutil::parse_rfc3339;

/// One line of a CRI log file: `<RFC3339Nano> <stream> <tag> <content>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CriLine<'a> {
    pub time: &'a str,
    pub stream: &'a str,
    /// Tag `P`: the content continues on the next line.
    pub partial: bool,
    pub content: &'a [u8],
}

/// Parses one CRI log line (without its `\n`). `None` for lines that are not in the format.
pub fn parse_cri_line(line: &[u8]) -> Option<CriLine<'_>> {
    let mut it = line.splitn(4, |b| *b == b' ');
    let time = std::str::from_utf8(it.next()?).ok()?;
    let stream = std::str::from_utf8(it.next()?).ok()?;
    let tag = std::str::from_utf8(it.next()?).ok()?;
    let content = it.next().unwrap_or(&[]);
    if !matches!(stream, "stdout" | "stderr") || parse_rfc3339(time).is_none() {
        return None;
    }
    // Tags are `:`-separated; the first is P (partial) or F (full).
    let partial = match tag.split(':').next() {
        Some("P") => true,
        Some("F") => false,
        _ => return None,
    };
    Some(CriLine {
        time,
        stream,
        partial,
        content,
    })
}

/// Options of a log request.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LogOptions {
    pub timestamps: bool,
    pub tail_lines: Option<usize>,
    pub since: Option<SystemTime>,
}

/// Joins partial CRI lines into whole log lines (`(time of the first part, text + \n)`).
#[derive(Debug, Default)]
pub struct LogAssembler {
    pending: Option<(String, Vec<u8>)>,
}

impl LogAssembler {
    /// Feeds one raw line; returns a complete line when one is finished.
    pub fn feed(&mut self, raw: &[u8]) -> Option<(String, Vec<u8>)> {
        let l = parse_cri_line(raw)?;
        let (time, mut text) = self
            .pending
            .take()
            .unwrap_or_else(|| (l.time.to_string(), Vec::new()));
        text.extend_from_slice(l.content);
        if l.partial {
            self.pending = Some((time, text));
            None
        } else {
            text.push(b'\n');
            Some((time, text))
        }
    }
}

fn render_line(opts: &LogOptions, time: &str, text: &[u8], out: &mut Vec<u8>) -> bool {
    if let Some(since) = opts.since {
        if parse_rfc3339(time).is_some_and(|t| t < since) {
            return false;
        }
    }
    if opts.timestamps {
        out.extend_from_slice(time.as_bytes());
        out.push(b' ');
    }
    out.extend_from_slice(text);
    true
}

/// Formats the whole of a CRI log file's bytes for the API.
pub fn format_log(data: &[u8], opts: &LogOptions) -> Vec<u8> {
    let mut asm = LogAssembler::default();
    let mut lines: Vec<(String, Vec<u8>)> = data
        .split(|b| *b == b'\n')
        .filter_map(|raw| asm.feed(raw))
        .filter(|(t, _)| {
            opts.since
                .is_none_or(|s| parse_rfc3339(t).is_none_or(|t| t >= s))
        })
        .collect();
    if let Some(n) = opts.tail_lines {
        let skip = lines.len().saturating_sub(n);
        lines.drain(..skip);
    }
    let mut out = vec![];
    for (t, text) in &lines {
        render_line(opts, t, text, &mut out);
    }
    out
}

/// A `follow=true` log request, resolved to its file.
#[derive(Debug)]
pub struct LogFollow {
    pub path: PathBuf,
    pub opts: LogOptions,
    pub uid: String,
    pub container: String,
    pub restart_count: i64,
}

/// Whether the container (this restart) is still running, per the status store.
fn still_running(store: &StatusStore, uid: &str, container: &str, restart_count: i64) -> bool {
    let Some(p) = store.get(uid) else {
        return false;
    };
    let Some(st) = &p.status else {
        return false;
    };
    st.container_statuses
        .iter()
        .chain(&st.init_container_statuses)
        .any(|c| {
            c.name == container
                && i64::from(c.restart_count) == restart_count
                && c.state.running.is_some()
        })
}

impl LogFollow {
    /// Streams the log to `out` (the initial content with tail/since applied, then new lines as
    /// the file grows) until the container stops or a write fails (the client went away).
    /// Each `write` call is one complete chunk of whole lines.
    pub fn stream(
        &self,
        store: &StatusStore,
        out: &mut dyn Write,
        stopping: &dyn Fn() -> bool,
    ) -> io::Result<()> {
        let mut f = File::open(&self.path)?;
        let mut data = vec![];
        f.read_to_end(&mut data)?;
        let mut offset = data.len() as u64;
        // Keep an unterminated last line for later.
        let cut = data.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
        let mut carry = data.split_off(cut);
        let first = format_log(&data, &self.opts);
        // The assembler state across the initial part: partial lines at the end of the
        // initial content are re-read below, so start a fresh assembler from the carry point.
        let mut asm = LogAssembler::default();
        if !first.is_empty() {
            out.write_all(&first)?;
            out.flush()?;
        }
        let live_opts = LogOptions {
            tail_lines: None,
            ..self.opts.clone()
        };
        let mut idle_checks = 0u32;
        loop {
            if stopping() {
                return Ok(());
            }
            let len = f.metadata().map(|m| m.len()).unwrap_or(offset);
            if len < offset {
                // Truncated or replaced: start over.
                f = File::open(&self.path)?;
                offset = 0;
                carry.clear();
            }
            let mut buf = vec![];
            f.seek(SeekFrom::Start(offset))?;
            let n = f.read_to_end(&mut buf)?;
            offset += n as u64;
            if n > 0 {
                carry.extend_from_slice(&buf);
                let cut = carry.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
                let rest = carry.split_off(cut);
                let mut chunk = vec![];
                for raw in carry.split(|b| *b == b'\n') {
                    if let Some((t, text)) = asm.feed(raw) {
                        render_line(&live_opts, &t, &text, &mut chunk);
                    }
                }
                carry = rest;
                if !chunk.is_empty() {
                    out.write_all(&chunk)?;
                    out.flush()?;
                }
                continue;
            }
            // Nothing new. Rotated (the path is a new file: containerd reopened the log after
            // the old one was renamed)? Go on with the new file from its start.
            if let (Ok(now), Ok(open)) = (std::fs::metadata(&self.path), f.metadata()) {
                use std::os::unix::fs::MetadataExt;
                if (now.dev(), now.ino()) != (open.dev(), open.ino()) {
                    if let Ok(nf) = File::open(&self.path) {
                        f = nf;
                        offset = 0;
                        carry.clear();
                        continue;
                    }
                }
            }
            // Is the container still running? Check every ~1s.
            idle_checks += 1;
            if idle_checks % 5 == 0
                && !still_running(store, &self.uid, &self.container, self.restart_count)
            {
                // One last read for what was written just before the exit.
                let mut buf = vec![];
                f.seek(SeekFrom::Start(offset))?;
                f.read_to_end(&mut buf)?;
                carry.extend_from_slice(&buf);
                let mut chunk = vec![];
                for raw in carry.split(|b| *b == b'\n') {
                    if let Some((t, text)) = asm.feed(raw) {
                        render_line(&live_opts, &t, &text, &mut chunk);
                    }
                }
                if !chunk.is_empty() {
                    out.write_all(&chunk)?;
                    out.flush()?;
                }
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

fn parse_bool(q: &BTreeMap<String, String>, key: &str) -> Result<bool, QueryError> {
    match q.get(key).map(String::as_str) {
        None | Some("false") | Some("0") => Ok(false),
        Some("" | "true" | "1") => Ok(true),
        Some(v) => Err(QueryError::Bool {
            key: key.into(),
            value: v.into(),
        }),
    }
}

fn parse_positive(q: &BTreeMap<String, String>, key: &str) -> Result<Option<i64>, QueryError> {
    match q.get(key) {
        None => Ok(None),
        Some(v) => match v.parse::<i64>() {
            Ok(n) if n >= 0 => Ok(Some(n)),
            _ => Err(QueryError::NonNegative {
                key: key.into(),
                value: v.clone(),
            }),
        },
    }
}

/// The log file of a container: `<dir>/<ns>_<name>_<uid>/<container>/<n>.log`.
pub fn log_path(dir: &Path, ns: &str, name: &str, uid: &str, container: &str, n: i64) -> PathBuf {
    dir.join(format!("{ns}_{name}_{uid}"))
        .join(container)
        .join(format!("{n}.log"))
}

pub(super) fn pod_log(
    ctx: &NodeContext,
    store: &StatusStore,
    ns: &str,
    name: &str,
    q: &BTreeMap<String, String>,
) -> ApiOutcome {
    let Some(pod) = store
        .pods()
        .into_iter()
        .find(|p| p.metadata.namespace == ns && p.metadata.name == name)
    else {
        return not_found("pods", name);
    };
    let LogQuery {
        follow,
        previous,
        format: opts,
    } = match log_query(q) {
        Ok(v) => v,
        Err(e) => return bad_request(&e.to_string()),
    };
    let container = match log_container(&pod, name, q) {
        Ok(c) => c,
        Err(e) => return bad_request(&e.to_string()),
    };
    let status = pod.status.as_ref().and_then(|st| {
        st.container_statuses
            .iter()
            .chain(&st.init_container_statuses)
            .find(|c| c.name == container)
    });
    let restart_count = status.map_or(0, |c| i64::from(c.restart_count));
    let n = if previous {
        if restart_count == 0 {
            return bad_request(&format!(
                "previous terminated container \"{container}\" in pod \"{name}\" not found"
            ));
        }
        restart_count - 1
    } else {
        restart_count
    };
    let path = log_path(
        &ctx.pod_logs_dir,
        ns,
        name,
        &pod.metadata.uid,
        &container,
        n,
    );
    if !path.is_file() {
        let waiting = status
            .and_then(|c| c.state.waiting.as_ref())
            .map(|w| w.reason.clone())
            .unwrap_or_default();
        let msg = if previous {
            format!("previous terminated container \"{container}\" in pod \"{name}\" not found")
        } else if !waiting.is_empty() || status.is_none_or(|c| c.container_id.is_empty()) {
            format!(
                "container \"{container}\" in pod \"{name}\" is waiting to start: {}",
                if waiting.is_empty() {
                    "ContainerCreating"
                } else {
                    &waiting
                }
            )
        } else {
            format!("log file of container \"{container}\" in pod \"{name}\" not found")
        };
        return bad_request(&msg);
    }
    if follow && !previous {
        return ApiOutcome::Follow(LogFollow {
            path,
            opts,
            uid: pod.metadata.uid.clone(),
            container,
            restart_count: n,
        });
    }
    match std::fs::read(&path) {
        Ok(data) => ApiOutcome::text(format_log(&data, &opts)),
        Err(e) => {
            tracing::warn!(pod = %format!("{ns}/{name}"), container = %container, error = %e, "reading container log");
            fail(
                500,
                "InternalError",
                &format!("reading the log of container \"{container}\": {e}"),
                None,
            )
        }
    }
}

/// A `kubectl logs` query.
struct LogQuery {
    follow: bool,
    /// The previous instance's log (restart count - 1).
    previous: bool,
    format: LogOptions,
}

/// The log query's parameters.
fn log_query(q: &BTreeMap<String, String>) -> Result<LogQuery, QueryError> {
    let follow = parse_bool(q, "follow")?;
    let previous = parse_bool(q, "previous")?;
    let timestamps = parse_bool(q, "timestamps")?;
    let tail_lines = parse_positive(q, "tailLines")?.map(|n| n as usize);
    let mut since = parse_positive(q, "sinceSeconds")?
        .map(|s| SystemTime::now() - Duration::from_secs(s.unsigned_abs()));
    if let Some(t) = q.get("sinceTime") {
        since = Some(parse_rfc3339(t).ok_or_else(|| QueryError::SinceTime(t.clone()))?);
    }
    Ok(LogQuery {
        follow,
        previous,
        format: LogOptions {
            timestamps,
            tail_lines,
            since,
        },
    })
}

/// The container whose log is asked for: `container`, or the pod's only container.
fn log_container(
    pod: &crate::api::Pod,
    name: &str,
    q: &BTreeMap<String, String>,
) -> Result<String, QueryError> {
    let names: Vec<&str> = pod
        .spec
        .init_containers
        .iter()
        .chain(&pod.spec.containers)
        .map(|c| c.name.as_str())
        .collect();
    let container = match q.get("container").filter(|c| !c.is_empty()) {
        Some(c) => c.clone(),
        None if pod.spec.containers.len() == 1 => pod.spec.containers[0].name.clone(),
        None => {
            return Err(QueryError::ContainerRequired {
                pod: name.into(),
                choices: names.join(" "),
            });
        }
    };
    if !names.contains(&container.as_str()) {
        return Err(QueryError::UnknownContainer {
            container,
            pod: name.into(),
        });
    }
    Ok(container)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn cri_lines_parse_and_partials_join() {
        let l = parse_cri_line(b"2026-11-22T18:46:47.123456789Z stdout F hello world").unwrap();
        assert_eq!(l.time, "2026-11-22T18:46:47.123456789Z");
        assert_eq!(l.stream, "stdout");
        assert!(!l.partial);
        assert_eq!(l.content, b"hello world");
        let l = parse_cri_line(b"2026-11-22T18:46:47Z stderr P").unwrap();
        assert!(l.partial);
        assert_eq!(l.content, b"");
        assert!(parse_cri_line(b"2026-11-22T18:46:47Z stdin F x").is_none());
        assert!(parse_cri_line(b"yesterday stdout F x").is_none());
        assert!(parse_cri_line(b"2026-11-22T18:46:47Z stdout X x").is_none());
        assert!(parse_cri_line(b"").is_none());
        // Tags with extra `:`-separated parts.
        assert!(
            parse_cri_line(b"2026-11-22T18:46:47Z stdout P:x a")
                .unwrap()
                .partial
        );

        let data = b"2026-11-22T18:00:00Z stdout F one\n\
2026-11-22T18:00:01Z stdout P tw\n\
2026-11-22T18:00:02Z stdout F o\n\
garbage\n\
2026-11-22T18:00:03Z stderr F three\n\
2026-11-22T18:00:04Z stdout F \n";
        assert_eq!(
            format_log(data, &LogOptions::default()),
            b"one\ntwo\nthree\n\n".to_vec()
        );
        let tail = LogOptions {
            tail_lines: Some(2),
            timestamps: true,
            ..Default::default()
        };
        assert_eq!(
            String::from_utf8(format_log(data, &tail)).unwrap(),
            "2026-11-22T18:00:03Z three\n2026-11-22T18:00:04Z \n"
        );
        let since = LogOptions {
            since: parse_rfc3339("2026-11-22T18:00:01Z"),
            ..Default::default()
        };
        assert_eq!(format_log(data, &since), b"two\nthree\n\n".to_vec());
        assert_eq!(
            format_log(
                data,
                &LogOptions {
                    tail_lines: Some(0),
                    ..Default::default()
                }
            ),
            b"".to_vec()
        );
    }

    /// A writer that hands each chunk to a channel.
    struct ChanWriter(std::sync::mpsc::Sender<Vec<u8>>);
    impl Write for ChanWriter {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            let _ = self.0.send(b.to_vec());
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn follow_streams_growth_and_rotation_and_ends_when_the_container_stops() {
        use crate::api::{ContainerStateView, ContainerStatus, Pod, PodStatus, StateRunning};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.log");
        std::fs::write(&path, "2026-11-22T18:00:00Z stdout F one\n").unwrap();
        let store = Arc::new(StatusStore::new(Duration::from_secs(300)));
        let mut pod = Pod::default();
        pod.metadata.uid = "u1".into();
        pod.status = Some(PodStatus {
            container_statuses: vec![ContainerStatus {
                name: "c".into(),
                state: ContainerStateView {
                    running: Some(StateRunning::default()),
                    ..Default::default()
                },
                ..Default::default()
            }],
            ..Default::default()
        });
        store.set_pod(pod.clone());
        let follow = LogFollow {
            path: path.clone(),
            opts: LogOptions::default(),
            uid: "u1".into(),
            container: "c".into(),
            restart_count: 0,
        };
        let (tx, rx) = std::sync::mpsc::channel();
        let t = {
            let store = store.clone();
            std::thread::spawn(move || follow.stream(&store, &mut ChanWriter(tx), &|| false))
        };
        let recv = || rx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!(recv(), b"one\n");
        // Growth, with a line written in two parts (P then F) and in two writes.
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        f.write_all(b"2026-11-22T18:00:01Z stdout P tw").unwrap();
        f.flush().unwrap();
        f.write_all(b"\n2026-11-22T18:00:02Z stdout F o\n").unwrap();
        assert_eq!(recv(), b"two\n");
        // Rotation: rename, and a new file at the path.
        std::fs::rename(&path, dir.path().join("0.log.20261122180003")).unwrap();
        std::fs::write(&path, "2026-11-22T18:00:04Z stdout F three\n").unwrap();
        assert_eq!(recv(), b"three\n");
        // The container stops: the stream ends.
        if let Some(st) = pod.status.as_mut() {
            st.container_statuses[0].state = ContainerStateView::default();
        }
        store.set_pod(pod);
        t.join().unwrap().unwrap();
    }
}
