//! How the real `nanolet` binary writes its log (no containerd needed).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Runs `nanolet run` to a quick exit (an unknown config field: a WARN; an unreadable
/// --read-only-token-file: an ERROR and exit), stderr appended to `log`, with `env`.
fn run_to_exit(dir: &Path, log: &Path, env: &[(&str, String)]) -> String {
    let cfg = dir.join("config.yaml");
    std::fs::write(
        &cfg,
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nfooBar: 1\n",
    )
    .expect("config");
    let err = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .expect("log");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_nanolet"));
    cmd.args([
        "run".to_string(),
        format!("--config={}", cfg.display()),
        format!("--root-dir={}", dir.join("root").display()),
        "--device-plugin-dir=".into(),
        "--pod-resources-dir=".into(),
        format!("--pod-manifest-path={}", dir.join("manifests").display()),
        format!(
            "--read-only-token-file={}",
            dir.join("absent-token").display()
        ),
        "--healthz-port=0".into(),
    ])
    .env_remove("JOURNAL_STREAM")
    .env_remove("RUST_LOG")
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(err);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn nanolet");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if child.try_wait().expect("wait").is_some() {
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("nanolet did not exit");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    std::fs::read_to_string(log).expect("read log")
}

#[test]
fn under_journald_lines_start_with_sd_daemon_priorities() {
    // sd-daemon(3): stderr is the journal when $JOURNAL_STREAM is fd 2's device:inode; each
    // line then starts with <N> (SD_ERR 3, SD_WARNING 4), without a timestamp of its own.
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("stderr");
    std::fs::write(&log, "").expect("create");
    let meta = std::fs::metadata(&log).expect("stat");
    let stream = format!("{}:{}", meta.dev(), meta.ino());
    let out = run_to_exit(dir.path(), &log, &[("JOURNAL_STREAM", stream)]);
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines.len() >= 2, "{out}");
    assert!(
        lines
            .iter()
            .all(|l| l.starts_with('<') && l.as_bytes().get(2) == Some(&b'>')),
        "{out}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("<4>") && l.contains("ignoring field \"fooBar\"")),
        "{out}"
    );
    assert!(
        lines
            .last()
            .is_some_and(|l| l.starts_with("<3>") && l.contains("absent-token")),
        "{out}"
    );
    assert!(!out.contains('\x1b'), "{out:?}");
    assert!(
        lines
            .iter()
            .all(|l| !l.get(3..).unwrap_or("").trim_start().starts_with("20")),
        "{out}"
    );
}

#[test]
fn a_journal_stream_of_another_file_leaves_plain_lines() {
    // $JOURNAL_STREAM inherited, but stderr redirected elsewhere: not the journal.
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("stderr");
    let out = run_to_exit(dir.path(), &log, &[("JOURNAL_STREAM", "1:1".to_string())]);
    assert!(out.lines().count() >= 2, "{out}");
    assert!(
        out.lines().all(|l| l.starts_with("20")),
        "timestamped: {out}"
    );
    assert!(!out.contains("<4>") && !out.contains("<3>"), "{out}");
}

#[test]
fn with_containerd_down_warnings_back_off_instead_of_repeating_every_second() {
    // kubelet pod_workers.go: a failed sync is retried after backOffPeriod (10 s, jittered),
    // not at once; repeats of the same warning (each pod's sync error, the PLEG relist error)
    // are logged once per back-off step with a count. Before: every pod warned every 2 s and
    // the PLEG every second (~53 KB/min at 8 pods; ~60 WARN lines in 12 s).
    let dir = tempfile::tempdir().expect("tempdir");
    let manifests = dir.path().join("manifests");
    std::fs::create_dir(&manifests).expect("manifests");
    for i in 0..8 {
        std::fs::write(
            manifests.join(format!("p{i}.yaml")),
            format!(
                "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p{i}\nspec:\n  containers:\n  - name: c\n    image: localhost/busybox:1.36\n    command: [sleep, \"3600\"]\n"
            ),
        )
        .expect("manifest");
    }
    let log = dir.path().join("stderr");
    let err = std::fs::File::create(&log).expect("log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_nanolet"))
        .args([
            "run".to_string(),
            format!("--pod-manifest-path={}", manifests.display()),
            format!("--root-dir={}", dir.path().join("root").display()),
            "--device-plugin-dir=".into(),
            "--pod-resources-dir=".into(),
            format!("--pod-logs-dir={}", dir.path().join("logs/pods").display()),
            format!(
                "--container-runtime-endpoint=unix://{}",
                dir.path().join("no-containerd.sock").display()
            ),
            "--read-only-port=0".into(),
            "--healthz-port=0".into(),
            "--hostname-override=node1".into(),
            "--images-dir=".into(),
            // Eviction and image GC off, as in the harness: on a test machine with a nearly
            // full disk the default imagefs.available<15% would refuse every pod at admission
            // (DiskPressure) and no sync would ever fail.
            "--eviction-hard=memory.available<0%".into(),
            "--image-gc-high-threshold=100".into(),
            "--image-gc-low-threshold=99".into(),
        ])
        .env_remove("JOURNAL_STREAM")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(err)
        .spawn()
        .expect("spawn nanolet");
    // Every pod's first sync has failed and been said.
    let deadline = Instant::now() + Duration::from_secs(60);
    let start_len = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.matches("sync failed").count() >= 8 {
            break text.len();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("no sync failures:\n{text}");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    // A window, not a condition: what nanolet writes in it is the point.
    std::thread::sleep(Duration::from_secs(12));
    let _ = child.kill();
    let _ = child.wait();
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let window = text.get(start_len..).unwrap_or_default();
    let warns = window.lines().filter(|l| l.contains(" WARN ")).count();
    // At most one more per pod (the 10 s step) and per relist warning.
    assert!(
        warns <= 12,
        "{warns} WARN lines in 12 s ({} bytes):\n{window}",
        window.len()
    );
    assert!(text.contains("suppressed="), "{text}");
}

#[test]
fn a_closed_pipe_ends_client_commands_quietly_never_with_an_abort() {
    // `nanolet man | true`: the reader is gone before the output is written. Rust ignores
    // SIGPIPE, so print! panicked and the release profile's panic = "abort" dumped core
    // (status 134, seen under qemu in cross/smoke as `nanolet help | grep -q`). A client
    // command is a Unix filter: it ends by SIGPIPE, silently.
    use std::os::unix::process::ExitStatusExt;
    for args in [&["man"][..], &["help"][..], &["completion", "zsh"][..]] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_nanolet"))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start nanolet");
        drop(child.stdout.take()); // the reader goes away at once
        let out = child.wait_with_output().expect("wait");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() || out.status.signal() == Some(13),
            "{args:?}: {:?}, stderr: {stderr}",
            out.status
        );
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}
