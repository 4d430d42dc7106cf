//! Container logs: the CRI log format (`<RFC3339Nano> <stream> <P|F> <text>`) parsed and
//! reassembled, `kubectl logs` options, and `follow` across rotations.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::{ApiOutcome, QueryError, bad_request, not_found};
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
    /// `limitBytes`: the output stops after this many bytes.
    pub limit_bytes: Option<u64>,
    /// `stream` (PodLogsQuerySplitStreams): which of stdout and stderr are written.
    pub stream: LogStream,
}

/// The `stream` of a log request: `All` (the default), `Stdout` or `Stderr`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LogStream {
    #[default]
    All,
    Stdout,
    Stderr,
}

impl LogStream {
    fn wants(self, stream: &str) -> bool {
        match self {
            LogStream::All => true,
            LogStream::Stdout => stream == "stdout",
            LogStream::Stderr => stream == "stderr",
        }
    }
}

/// The kubelet's log writer (cri-client pkg/logs ReadLogs and logWriter), record by record:
/// each CRI record is written as it is, a partial (`P`) one without a newline and a full
/// (`F`) one with the newline of its file line; the timestamp prefix only where a line
/// starts; `since` per record; other streams skipped (and not counted); output cut at
/// `limitBytes`.
#[derive(Debug)]
pub struct LogWriter<'a> {
    opts: &'a LogOptions,
    new_line: bool,
    remain: u64,
}

impl<'a> LogWriter<'a> {
    pub fn new(opts: &'a LogOptions) -> Self {
        LogWriter {
            opts,
            new_line: true,
            remain: opts.limit_bytes.unwrap_or(u64::MAX),
        }
    }

    /// Whether `limitBytes` has been reached: nothing more is written.
    pub fn done(&self) -> bool {
        self.remain == 0
    }

    /// One line of the log file (with its `\n`, or an incomplete last line): the bytes to
    /// send, empty when the record is skipped. Lines not in the CRI format are skipped.
    pub fn record(&mut self, raw: &[u8]) -> Vec<u8> {
        let had_newline = raw.last() == Some(&b'\n');
        let line = raw.strip_suffix(b"\n").unwrap_or(raw);
        let Some(l) = parse_cri_line(line) else {
            return Vec::new();
        };
        let mut text = l.content.to_vec();
        if !l.partial && had_newline {
            text.push(b'\n');
        }
        let add_prefix = self.new_line;
        self.new_line = text.last().is_none_or(|b| *b == b'\n');
        if self.done()
            || !self.opts.stream.wants(l.stream)
            || self
                .opts
                .since
                .is_some_and(|s| parse_rfc3339(l.time).is_some_and(|t| t < s))
        {
            return Vec::new();
        }
        let mut out = Vec::with_capacity(text.len() + 40);
        if self.opts.timestamps && add_prefix {
            out.extend_from_slice(l.time.as_bytes());
            out.push(b' ');
        }
        out.extend_from_slice(&text);
        let keep = usize::try_from(self.remain).unwrap_or(usize::MAX);
        out.truncate(keep);
        self.remain -= out.len() as u64;
        out
    }
}

/// The file lines of `data` a log request reads: each with its `\n` (the last one may lack
/// it); with `tail_lines` N the last N lines ending in a newline (findTailLineStartIndex
/// counts newlines, and the limited read stops after N records).
pub fn log_records(data: &[u8], tail_lines: Option<usize>) -> Vec<&[u8]> {
    let records: Vec<&[u8]> = data.split_inclusive(|b| *b == b'\n').collect();
    match tail_lines {
        None => records,
        Some(n) => {
            let complete = records.iter().filter(|r| r.ends_with(b"\n")).count();
            let start = complete.saturating_sub(n);
            records.into_iter().skip(start).take(n).collect()
        }
    }
}

/// Formats the whole of a CRI log file's bytes for the API: the records the kubelet's
/// ReadLogs writes, one after the other.
pub fn format_log(data: &[u8], opts: &LogOptions) -> Vec<u8> {
    let mut w = LogWriter::new(opts);
    let mut out = vec![];
    for raw in log_records(data, opts.tail_lines) {
        out.extend(w.record(raw));
    }
    out
}

/// A log request resolved to its file, streamed by the server (the kubelet's
/// getContainerLogs: chunked, each record written and flushed on its own).
#[derive(Debug)]
pub struct LogFollow {
    pub path: PathBuf,
    pub opts: LogOptions,
    pub uid: String,
    pub container: String,
    pub restart_count: i64,
    /// `follow=true`: after the current content, new records until the container stops.
    pub follow: bool,
}

/// Whether the container (this restart) is still running, per the status store.
fn still_running(store: &StatusStore, uid: &str, container: &str, restart_count: i64) -> bool {
    let Some(p) = store.get(uid) else {
        return false;
    };
    let Some(st) = &p.status else {
        return false;
    };
    st.all_container_statuses().any(|c| {
        c.name == container
            && i64::from(c.restart_count) == restart_count
            && c.state.running.is_some()
    })
}

/// Writes the records of `lines` through `w` to `out`, one `write` and flush per record that
/// has output (as the kubelet's flushwriter). Returns false once `limitBytes` is reached.
fn write_records<'a>(
    w: &mut LogWriter<'_>,
    lines: impl IntoIterator<Item = &'a [u8]>,
    out: &mut dyn Write,
) -> io::Result<bool> {
    for raw in lines {
        let piece = w.record(raw);
        if !piece.is_empty() {
            out.write_all(&piece)?;
            out.flush()?;
        }
        if w.done() {
            return Ok(false);
        }
    }
    Ok(true)
}

impl LogFollow {
    /// Streams the log to `out`: the current content (tail, since, limitBytes applied), then,
    /// with `follow`, new records as the file grows until the container stops or a write
    /// fails (the client went away). Each `write` call is one record.
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
        let mut w = LogWriter::new(&self.opts);
        if !self.follow {
            // ReadLogs without follow: to the end of the file, an incomplete last line too.
            write_records(&mut w, log_records(&data, self.opts.tail_lines), out)?;
            return Ok(());
        }
        // Following, an incomplete last line is read again once it is complete.
        let cut = data.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
        let mut carry = data.split_off(cut);
        if !write_records(&mut w, log_records(&data, self.opts.tail_lines), out)? {
            return Ok(());
        }
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
                if !write_records(&mut w, log_records(&carry, None), out)? {
                    return Ok(());
                }
                carry = rest;
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
                // One last read for what was written just before the exit (complete
                // records: ReadLogs returns at the next EOF once the container is gone).
                let mut buf = vec![];
                f.seek(SeekFrom::Start(offset))?;
                f.read_to_end(&mut buf)?;
                carry.extend_from_slice(&buf);
                let cut = carry.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
                write_records(&mut w, log_records(&carry[..cut], None), out)?;
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
    let status = pod
        .status
        .as_ref()
        .and_then(|st| st.all_container_statuses().find(|c| c.name == container));
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
    // Streamed in both cases, as the kubelet's getContainerLogs (Transfer-Encoding: chunked):
    // a client reading a fixed-length body gets its last bytes together with EOF, which the
    // API server's websocket log proxy (wsstream messageCopy) drops.
    ApiOutcome::Follow(LogFollow {
        path,
        opts,
        uid: pod.metadata.uid.clone(),
        container,
        restart_count: n,
        follow: follow && !previous,
    })
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
    let limit_bytes = parse_positive(q, "limitBytes")?.map(i64::unsigned_abs);
    let stream = match q.get("stream").map(String::as_str) {
        None | Some("All") => LogStream::All,
        Some("Stdout") => LogStream::Stdout,
        Some("Stderr") => LogStream::Stderr,
        Some(v) => return Err(QueryError::Stream(v.into())),
    };
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
            limit_bytes,
            stream,
        },
    })
}

/// The container whose log is asked for: `container`, or the pod's only container.
fn log_container(
    pod: &crate::api::Pod,
    name: &str,
    q: &BTreeMap<String, String>,
) -> Result<String, QueryError> {
    let names: Vec<&str> = pod.spec.all_containers().map(|c| c.name.as_str()).collect();
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

    /// e2e `Projected combined should project all components` runs `cat a && cat b && cat c`
    /// on files without a final newline: the runtime writes one partial (`P`) record that no
    /// full one follows. The kubelet's ReadLogs writes every record as it is (cri-client
    /// logWriter), so the output is the text without a newline; it was dropped.
    #[test]
    fn partial_records_are_written_as_they_are_like_the_kubelets_read_logs() {
        let data = b"2026-11-22T18:00:00Z stdout P podnamesecret-value-1configmap-value-1\n";
        assert_eq!(
            format_log(data, &LogOptions::default()),
            b"podnamesecret-value-1configmap-value-1".to_vec()
        );
        // The timestamp only where a line starts; a final line without its newline counts.
        let data = b"2026-11-22T18:00:00Z stdout P a\n\
2026-11-22T18:00:01Z stdout F b\n\
2026-11-22T18:00:02Z stderr F c";
        let ts = LogOptions {
            timestamps: true,
            ..Default::default()
        };
        assert_eq!(
            String::from_utf8(format_log(data, &ts)).unwrap(),
            "2026-11-22T18:00:00Z ab\n2026-11-22T18:00:02Z c"
        );
        // tailLines counts the file's lines; an incomplete last one is not among them.
        let tail = LogOptions {
            tail_lines: Some(1),
            ..Default::default()
        };
        assert_eq!(format_log(data, &tail), b"b\n".to_vec());
        // limitBytes cuts the output; stream (PodLogsQuerySplitStreams) picks one stream.
        let limit = LogOptions {
            limit_bytes: Some(2),
            ..Default::default()
        };
        assert_eq!(format_log(data, &limit), b"ab".to_vec());
        let stderr = LogOptions {
            stream: LogStream::Stderr,
            ..Default::default()
        };
        assert_eq!(format_log(data, &stderr), b"c".to_vec());
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
            follow: true,
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
        // Each record on its own, as the kubelet's writer (the partial one once its file line
        // is complete).
        assert_eq!(recv(), b"tw");
        assert_eq!(recv(), b"o\n");
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
