use std::path::Path;

use super::load::{normalize_node_name, parse_run_args_with};
use super::*;
use crate::util::redact::redact_url;

fn args(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

fn host() -> Result<String, ConfigError> {
    Ok("Edge-Box-01".into())
}

fn parse(a: &[&str]) -> Result<Config, ConfigError> {
    match parse_run_args_with(&args(a), &host)? {
        ParseOutcome::Run(c) => Ok(c),
        ParseOutcome::Help(_) => panic!("unexpected help"),
    }
}

fn write(dir: &tempfile::TempDir, name: &str, text: &str) -> String {
    let p = dir.path().join(name);
    std::fs::write(&p, text).unwrap();
    p.to_string_lossy().into_owned()
}

const HEAD: &str = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

#[test]
fn defaults() {
    let c = parse(&[]).unwrap();
    let mut want = Config::defaults("edge-box-01".into());
    want.warnings.clear();
    assert_eq!(c, want);
    assert_eq!(
        c.pod_manifest_path,
        PathBuf::from("/etc/kubernetes/manifests")
    );
    assert_eq!(c.sync_frequency, Duration::from_secs(60));
    assert_eq!(c.runtime_request_timeout, Duration::from_secs(120));
    assert_eq!(c.address.to_string(), "127.0.0.1");
    assert_eq!(
        (c.read_only_port, c.healthz_port, c.max_pods),
        (10255, 10248, 110)
    );
    assert_eq!(c.runtime_endpoint, "unix:///run/containerd/containerd.sock");
    assert_eq!(c.manifest_url, None);
    assert_eq!(c.log_level(), tracing::Level::INFO);
}

#[test]
fn flag_syntaxes() {
    let c = parse(&[
        "--sync-frequency=30s",
        "--file-check-frequency",
        "5s",
        "-v",
        "4",
        "--read-only-port=0",
        "--address",
        "0.0.0.0",
        "--hostname-override=Node-A",
        "--max-pods=5",
        "--help=false",
        "--pod-manifest-path=",
    ])
    .unwrap();
    assert_eq!(c.sync_frequency, Duration::from_secs(30));
    assert_eq!(c.file_check_frequency, Duration::from_secs(5));
    assert_eq!(c.verbosity, 4);
    assert_eq!(c.log_level(), tracing::Level::DEBUG);
    assert_eq!(c.read_only_port, 0);
    assert_eq!(c.address.to_string(), "0.0.0.0");
    assert_eq!(c.node_name, "node-a");
    assert_eq!(c.max_pods, 5);
    assert_eq!(c.pod_manifest_path, PathBuf::new());
    assert_eq!(parse(&["-v=7"]).unwrap().verbosity, 7);
    assert_eq!(parse(&["-v3"]).unwrap().verbosity, 3);
    assert_eq!(parse(&["--v=99"]).unwrap().verbosity, 10);
    assert_eq!(
        parse(&["--v=6"]).unwrap().log_level(),
        tracing::Level::TRACE
    );
    // Last occurrence of a single-valued flag wins.
    assert_eq!(
        parse(&["--max-pods=1", "--max-pods=2"]).unwrap().max_pods,
        2
    );
}

#[test]
fn help() {
    for a in [
        &["--help"][..],
        &["-h"],
        &["--sync-frequency=1s", "--help=true"],
    ] {
        match parse_run_args_with(&args(a), &host).unwrap() {
            ParseOutcome::Help(text) => {
                for f in flag_docs() {
                    assert!(
                        text.contains(&format!("--{} ", f.name)),
                        "{} missing",
                        f.name
                    );
                    if !f.default.is_empty() {
                        assert!(text.contains(&format!("(default {})", f.default)));
                    }
                }
                assert!(text.contains("kubelet defaults to 0.0.0.0"));
                assert_eq!(
                    text.lines()
                        .filter(|l| l.trim_start().starts_with('-'))
                        .count(),
                    flag_docs().count()
                );
            }
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn flag_errors() {
    let e = parse(&["--sync-frequency=x"]).unwrap_err().to_string();
    assert!(
        e.starts_with("--sync-frequency: invalid duration \"x\": "),
        "{e}"
    );
    let e = parse(&["--sync-frequency=0s"]).unwrap_err().to_string();
    assert!(e.contains("greater than zero"), "{e}");
    assert!(matches!(parse(&["--nope"]), Err(ConfigError::UnknownFlag(f)) if f == "--nope"));
    assert!(matches!(parse(&["-x"]), Err(ConfigError::UnknownFlag(f)) if f == "-x"));
    assert!(
        matches!(parse(&["--max-pods"]), Err(ConfigError::MissingValue(f)) if f == "--max-pods")
    );
    assert!(matches!(
        parse(&["extra"]),
        Err(ConfigError::UnexpectedArgument(_))
    ));
    assert!(matches!(
        parse(&["--", "extra"]),
        Err(ConfigError::UnexpectedArgument(_))
    ));
    assert!(
        parse(&["--help=maybe"])
            .unwrap_err()
            .to_string()
            .contains("invalid boolean")
    );
    assert!(
        parse(&["--read-only-port=70000"])
            .unwrap_err()
            .to_string()
            .starts_with("--read-only-port: invalid port")
    );
    assert!(parse(&["--max-pods=-1"]).is_err());
    assert!(
        parse(&["--address=localhost"])
            .unwrap_err()
            .to_string()
            .contains("invalid IP address")
    );
    assert!(parse(&["--manifest-url=ftp://x/"]).is_err());
    assert!(
        parse(&["--hostname-override=bad_name"])
            .unwrap_err()
            .to_string()
            .contains("--hostname-override")
    );
    let e =
        parse_run_args_with(&args(&[]), &|| Err(ConfigError::NodeName("boom".into()))).unwrap_err();
    assert!(matches!(e, ConfigError::NodeName(_)));
}

#[test]
fn header_parsing() {
    let c = parse(&[
        "--manifest-url=http://example.com/pods",
        "--manifest-url-header=a:hello,b:again,c:world",
        "--manifest-url-header",
        "b:beautiful",
        "--manifest-url-header=Authorization: Bearer x:y ,",
    ])
    .unwrap();
    assert_eq!(
        c.manifest_url_headers,
        vec![
            ("a".to_string(), "hello".to_string()),
            ("b".into(), "again".into()),
            ("c".into(), "world".into()),
            ("b".into(), "beautiful".into()),
            ("Authorization".into(), "Bearer x:y".into()),
        ]
    );
    let e = parse(&["--manifest-url-header=Bearer-secret-token"])
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("--manifest-url-header: malformed header"),
        "{e}"
    );
    assert!(!e.contains("secret"), "{e}");
    assert!(parse(&["--manifest-url-header=bad name:x"]).is_err());
    assert!(parse(&["--manifest-url-header=:x"]).is_err());
}

#[test]
fn file_then_flags_precedence() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        &dir,
        "config.yaml",
        &format!(
            "{HEAD}staticPodPath: manifests\nsyncFrequency: 10s\nfileCheckFrequency: 1m30s\n\
             readOnlyPort: 0\nhealthzPort: 1234\nmaxPods: 20\naddress: 0.0.0.0\n\
             staticPodURL: http://10.0.0.1/pods\nstaticPodURLHeader:\n  X-Token: [\"file-secret\"]\n\
             podLogsDir: /data/logs\ncontainerRuntimeEndpoint: unix:///tmp/c.sock\nruntimeRequestTimeout: 30s\n"
        ),
    );
    let c = parse(&["--config", &path, "--sync-frequency=5s", "--healthz-port=0"]).unwrap();
    // File values over defaults.
    assert_eq!(c.pod_manifest_path, dir.path().join("manifests"));
    assert_eq!(c.file_check_frequency, Duration::from_secs(90));
    assert_eq!(c.read_only_port, 0);
    assert_eq!(c.max_pods, 20);
    assert_eq!(c.address.to_string(), "0.0.0.0");
    assert_eq!(c.manifest_url.as_deref(), Some("http://10.0.0.1/pods"));
    assert_eq!(
        c.manifest_url_headers,
        vec![("X-Token".to_string(), "file-secret".to_string())]
    );
    assert_eq!(c.pod_logs_dir, PathBuf::from("/data/logs"));
    assert_eq!(c.runtime_endpoint, "unix:///tmp/c.sock");
    assert_eq!(c.runtime_request_timeout, Duration::from_secs(30));
    // Flags over file values, regardless of flag order relative to --config.
    assert_eq!(c.sync_frequency, Duration::from_secs(5));
    assert_eq!(c.healthz_port, 0);
    let c = parse(&["--max-pods=3", &format!("--config={path}")]).unwrap();
    assert_eq!(c.max_pods, 3);
    // Header flags replace the file's headers.
    let c = parse(&["--config", &path, "--manifest-url-header=A:b"]).unwrap();
    assert_eq!(
        c.manifest_url_headers,
        vec![("A".to_string(), "b".to_string())]
    );
    assert!(c.warnings.is_empty());
}

/// evictionHard etc. from the file and the kubelet's flags; flags win; errors name the
/// field; reservations feed allocatable.
#[test]
fn eviction_settings_from_file_and_flags() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        &dir,
        "config.yaml",
        &format!(
            "{HEAD}evictionHard:\n  memory.available: 200Mi\n  nodefs.available: \"5%\"\n\
             evictionSoft: {{memory.available: 1Gi}}\n\
             evictionSoftGracePeriod: {{memory.available: 1m30s}}\n\
             evictionPressureTransitionPeriod: 30s\n\
             systemReserved: {{cpu: 500m, memory: 256Mi}}\n\
             kubeReserved: {{memory: 256Mi}}\n\
             imageGCHighThresholdPercent: 90\n\
             imageMinimumGCAge: 5m\n\
             containerLogMonitorInterval: 3s\n"
        ),
    );
    let c = parse(&["--config", &path]).unwrap();
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    assert_eq!(c.eviction.thresholds.len(), 3);
    assert_eq!(
        c.eviction.pressure_transition_period,
        Duration::from_secs(30)
    );
    assert_eq!(c.eviction.reserved_memory, 512 << 20);
    assert_eq!(c.eviction.reserved_cpu_millis, 500);
    assert_eq!(c.eviction.image_gc.high_percent, 90);
    assert_eq!(c.eviction.image_gc.min_age, Duration::from_secs(300));
    assert_eq!(c.container_log_monitor_interval, Duration::from_secs(3));
    let (cpu, mem) = c.eviction.allocatable(crate::node::Capacity {
        cpu_millis: 2000,
        memory_bytes: 2 << 30,
    });
    assert_eq!((cpu, mem), (1500, (2 << 30) - (512 << 20) - (200 << 20)));
    // The flag replaces the file's whole map.
    let c = parse(&["--config", &path, "--eviction-hard=pid.available<1000"]).unwrap();
    assert_eq!(
        c.eviction.thresholds.iter().filter(|t| t.is_hard()).count(),
        1
    );
    // Defaults without any setting: the kubelet's four.
    assert_eq!(parse(&[]).unwrap().eviction.thresholds.len(), 4);

    let err = |args: &[&str]| parse(args).unwrap_err().to_string();
    assert!(err(&["--eviction-hard=memory.free<1Gi"]).contains("memory.free"));
    assert!(
        err(&["--eviction-soft=memory.available<1Gi"]).contains("evictionSoftGracePeriod"),
        "soft threshold without grace period"
    );
    assert!(
        err(&[
            "--image-gc-high-threshold=50",
            "--image-gc-low-threshold=60"
        ])
        .contains("imageGCLowThresholdPercent (60) must be less than")
    );
    assert!(err(&["--system-reserved=gpu=1"]).contains("systemReserved: gpu"));
    assert_eq!(
        parse(&["--cgroup-driver=systemd"]).unwrap().cgroup_driver,
        crate::cm::CgroupDriver::Systemd
    );
    assert!(err(&["--cgroup-driver=cgroupfs2"]).contains("--cgroup-driver"));
    let bad = write(
        &dir,
        "bad.yaml",
        &format!("{HEAD}evictionHard: {{memory.available: [1]}}\n"),
    );
    let e = parse(&["--config", &bad]).unwrap_err().to_string();
    assert!(
        e.contains("evictionHard.memory.available") && e.contains("bad.yaml"),
        "{e}"
    );
}

#[test]
fn json_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        &dir,
        "config.json",
        "{\n\t\"apiVersion\": \"kubelet.config.k8s.io/v1beta1\",\n\t\"kind\": \"KubeletConfiguration\",\n\t\"staticPodPath\": \"/srv/m\", \"maxPods\": 7}",
    );
    let c = parse(&["--config", &path]).unwrap();
    assert_eq!(
        (c.pod_manifest_path, c.max_pods),
        (PathBuf::from("/srv/m"), 7)
    );
}

/// The kubelet's `--register-with-taints` (`ParseTaints`: `key=value:Effect` or
/// `key:Effect`, the three effects, no duplicate key+effect) and `registerWithTaints`.
#[test]
fn register_with_taints_from_flag_and_file() {
    let c = parse(&["--register-with-taints=dedicated=edge:NoSchedule, gpu:NoExecute"]).unwrap();
    assert_eq!(
        c.register_with_taints,
        vec![
            Taint {
                key: "dedicated".into(),
                value: "edge".into(),
                effect: "NoSchedule".into()
            },
            Taint {
                key: "gpu".into(),
                value: String::new(),
                effect: "NoExecute".into()
            },
        ]
    );
    for (bad, why) in [
        (
            "--register-with-taints=dedicated=edge",
            "expected <key>=<value>:<effect>",
        ),
        (
            "--register-with-taints=a=b:Sometimes",
            "unsupported taint effect",
        ),
        ("--register-with-taints=a b:NoSchedule", "key:"),
        (
            "--register-with-taints=a:NoSchedule,a=x:NoSchedule",
            "duplicated taints",
        ),
    ] {
        let e = parse(&[bad]).unwrap_err().to_string();
        assert!(
            e.contains("register-with-taints") && e.contains(why),
            "{bad}: {e}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        &dir,
        "taints.yaml",
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nregisterWithTaints:\n- {key: edge, effect: PreferNoSchedule}\n",
    );
    let c = parse(&["--config", &path]).unwrap();
    assert_eq!(c.register_with_taints[0].effect, "PreferNoSchedule");
    let path = write(
        &dir,
        "bad-taints.yaml",
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nregisterWithTaints:\n- {key: edge, effect: NoSchedule}\n- {key: x, effect: Never}\n",
    );
    let e = parse(&["--config", &path]).unwrap_err().to_string();
    assert!(
        e.contains("registerWithTaints[1]") && e.contains("Never"),
        "{e}"
    );
}

#[test]
fn unknown_fields_warn_but_do_not_fail() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        &dir,
        "config.yaml",
        &format!(
            "{HEAD}cpuManagerPolicy: static\nauthentication:\n  anonymous: {{enabled: false}}\ntopologyManagerPolicy: none\nmaxPods: 9\n"
        ),
    );
    let c = parse(&["--config", &path]).unwrap();
    assert_eq!(c.max_pods, 9);
    assert_eq!(c.warnings.len(), 2, "{:?}", c.warnings);
    assert!(
        c.warnings
            .iter()
            .any(|w| w.contains("\"cpuManagerPolicy\"") && w.contains("config.yaml"))
    );
    assert!(
        c.warnings
            .iter()
            .any(|w| w.contains("\"topologyManagerPolicy\""))
    );
}

#[test]
fn warnings_are_logged_with_tracing() {
    use std::sync::{Arc, Mutex};
    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let path = write(&dir, "config.yaml", &format!("{HEAD}featureGates: {{}}\n"));
    let c = parse(&["--config", &path]).unwrap();
    let buf = Buf::default();
    let writer = buf.clone();
    let sub = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    tracing::subscriber::with_default(sub, || c.log_warnings());
    let out = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
    assert!(
        out.contains("WARN") && out.contains("\"featureGates\""),
        "{out}"
    );
}

#[test]
fn bad_type_names_file_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        &dir,
        "config.yaml",
        &format!("{HEAD}fileCheckFrequency: 20\n"),
    );
    let e = parse(&["--config", &path]).unwrap_err();
    let msg = e.to_string();
    assert!(
        matches!(&e, ConfigError::InvalidField { field, .. } if field == "fileCheckFrequency"),
        "{msg}"
    );
    assert!(
        msg.starts_with(&format!("{path}: fileCheckFrequency: ")),
        "{msg}"
    );

    let path = write(&dir, "c2.yaml", &format!("{HEAD}fileCheckFrequency: 20x\n"));
    let msg = parse(&["--config", &path]).unwrap_err().to_string();
    assert!(
        msg.starts_with(&format!(
            "{path}: fileCheckFrequency: invalid duration \"20x\""
        )),
        "{msg}"
    );

    let path = write(&dir, "c3.yaml", &format!("{HEAD}readOnlyPort: 99999\n"));
    assert!(
        parse(&["--config", &path])
            .unwrap_err()
            .to_string()
            .contains(": readOnlyPort: invalid port")
    );

    let path = write(&dir, "c4.yaml", &format!("{HEAD}maxPods: lots\n"));
    assert!(
        parse(&["--config", &path])
            .unwrap_err()
            .to_string()
            .contains(": maxPods: invalid type")
    );

    let path = write(&dir, "c5.yaml", "kind: KubeletConfiguration\n");
    assert!(
        parse(&["--config", &path])
            .unwrap_err()
            .to_string()
            .contains(": apiVersion: missing")
    );

    let path = write(&dir, "c6.yaml", "apiVersion: v1\nkind: Pod\n");
    assert!(parse(&["--config", &path]).is_err());

    for (name, text) in [
        ("c7.yaml", "a: [\n"),
        ("c8.yaml", "- 1\n"),
        ("c9.yaml", ""),
        ("c10.json", "{\"a\":"),
    ] {
        let path = write(&dir, name, text);
        let e = parse(&["--config", &path]).unwrap_err();
        assert!(e.to_string().starts_with(&path), "{e}");
    }

    let e = parse(&["--config", "/nonexistent/nanolet.yaml"]).unwrap_err();
    assert!(matches!(e, ConfigError::ReadFile { .. }));
    assert!(e.to_string().contains("/nonexistent/nanolet.yaml"));
}

/// `checkpointSecrets` (nanolet only): on by default, off from the flag or the file, shown in
/// `/configz`.
#[test]
fn checkpoint_secrets_from_flag_and_file() {
    assert!(parse(&[]).unwrap().checkpoint_secrets);
    let c = parse(&["--checkpoint-secrets=false"]).unwrap();
    assert!(!c.checkpoint_secrets);
    assert_eq!(c.redacted_json()["checkpointSecrets"], false);
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        &dir,
        "config.yaml",
        &format!("{HEAD}checkpointSecrets: false\n"),
    );
    assert!(!parse(&["--config", &path]).unwrap().checkpoint_secrets);
    let c = parse(&["--config", &path, "--checkpoint-secrets"]).unwrap();
    assert!(c.checkpoint_secrets);
}

#[test]
fn security_options_from_flags_and_file() {
    let c = parse(&[]).unwrap();
    assert_eq!(c.security, SecurityPolicy::default());
    assert!(c.security.allow_privileged && !c.allow_insecure_manifest_dir);
    let c = parse(&[
        "--allow-privileged=false",
        "--deny-host-namespaces",
        "--allowed-host-paths=/var/log, /srv",
        "--allow-insecure-manifest-dir",
    ])
    .unwrap();
    assert!(!c.security.allow_privileged && c.security.deny_host_namespaces);
    assert_eq!(
        c.security.allowed_host_paths,
        vec![PathBuf::from("/var/log"), PathBuf::from("/srv")]
    );
    assert!(c.allow_insecure_manifest_dir);
    let j = c.redacted_json();
    assert_eq!(j["allowPrivileged"], false);
    assert_eq!(
        j["allowedHostPaths"],
        serde_json::json!(["/var/log", "/srv"])
    );
    let e = parse(&["--allowed-host-paths=var/log"])
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("--allowed-host-paths: \"var/log\""), "{e}");
    assert!(parse(&["--allowed-host-paths=/a/../etc"]).is_err());

    let dir = tempfile::tempdir().unwrap();
    let path = write(
        &dir,
        "config.yaml",
        &format!(
            "{HEAD}allowPrivileged: false\ndenyHostNamespaces: true\nallowedHostPaths: [/data]\nallowInsecureManifestDir: true\n"
        ),
    );
    let c = parse(&["--config", &path]).unwrap();
    assert!(!c.security.allow_privileged && c.security.deny_host_namespaces);
    assert_eq!(c.security.allowed_host_paths, vec![PathBuf::from("/data")]);
    assert!(c.allow_insecure_manifest_dir);
    // Flags win over the file.
    let c = parse(&["--config", &path, "--allow-privileged=true"]).unwrap();
    assert!(c.security.allow_privileged);
    let path = write(&dir, "c2.yaml", &format!("{HEAD}allowedHostPaths: [rel]\n"));
    let e = parse(&["--config", &path]).unwrap_err().to_string();
    assert!(e.contains("allowedHostPaths: \"rel\""), "{e}");
}

#[test]
fn manifest_url_tls_settings() {
    let url = "--manifest-url=https://example.test/pods";
    if !cfg!(feature = "tls") {
        return;
    }
    let c = parse(&[
        url,
        "--manifest-url-ca-file=/etc/nanolet/ca.pem",
        "--manifest-url-client-cert=/etc/nanolet/client.pem",
        "--manifest-url-client-key=/etc/nanolet/client-key.pem",
    ])
    .unwrap();
    assert_eq!(
        c.manifest_url_ca_file.as_deref(),
        Some(Path::new("/etc/nanolet/ca.pem"))
    );
    let j = c.redacted_json();
    assert_eq!(j["staticPodURLCAFile"], "/etc/nanolet/ca.pem");
    assert_eq!(
        j["staticPodURLClientKeyFile"],
        "/etc/nanolet/client-key.pem"
    );
    let e = parse(&[url, "--manifest-url-client-cert=/c.pem"])
        .unwrap_err()
        .to_string();
    assert!(e.contains("needs --manifest-url-client-key"), "{e}");
    let e = parse(&[url, "--manifest-url-client-key=/k.pem"])
        .unwrap_err()
        .to_string();
    assert!(e.contains("needs --manifest-url-client-cert"), "{e}");
    let e = parse(&[
        "--manifest-url=http://example.test/pods",
        "--manifest-url-ca-file=/ca.pem",
    ])
    .unwrap_err()
    .to_string();
    assert!(e.contains("need an https:// --manifest-url"), "{e}");
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        &dir,
        "config.yaml",
        &format!(
            "{HEAD}staticPodURL: https://example.test/p\nstaticPodURLCAFile: ca.pem\nstaticPodURLClientCertFile: c.pem\nstaticPodURLClientKeyFile: k.pem\n"
        ),
    );
    let c = parse(&["--config", &path]).unwrap();
    assert_eq!(c.manifest_url_ca_file, Some(dir.path().join("ca.pem")));
    assert_eq!(c.manifest_url_client_key, Some(dir.path().join("k.pem")));
}

#[test]
fn header_type_errors_do_not_leak_values() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        &dir,
        "config.yaml",
        &format!("{HEAD}staticPodURLHeader:\n  Authorization: Bearer s3cr3t\n"),
    );
    let msg = parse(&["--config", &path]).unwrap_err().to_string();
    assert!(msg.contains("staticPodURLHeader.Authorization"), "{msg}");
    assert!(!msg.contains("s3cr3t"), "{msg}");
    let path = write(
        &dir,
        "c2.yaml",
        &format!("{HEAD}staticPodURLHeader:\n  Authorization: [\"a\\r\\nb: s3cr3t\"]\n"),
    );
    let msg = parse(&["--config", &path]).unwrap_err().to_string();
    assert!(
        msg.contains("line break") && !msg.contains("s3cr3t"),
        "{msg}"
    );
}

#[test]
fn redaction() {
    let c = parse(&[
        "--manifest-url=http://user:pa55@example.com/pods?x=1",
        "--manifest-url-header=Authorization:Bearer s3cr3t,Authorization:second-s3cr3t,X-A:t0ken",
    ])
    .unwrap();
    let dbg = format!("{c:?} {c:#?}");
    assert!(
        !dbg.contains("s3cr3t") && !dbg.contains("t0ken") && !dbg.contains("pa55"),
        "{dbg}"
    );
    assert!(dbg.contains("Authorization: <redacted>"), "{dbg}");
    // Query values are redacted too (they may hold a presigned URL's credentials).
    assert!(
        dbg.contains("http://<redacted>@example.com/pods?x=<redacted>"),
        "{dbg}"
    );
    let j = c.redacted_json();
    let s = j.to_string();
    assert!(
        !s.contains("s3cr3t") && !s.contains("t0ken") && !s.contains("pa55"),
        "{s}"
    );
    assert_eq!(
        j["staticPodURLHeader"]["Authorization"],
        serde_json::json!(["<redacted>", "<redacted>"])
    );
    assert_eq!(
        j["staticPodURLHeader"]["X-A"],
        serde_json::json!(["<redacted>"])
    );
    assert_eq!(j["syncFrequency"], "1m0s");
    assert_eq!(j["runtimeRequestTimeout"], "2m0s");
    assert_eq!(j["readOnlyPort"], 10255);
    assert_eq!(j["nodeName"], "edge-box-01");
    assert_eq!(j["kind"], "KubeletConfiguration");
    // The real values are still there for the URL source to use.
    assert_eq!(c.manifest_url_headers[0].1, "Bearer s3cr3t");
}

#[test]
fn https_manifest_url_needs_the_tls_feature() {
    let r = parse(&["--manifest-url=HTTPS://user:pa55@example.com/pods"]);
    if cfg!(feature = "tls") {
        assert!(r.is_ok(), "{r:?}");
    } else {
        let e = r.unwrap_err().to_string();
        assert!(
            e.contains("--manifest-url") && e.contains("`tls` feature"),
            "{e}"
        );
        assert!(!e.contains("pa55"), "{e}");
    }
    assert!(parse(&["--manifest-url=http://example.com/pods"]).is_ok());
}

#[test]
fn url_redaction() {
    assert_eq!(redact_url("http://h/p"), "http://h/p");
    assert_eq!(
        redact_url("http://u@h:80/p@q"),
        "http://<redacted>@h:80/p@q"
    );
    assert_eq!(redact_url("not a url"), "not a url");
    // Query values and the fragment too (presigned URLs carry credentials there): what
    // /configz, Debug and flag errors show.
    assert_eq!(
        redact_url("https://h/p?token=s3cret&X-Amz-Signature=abc#frag"),
        format!("https://h/p?token={REDACTED}&X-Amz-Signature={REDACTED}#{REDACTED}")
    );
}

#[test]
fn node_names() {
    assert_eq!(normalize_node_name(" My.Host-1 \n").unwrap(), "my.host-1");
    assert!(normalize_node_name("").is_err());
    assert!(normalize_node_name("-a").is_err());
    assert!(normalize_node_name("a..b").is_err());
    assert!(normalize_node_name(&"a".repeat(254)).is_err());
}

#[test]
fn off_loopback_read_only_port_needs_a_token_file() {
    let e = parse(&["--address=0.0.0.0"]).unwrap_err();
    assert!(matches!(e, ConfigError::ReadOnlyNeedsToken(_)), "{e}");
    assert!(e.to_string().contains("--read-only-token-file"), "{e}");
    // Disabled port, loopback, or a token file: fine.
    assert!(parse(&["--address=0.0.0.0", "--read-only-port=0"]).is_ok());
    assert!(parse(&["--address=::1"]).is_ok());
    let c = parse(&[
        "--address=0.0.0.0",
        "--read-only-token-file=/etc/nanolet/token",
    ])
    .unwrap();
    assert_eq!(
        c.read_only_token_file.as_deref(),
        Some(Path::new("/etc/nanolet/token"))
    );
    assert_eq!(c.redacted_json()["readOnlyTokenFile"], "/etc/nanolet/token");

    let dir = tempfile::tempdir().unwrap();
    let path = write(
        &dir,
        "config.yaml",
        &format!("{HEAD}address: 10.0.0.1\nreadOnlyTokenFile: token\n"),
    );
    let c = parse(&["--config", &path]).unwrap();
    assert_eq!(c.read_only_token_file, Some(dir.path().join("token")));
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
}

#[test]
fn node_ip_is_one_address_or_one_per_family() {
    // kubelet --node-ip: ParseNodeIPArgument (dual-stack pairs) and validateNodeIP.
    assert!(parse(&[]).unwrap().node_ips.is_empty());
    let c = parse(&["--node-ip=192.0.2.5"]).unwrap();
    assert_eq!(c.node_ips, vec![IpAddr::from([192, 0, 2, 5])]);
    let c = parse(&["--node-ip", "2001:db8::5, 192.0.2.5"]).unwrap();
    assert_eq!(c.node_ips.len(), 2);
    assert!(c.node_ips[0].is_ipv6() && c.node_ips[1].is_ipv4());
    for (bad, why) in [
        ("192.0.2.5,192.0.2.6", "one IPv4 and one IPv6"),
        ("192.0.2.5,2001:db8::5,2001:db8::6", "at most two"),
        ("127.0.0.1", "loopback"),
        ("::", "unspecified"),
        ("169.254.1.1", "link-local"),
        ("fe80::1", "link-local"),
        ("224.0.0.1", "multicast"),
        ("node1", "invalid IP address"),
    ] {
        let e = parse(&[&format!("--node-ip={bad}")])
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("--node-ip: ") && e.contains(why),
            "{bad}: {e}"
        );
    }
}

#[test]
fn logging_verbosity_in_the_file_and_v_over_it() {
    // KubeletConfiguration logging.verbosity (component-base); --v wins, as flags do.
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        &dir,
        "config.yaml",
        &format!("{HEAD}logging:\n  verbosity: 4\n  format: text\n"),
    );
    let c = parse(&["--config", &path]).unwrap();
    assert_eq!(c.verbosity, 4);
    assert_eq!(c.log_level(), tracing::Level::DEBUG);
    assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
    assert!(
        c.warnings[0].contains("\"logging.format\""),
        "{:?}",
        c.warnings
    );
    assert_eq!(parse(&["--config", &path, "--v=0"]).unwrap().verbosity, 0);
    let bad = write(
        &dir,
        "bad.yaml",
        &format!("{HEAD}logging:\n  verbosity: -1\n"),
    );
    let e = parse(&["--config", &bad]).unwrap_err().to_string();
    assert!(e.contains("logging.verbosity"), "{e}");
}

#[test]
fn resolv_conf_flag_and_field() {
    // kubelet: --resolv-conf / resolvConf, default /etc/resolv.conf; "" is no host DNS;
    // resolvConf is a path ref, relative to the config file.
    assert_eq!(
        parse(&[]).unwrap().resolv_conf.as_deref(),
        Some(Path::new("/etc/resolv.conf"))
    );
    let c = parse(&["--resolv-conf="]).unwrap();
    assert_eq!(c.resolv_conf, None);
    assert_eq!(c.redacted_json()["resolvConf"], "");
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        &dir,
        "config.yaml",
        &format!("{HEAD}resolvConf: dns/resolv.conf\n"),
    );
    let c = parse(&["--config", &path]).unwrap();
    assert_eq!(c.resolv_conf, Some(dir.path().join("dns/resolv.conf")));
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    let c = parse(&["--config", &path, "--resolv-conf=/run/r.conf"]).unwrap();
    assert_eq!(c.resolv_conf.as_deref(), Some(Path::new("/run/r.conf")));
}

/// kubelet: `--cluster-dns` (a string slice: repeatable, comma-separated; the flags replace the
/// file's `clusterDNS`) and `--cluster-domain` / `clusterDomain`; nanolet refuses an item that
/// is not an IP address.
#[test]
fn cluster_dns_and_domain_from_flags_and_file() {
    let c = parse(&[]).unwrap();
    assert!(c.cluster_dns.is_empty() && c.cluster_domain.is_empty());
    let c = parse(&[
        "--cluster-dns=10.96.0.10,fd00::a",
        "--cluster-dns",
        "10.96.0.11",
        "--cluster-domain=cluster.local",
    ])
    .unwrap();
    let ips: Vec<String> = c.cluster_dns.iter().map(ToString::to_string).collect();
    assert_eq!(ips, ["10.96.0.10", "fd00::a", "10.96.0.11"]);
    assert_eq!(c.cluster_domain, "cluster.local");
    assert_eq!(
        c.redacted_json()["clusterDNS"],
        serde_json::json!(["10.96.0.10", "fd00::a", "10.96.0.11"])
    );
    assert_eq!(c.redacted_json()["clusterDomain"], "cluster.local");
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        &dir,
        "config.yaml",
        &format!("{HEAD}clusterDNS: [10.0.0.10]\nclusterDomain: k8s.lan\n"),
    );
    let c = parse(&["--config", &path]).unwrap();
    assert_eq!(c.cluster_dns, [IpAddr::from([10, 0, 0, 10])]);
    assert_eq!(c.cluster_domain, "k8s.lan");
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    let c = parse(&["--config", &path, "--cluster-dns=10.0.0.11"]).unwrap();
    assert_eq!(c.cluster_dns, [IpAddr::from([10, 0, 0, 11])]);
    let e = parse(&["--cluster-dns=dns.lan"]).unwrap_err().to_string();
    assert!(e.contains("cluster-dns") && e.contains("dns.lan"), "{e}");
    let bad = write(
        &dir,
        "bad.yaml",
        &format!("{HEAD}clusterDNS: [10.0.0.1, nope]\n"),
    );
    let e = parse(&["--config", &bad]).unwrap_err().to_string();
    assert!(e.contains("clusterDNS[1]"), "{e}");
}

#[test]
fn kubelet_server_defaults_flags_and_nested_fields() {
    let c = parse(&[]).unwrap();
    assert_eq!(c.port, if cfg!(feature = "tls") { 10250 } else { 0 });
    assert!(
        !c.anonymous_auth,
        "nanolet's default (the kubelet's is true)"
    );
    assert_eq!(c.authorization_mode(), AuthorizationMode::AlwaysAllow);
    assert_eq!(
        c.authentication_token_webhook_cache_ttl,
        Duration::from_secs(120)
    );
    assert_eq!(
        c.authorization_webhook_cache_authorized_ttl,
        Duration::from_secs(300)
    );
    assert_eq!(
        c.authorization_webhook_cache_unauthorized_ttl,
        Duration::from_secs(30)
    );

    let dir = tempfile::tempdir().unwrap();
    let kc = write(&dir, "kubeconfig", "");
    let c = parse(&["--kubeconfig", &kc]).unwrap();
    assert_eq!(
        c.authorization_mode(),
        AuthorizationMode::Webhook,
        "default with --kubeconfig"
    );

    let path = write(
        &dir,
        "config.yaml",
        &format!(
            "{HEAD}port: 11250\nauthentication:\n  x509:\n    clientCAFile: ca.crt\n  anonymous:\n    enabled: true\n  webhook:\n    enabled: true\n    cacheTTL: 10s\nauthorization:\n  mode: AlwaysAllow\n  webhook:\n    cacheAuthorizedTTL: 1m\n    cacheUnauthorizedTTL: 5s\n  bogus: 1\n"
        ),
    );
    let c = parse(&["--config", &path, "--kubeconfig", &kc]).unwrap();
    if cfg!(feature = "tls") {
        assert_eq!(c.port, 11250);
    }
    assert_eq!(
        c.client_ca_file,
        Some(dir.path().join("ca.crt")),
        "relative to the file"
    );
    assert!(c.anonymous_auth && c.authentication_token_webhook);
    assert_eq!(
        c.authentication_token_webhook_cache_ttl,
        Duration::from_secs(10)
    );
    assert_eq!(c.authorization_mode, Some(AuthorizationMode::AlwaysAllow));
    assert_eq!(
        c.authorization_webhook_cache_authorized_ttl,
        Duration::from_secs(60)
    );
    assert_eq!(
        c.authorization_webhook_cache_unauthorized_ttl,
        Duration::from_secs(5)
    );
    assert!(
        c.warnings
            .iter()
            .any(|w| w.contains("\"authorization.bogus\"")),
        "{:?}",
        c.warnings
    );
    // /configz nests them as the kubelet's.
    let z = c.redacted_json();
    assert_eq!(
        z["authentication"]["x509"]["clientCAFile"],
        path_str(&dir.path().join("ca.crt"))
    );
    assert_eq!(z["authentication"]["webhook"]["cacheTTL"], "10s");
    assert_eq!(z["authorization"]["mode"], "AlwaysAllow");
    assert_eq!(z["authorization"]["webhook"]["cacheUnauthorizedTTL"], "5s");

    // Flags win over the file.
    let c = parse(&[
        "--config",
        &path,
        "--kubeconfig",
        &kc,
        "--anonymous-auth=false",
        "--authorization-mode=Webhook",
        "--client-ca-file=/etc/ca.pem",
    ])
    .unwrap();
    assert!(!c.anonymous_auth);
    assert_eq!(c.authorization_mode(), AuthorizationMode::Webhook);
    assert_eq!(c.client_ca_file, Some(PathBuf::from("/etc/ca.pem")));

    let bad = write(
        &dir,
        "bad.yaml",
        &format!("{HEAD}authentication:\n  webhook:\n    cacheTTL: soon\n"),
    );
    let e = parse(&["--config", &bad]).unwrap_err().to_string();
    assert!(e.contains("authentication.webhook.cacheTTL"), "{e}");
}

fn path_str(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

#[test]
fn kubelet_server_settings_that_do_not_fit() {
    let e = parse(&["--authorization-mode=RBAC"])
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "--authorization-mode: invalid authorization mode \"RBAC\": use AlwaysAllow or Webhook"
    );
    let e = parse(&["--authorization-mode=Webhook"])
        .unwrap_err()
        .to_string();
    assert!(e.contains("needs --kubeconfig"), "{e}");
    let e = parse(&["--authentication-token-webhook"])
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("--authentication-token-webhook: "), "{e}");
    if !cfg!(feature = "tls") {
        let e = parse(&["--port=10250"]).unwrap_err().to_string();
        assert!(e.contains("needs a build with the tls feature"), "{e}");
    }
}

#[test]
fn certificate_settings_from_flags_and_file() {
    // Upstream: --cert-dir and --bootstrap-kubeconfig are flags only; rotateCertificates,
    // serverTLSBootstrap, tlsCertFile and tlsPrivateKeyFile are KubeletConfiguration fields.
    let c = parse(&[]).unwrap();
    assert_eq!(c.cert_dir(), PathBuf::from("/var/lib/nanolet/pki"));
    assert!(!c.rotate_certificates && !c.server_tls_bootstrap);
    let c = parse(&["--root-dir=/data/nl"]).unwrap();
    assert_eq!(c.cert_dir(), PathBuf::from("/data/nl/pki"));
    let d = tempfile::tempdir().unwrap();
    let file = write(
        &d,
        "c.yaml",
        &format!(
            "{HEAD}rotateCertificates: true\nserverTLSBootstrap: true\ntlsCertFile: tls.crt\ntlsPrivateKeyFile: tls.key\n"
        ),
    );
    let c = parse(&[
        &format!("--config={file}"),
        "--kubeconfig=/etc/nanolet/kubelet.conf",
        "--bootstrap-kubeconfig=/etc/nanolet/bootstrap.conf",
        "--cert-dir=/srv/pki",
    ])
    .unwrap();
    assert!(c.rotate_certificates && c.server_tls_bootstrap);
    assert_eq!(
        c.tls_cert_file,
        Some(d.path().join("tls.crt")),
        "relative to the file"
    );
    assert_eq!(c.tls_private_key_file, Some(d.path().join("tls.key")));
    assert_eq!(
        c.bootstrap_kubeconfig,
        Some(PathBuf::from("/etc/nanolet/bootstrap.conf"))
    );
    assert_eq!(c.cert_dir(), PathBuf::from("/srv/pki"));
    let z = c.redacted_json();
    assert_eq!(z["rotateCertificates"], true);
    assert_eq!(z["serverTLSBootstrap"], true);
    assert_eq!(z["certDir"], "/srv/pki");
    let c = parse(&["--rotate-certificates=false", &format!("--config={file}")]).unwrap();
    assert!(!c.rotate_certificates, "the flag wins over the file");
}

#[test]
fn certificate_settings_that_do_not_fit_together() {
    let e = parse(&["--tls-cert-file=/a.crt"]).unwrap_err().to_string();
    assert!(
        e.contains("--tls-cert-file") && e.contains("--tls-private-key-file"),
        "{e}"
    );
    let e = parse(&["--tls-private-key-file=/a.key"])
        .unwrap_err()
        .to_string();
    assert!(e.contains("needs --tls-cert-file"), "{e}");
    let e = parse(&["--bootstrap-kubeconfig=/b.conf"])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("--bootstrap-kubeconfig") && e.contains("needs --kubeconfig"),
        "{e}"
    );
    let r = parse(&["--rotate-certificates"]);
    if cfg!(feature = "tls") {
        assert!(r.is_ok(), "{r:?}");
    } else {
        let e = r.unwrap_err().to_string();
        assert!(e.contains("needs a build with the tls feature"), "{e}");
    }
}

/// eventRecordQPS (default 50, 0 = no limit) and eventBurst (default 100), as the
/// KubeletConfiguration fields and the kubelet's --event-qps / --event-burst; int32, not
/// negative.
#[test]
fn event_rate_settings() {
    let c = parse(&[]).unwrap();
    assert_eq!((c.event_record_qps, c.event_burst), (50, 100));
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        &dir,
        "config.yaml",
        &format!("{HEAD}eventRecordQPS: 0\neventBurst: 7\n"),
    );
    let c = parse(&["--config", &path]).unwrap();
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    assert_eq!((c.event_record_qps, c.event_burst), (0, 7));
    let c = parse(&["--config", &path, "--event-qps=5"]).unwrap();
    assert_eq!(c.event_record_qps, 5);
    let e = parse(&["--event-burst=-1"]).unwrap_err().to_string();
    assert!(e.contains("-1 must be from 0 to 2147483647"), "{e}");
    let path = write(&dir, "bad.yaml", &format!("{HEAD}eventRecordQPS: -3\n"));
    let e = parse(&["--config", &path]).unwrap_err().to_string();
    assert!(e.contains("eventRecordQPS") && e.contains("-3"), "{e}");
}

/// KubeletConfiguration defaulting (v1beta1 SetDefaults_KubeletConfiguration):
/// nodeStatusUpdateFrequency 10s; nodeStatusReportFrequency 5m, or nodeStatusUpdateFrequency
/// when that is set explicitly ("for backward compatibility").
#[test]
fn node_status_frequencies() {
    let secs = Duration::from_secs;
    let c = parse(&[]).unwrap();
    assert_eq!(
        (
            c.node_status_update_frequency(),
            c.node_status_report_frequency()
        ),
        (secs(10), secs(300))
    );
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        &dir,
        "config.yaml",
        &format!("{HEAD}nodeStatusUpdateFrequency: 20s\n"),
    );
    let c = parse(&["--config", &path]).unwrap();
    assert_eq!(
        (
            c.node_status_update_frequency(),
            c.node_status_report_frequency()
        ),
        (secs(20), secs(20))
    );
    let c = parse(&["--config", &path, "--node-status-report-frequency=1m"]).unwrap();
    assert_eq!(c.node_status_report_frequency(), secs(60));
    let c = parse(&["--node-status-update-frequency=2s"]).unwrap();
    assert_eq!(c.node_status_report_frequency(), secs(2));
}

/// The kubelet's validation of enforceNodeAllocatable (pkg/kubelet/apis/config/validation):
/// known options only, `none` alone, a reservation enforced only with its cgroup named.
#[test]
fn enforce_node_allocatable_is_validated_as_the_kubelets() {
    let err = |a: &[&str]| parse(a).unwrap_err().to_string();
    assert_eq!(
        parse(&[]).unwrap().enforce_node_allocatable,
        vec!["pods".to_string()]
    );
    assert!(
        err(&["--enforce-node-allocatable=pods,system-reserved"])
            .contains("needs systemReservedCgroup")
    );
    assert!(err(&["--enforce-node-allocatable=none,pods"]).contains("cannot be combined"));
    assert!(err(&["--enforce-node-allocatable=memory"]).contains("invalid option"));
    let c = parse(&[
        "--enforce-node-allocatable=pods,kube-reserved",
        "--kube-reserved-cgroup=/nanolet.slice",
        "--pod-max-pids=1024",
    ])
    .unwrap();
    assert_eq!(c.kube_reserved_cgroup, "/nanolet.slice");
    assert_eq!(c.pod_pids_limit, 1024);
}

/// shutdownGracePeriodByPodPriority: the flag's `priority=seconds` pairs and the file's list
/// of objects give the same groups.
#[test]
fn shutdown_grace_period_by_pod_priority_from_flag_and_file() {
    let c = parse(&["--shutdown-grace-period-by-pod-priority=0=10,2000000000=5"]).unwrap();
    assert_eq!(c.shutdown.groups().len(), 2);
    assert_eq!(c.shutdown.groups()[1].shutdown_grace_period_seconds, 5);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.yaml");
    std::fs::write(
        &path,
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nshutdownGracePeriodByPodPriority:\n- {priority: 0, shutdownGracePeriodSeconds: 10}\n- {priority: 2000000000, shutdownGracePeriodSeconds: 5}\n",
    )
    .unwrap();
    let f = parse(&[&format!("--config={}", path.display())]).unwrap();
    assert_eq!(f.shutdown.groups(), c.shutdown.groups());
}

/// cmd/kubelet/app/options ValidateKubeletFlags with k8s.io/kubelet/pkg/apis IsKubeletLabel:
/// a `kubernetes.io`/`k8s.io` label (or a subdomain's) outside the kubelet's set is refused at
/// start with the kubelet's message (the API server's NodeRestriction would refuse the Node
/// for ever); the allowed prefixes, the well-known keys and other domains pass; then keys must be
/// qualified names and values label values.
#[test]
fn node_labels_are_validated_as_the_kubelet_does() {
    let err = parse(&["--node-labels=node-role.kubernetes.io/edge=,app.k8s.io/x=1,site=a"])
        .expect_err("forbidden labels");
    assert_eq!(
        err.to_string(),
        "unknown 'kubernetes.io' or 'k8s.io' labels specified with --node-labels: \
         [app.k8s.io/x node-role.kubernetes.io/edge]\n--node-labels in the 'kubernetes.io' \
         namespace must begin with an allowed prefix (kubelet.kubernetes.io, node.kubernetes.io) \
         or be in the specifically allowed set (beta.kubernetes.io/arch, \
         beta.kubernetes.io/instance-type, beta.kubernetes.io/os, \
         failure-domain.beta.kubernetes.io/region, failure-domain.beta.kubernetes.io/zone, \
         kubernetes.io/arch, kubernetes.io/hostname, kubernetes.io/os, \
         node.kubernetes.io/instance-type, topology.kubernetes.io/region, \
         topology.kubernetes.io/zone)"
    );
    // NodeRestriction's own prefix is a kubernetes.io subdomain outside the set.
    assert!(parse(&["--node-labels=node-restriction.kubernetes.io/a=b"]).is_err());
    let ok = parse(&[
        "--node-labels=node.kubernetes.io/edge=,x.kubelet.kubernetes.io/y=z,\
         topology.kubernetes.io/zone=z1,node-role.example.com/edge=,k8s.io.example.com/a=b",
    ])
    .expect("allowed labels");
    assert_eq!(ok.node_labels.len(), 5);
    let err = parse(&["--node-labels=bad key=x"]).expect_err("invalid key");
    assert!(
        err.to_string()
            .starts_with("invalid node labels: 'bad key' - "),
        "{err}"
    );
    let err = parse(&["--node-labels=site=-x"]).expect_err("invalid value");
    assert!(
        err.to_string().starts_with("invalid node labels: '-x' - "),
        "{err}"
    );
}

/// qosReserved as the kubelet's ParseQOSReserved (memory only, a percentage 0-100 with its %),
/// and memorySwap.swapBehavior (NoSwap, LimitedSwap; "" is NoSwap), from flags and the file.
#[test]
fn qos_reserved_and_memory_swap_from_flag_and_file() {
    use crate::kuberuntime::container_linux::SwapBehavior;
    let c = parse(&[]).unwrap();
    assert_eq!(c.qos_reserved_memory_percent, None);
    assert_eq!(c.memory_swap_behavior, SwapBehavior::NoSwap);
    let c = parse(&[
        "--qos-reserved=memory=50%",
        "--memory-swap-behavior=LimitedSwap",
    ])
    .unwrap();
    assert_eq!(c.qos_reserved_memory_percent, Some(50));
    assert_eq!(c.memory_swap_behavior, SwapBehavior::LimitedSwap);
    let err = |a: &[&str]| parse(a).unwrap_err().to_string();
    assert!(err(&["--qos-reserved=cpu=50%"]).contains("cannot reserve \"cpu\" resource"));
    assert!(err(&["--qos-reserved=memory=50"]).contains("percentage expected, got '50'"));
    assert!(err(&["--qos-reserved=memory=101%"]).contains("between 0 and 100"));
    assert!(err(&["--memory-swap-behavior=UnlimitedSwap"]).contains("NoSwap or LimitedSwap"));
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        &dir,
        "c.yaml",
        &format!("{HEAD}qosReserved: {{memory: 30%}}\nmemorySwap: {{swapBehavior: LimitedSwap}}\n"),
    );
    let f = parse(&[&format!("--config={path}")]).unwrap();
    assert_eq!(f.qos_reserved_memory_percent, Some(30));
    assert_eq!(f.memory_swap_behavior, SwapBehavior::LimitedSwap);
    let bad = write(
        &dir,
        "b.yaml",
        &format!("{HEAD}memorySwap: {{swapBehavior: Sometimes}}\n"),
    );
    assert!(
        parse(&[&format!("--config={bad}")])
            .unwrap_err()
            .to_string()
            .contains("memorySwap.swapBehavior")
    );
}
