//! Black-box tests of the read-only port and the CLI: the real `nanolet` binary on a real
//! containerd, read with the real `kubectl`, `promtool` and `nanolet get/logs/validate`.

use nanolet_test_support as support;

use serde_json::Value;
use std::fs;
use std::process::{Command, Output, Stdio};
use std::time::Duration;
use support::agent::{NODE, Nanolet};
use support::{Containerd, wait_for};

fn node() -> String {
    NODE.to_lowercase()
}

/// Runs `kubectl --server <url> ARGS` with an empty kubeconfig and a private cache dir.
fn kubectl(n: &Nanolet, args: &[&str]) -> Output {
    kubectl_as(n, n.token.as_deref(), args)
}

fn kubectl_as(n: &Nanolet, token: Option<&str>, args: &[&str]) -> Output {
    let home = n.dir.join("kube-home");
    let _ = fs::create_dir_all(&home);
    let mut cmd = Command::new("kubectl");
    cmd.env("HOME", &home)
        .env("KUBECONFIG", home.join("none"))
        .arg(format!("--server={}", n.url()))
        .arg(format!("--cache-dir={}", home.join("cache").display()))
        .arg("--request-timeout=20s");
    if let Some(t) = token {
        cmd.arg(format!("--token={t}"));
    }
    cmd.args(args).stdin(Stdio::null()).output().expect(
        "kubectl runs (scripts/install-deps.sh installs nothing for it: it must be on PATH)",
    )
}

fn ok(out: Output, what: &str) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{what}: {}\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn nanolet_cli(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nanolet"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run nanolet")
}

/// (status, body, content-type) of a request to the read-only port.
fn http(n: &Nanolet, method: &str, path: &str, token: Option<&str>) -> (u16, String, String) {
    let url = format!("{}{path}", n.url());
    let agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .allow_non_standard_methods(true)
        .build()
        .new_agent();
    let req = ureq::http::Request::builder()
        .method(method)
        .uri(&url)
        .header(
            "Authorization",
            token.map(|t| format!("Bearer {t}")).unwrap_or_default(),
        )
        .body(())
        .expect("request");
    let mut resp = agent.run(req).expect("HTTP request");
    let ct = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let status = resp.status().as_u16();
    let body = resp.body_mut().read_to_string().unwrap_or_default();
    (status, body, ct)
}

const WEB: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\n  labels:\n    app: web\nspec:\n  containers:\n  - name: c\n    image: localhost/busybox:1.36\n    command: [sh, -c, 'echo first; echo second; echo third; sleep 3600']\n    readinessProbe:\n      exec:\n        command: ['true']\n      periodSeconds: 1\n";

/// Crashes once per start, printing its run number: `previous` has the earlier run's line.
const CRASHY: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: crashy\nspec:\n  containers:\n  - name: main\n    image: localhost/busybox:1.36\n    command: [sh, -c, 'echo main up; sleep 3600']\n  - name: crash\n    image: localhost/busybox:1.36\n    command: [sh, -c, 'echo run at $(date +%s) $RANDOM$RANDOM; exit 3']\n";

/// Prints three lines a little apart and exits: `logs -f` must show all and then end.
const TICKER: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: ticker\nspec:\n  restartPolicy: Never\n  containers:\n  - name: t\n    image: localhost/busybox:1.36\n    command: [sh, -c, 'sleep 2; for i in 1 2 3; do echo tick $i; sleep 1; done']\n";

/// The read-only port as kubectl, promtool and nanolet's own CLI see it, on one agent, step
/// by step: web (Running and ready), crashy (one container crashing again and again), broken
/// (an invalid manifest) and, from the `logs -f` step on, ticker (runs to completion).
#[test]
fn kubectl_reads_pods_logs_nodes_and_events_and_writes_are_refused() {
    let ctd = Containerd::start();
    let n = Nanolet::start(
        &ctd,
        &[
            "--manifest-url-header=X-Secret:hunter2-very-secret".into(),
            "--manifest-url=http://127.0.0.1:1/pods".into(),
        ],
    );
    let (web, crashy) = run_web_crashy_and_broken(&n);
    let pod = kubectl_get_pods_prints_tables_and_objects(&n, &web);
    kubectl_logs_current_and_previous(&n, &web, &crashy);
    let ticker = kubectl_logs_follow_until_the_container_ends(&n);
    kubectl_describe_pod_and_get_events(&n, &crashy);
    kubectl_get_nodes(&n);
    writes_are_refused_with_405(&n, &web);
    configz_redacts_secrets(&n);
    metrics_pass_promtool_with_the_kubelet_families(&n);
    stats_summary_and_resource_metrics(&n, &web, &pod);
    cli_gets_logs_and_describes(&n, &web, &crashy, &ticker, &pod);
    cli_exec_runs_through_cri(&n, &ctd, &web, &crashy);
}

/// Writes web, crashy and broken; returns once web is ready and crashy restarted: the full
/// names (web, crashy).
fn run_web_crashy_and_broken(n: &Nanolet) -> (String, String) {
    n.write("web.yaml", WEB);
    n.write("crashy.yaml", CRASHY);
    n.write(
        "broken.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: broken\nspec:\n  containers:\n  - name: c\n    image: ''\n",
    );
    let web = format!("web-{}", node());
    let crashy = format!("crashy-{}", node());
    n.wait_pod("web", "Running and ready", |p| {
        p["status"]["phase"] == "Running" && p["status"]["containerStatuses"][0]["ready"] == true
    });
    n.wait_pod("crashy", "restarted once", |p| {
        p["status"]["containerStatuses"]
            .as_array()
            .is_some_and(|a| {
                a.iter()
                    .any(|c| c["name"] == "crash" && c["restartCount"].as_i64() >= Some(1))
            })
    });
    (web, crashy)
}

/// `get pods` as a table, `get pod` as YAML/JSON, a label selector, a missing pod. Returns web
/// as /pods shows it (its UID and IP are what the later steps expect).
fn kubectl_get_pods_prints_tables_and_objects(n: &Nanolet, web: &str) -> Value {
    // get pods -A -o wide: kubectl's columns from the server-side Table.
    let out = ok(
        kubectl(n, &["get", "pods", "-A", "-o", "wide"]),
        "get pods -A -o wide",
    );
    let mut lines = out.lines();
    let header: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        [
            "NAMESPACE",
            "NAME",
            "READY",
            "STATUS",
            "RESTARTS",
            "AGE",
            "IP",
            "NODE",
            "NOMINATED",
            "NODE",
            "READINESS",
            "GATES"
        ],
        "{out}"
    );
    let web_row: Vec<&str> = out
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some(web))
        .unwrap_or_else(|| panic!("no {web} row:\n{out}"))
        .split_whitespace()
        .collect();
    let pod = n.pod("web").unwrap_or_default();
    assert_eq!(web_row[0], "default");
    assert_eq!(web_row[2], "1/1", "{out}");
    assert_eq!(web_row[3], "Running", "{out}");
    assert_eq!(web_row[4], "0", "{out}");
    assert_eq!(Some(web_row[6]), pod["status"]["podIP"].as_str(), "{out}");
    assert_eq!(web_row[7], node());

    // get pod -o yaml / json: the full object.
    let yaml = ok(
        kubectl(n, &["get", "pod", web, "-o", "yaml"]),
        "get pod -o yaml",
    );
    assert!(yaml.contains("kind: Pod\n"), "{yaml}");
    assert!(yaml.contains(&format!("  name: {web}\n")), "{yaml}");
    assert!(yaml.contains("phase: Running"), "{yaml}");
    let json: Value = serde_json::from_str(&ok(
        kubectl(n, &["get", "pod", web, "-o", "json"]),
        "-o json",
    ))
    .expect("JSON pod");
    assert_eq!(json["metadata"]["uid"], pod["metadata"]["uid"]);
    // Label selectors.
    let out = ok(
        kubectl(n, &["get", "pods", "-l", "app=web", "-o", "name"]),
        "-l app=web",
    );
    assert_eq!(out.trim(), format!("pod/{web}"));

    // Unknown pod: 404 Status, which kubectl prints as NotFound.
    let out = kubectl(n, &["get", "pod", "nope"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("pods \"nope\" not found"), "{err}");
    pod
}

fn kubectl_logs_current_and_previous(n: &Nanolet, web: &str, crashy: &str) {
    // logs, with -c, --tail, --timestamps, --previous.
    let logs = ok(kubectl(n, &["logs", web]), "logs");
    assert_eq!(logs, "first\nsecond\nthird\n");
    let logs = ok(
        kubectl(n, &["logs", web, "-c", "c", "--tail=1"]),
        "logs --tail",
    );
    assert_eq!(logs, "third\n");
    let logs = ok(
        kubectl(n, &["logs", web, "--timestamps", "--tail=2"]),
        "--timestamps",
    );
    let l: Vec<&str> = logs.lines().collect();
    assert_eq!(l.len(), 2, "{logs}");
    assert!(l[0].ends_with(" second") && l[0].contains('T'), "{logs}");
    let logs = ok(kubectl(n, &["logs", crashy, "-c", "main"]), "logs -c main");
    assert_eq!(logs, "main up\n");
    // The crash container restarts every 10, 20, 40 s: a pair of reads that straddles a
    // restart would see the old current log as the new previous one. Take a pair during
    // which the restart count did not move.
    let restarts = || {
        n.pod("crashy").and_then(|p| {
            p["status"]["containerStatuses"]
                .as_array()?
                .iter()
                .find(|c| c["name"] == "crash")
                .map(|c| c["restartCount"].clone())
        })
    };
    let (now_line, prev_line) = wait_for(Duration::from_secs(90), || {
        let before = restarts();
        let now_line = ok(
            kubectl(n, &["logs", crashy, "-c", "crash"]),
            "logs -c crash",
        );
        let prev_line = ok(
            kubectl(n, &["logs", crashy, "-c", "crash", "--previous"]),
            "logs --previous",
        );
        (before.is_some() && restarts() == before).then_some((now_line, prev_line))
    })
    .expect("two log reads between restarts");
    assert!(prev_line.starts_with("run at "), "{prev_line}");
    assert!(
        now_line.starts_with("run at ") || now_line.is_empty(),
        "{now_line}"
    );
    assert_ne!(prev_line, now_line);
    let out = kubectl(n, &["logs", web, "--previous"]);
    assert!(!out.status.success(), "no previous container for web");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("previous terminated container"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Starts ticker and follows its log; returns its full name.
fn kubectl_logs_follow_until_the_container_ends(n: &Nanolet) -> String {
    // logs -f follows the file as it grows and ends when the container stops.
    n.write("ticker.yaml", TICKER);
    let ticker = format!("ticker-{}", node());
    n.wait_pod("ticker", "Running", |p| p["status"]["phase"] == "Running");
    let logs = ok(kubectl(n, &["logs", "-f", &ticker]), "logs -f");
    assert_eq!(logs, "tick 1\ntick 2\ntick 3\n");
    ticker
}

fn kubectl_describe_pod_and_get_events(n: &Nanolet, crashy: &str) {
    // describe pod: the object and the events nanolet recorded.
    let out = ok(kubectl(n, &["describe", "pod", crashy]), "describe pod");
    assert!(out.contains("Name:") && out.contains(crashy), "{out}");
    assert!(out.contains("Containers:"), "{out}");
    assert!(out.contains("Events:"), "{out}");
    assert!(
        out.contains("Started") && out.contains("Started container crash"),
        "{out}"
    );

    // get events -A.
    let out = ok(kubectl(n, &["get", "events", "-A"]), "get events -A");
    assert!(
        out.lines().next().unwrap_or_default().contains("LAST SEEN"),
        "{out}"
    );
    assert!(
        out.contains(&format!("pod/{crashy}"))
            && out.contains("Created")
            && out.contains("already present on machine")
            && out.contains("pod/broken")
            && out.contains("FailedValidation"),
        "{out}"
    );
}

fn kubectl_get_nodes(n: &Nanolet) {
    // get nodes -o wide: this node, Ready, containerd version from CRI.
    let out = ok(kubectl(n, &["get", "nodes", "-o", "wide"]), "get nodes");
    let row = out
        .lines()
        .find(|l| l.starts_with(&node()))
        .unwrap_or_else(|| panic!("no node row:\n{out}"));
    assert!(row.contains(" Ready "), "{out}");
    assert!(row.contains("containerd://"), "{out}");
    assert!(row.contains(nanolet::KUBELET_VERSION), "{out}");
    let nodej: Value = serde_json::from_str(&ok(
        kubectl(n, &["get", "node", &node(), "-o", "json"]),
        "get node -o json",
    ))
    .expect("node JSON");
    assert!(
        nodej["status"]["capacity"]["memory"]
            .as_str()
            .is_some_and(
                |m| ["Ki", "Mi", "Gi"].iter().any(|s| m.ends_with(s)) && !m.starts_with('0')
            )
    );
    assert_eq!(nodej["status"]["capacity"]["pods"], "110");
    assert!(
        !nodej["status"]["nodeInfo"]["kernelVersion"]
            .as_str()
            .unwrap_or("")
            .is_empty()
    );
}

fn writes_are_refused_with_405(n: &Nanolet, web: &str) {
    // Writes: 405 Status, through kubectl and raw.
    let out = kubectl(n, &["delete", "pod", web, "--wait=false"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("does not allow this method"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (code, body, ct) = http(n, "POST", "/api/v1/namespaces/default/pods", None);
    assert_eq!(code, 405);
    assert!(ct.starts_with("application/json"), "{ct}");
    let v: Value = serde_json::from_str(&body).expect("Status JSON");
    assert_eq!(
        (v["kind"].as_str(), v["reason"].as_str()),
        (Some("Status"), Some("MethodNotAllowed"))
    );
    assert_eq!(http(n, "POST", "/pods", None).0, 405);
    assert_eq!(
        http(n, "DELETE", "/api/v1/namespaces/default/pods/x", None).0,
        405
    );
    assert_eq!(n.pods().len(), 3, "nothing was deleted");
}

fn configz_redacts_secrets(n: &Nanolet) {
    // /configz: effective configuration, secrets redacted.
    let (code, body, _) = http(n, "GET", "/configz", None);
    assert_eq!(code, 200);
    let v: Value = serde_json::from_str(&body).expect("configz JSON");
    assert_eq!(v["kubeletconfig"]["readOnlyPort"], n.port);
    assert_eq!(
        v["kubeletconfig"]["staticPodURLHeader"]["X-Secret"],
        serde_json::json!(["<redacted>"])
    );
    assert!(!body.contains("hunter2"), "{body}");
    // ... and absent from nanolet's own log.
    assert!(
        !fs::read_to_string(&n.log)
            .unwrap_or_default()
            .contains("hunter2")
    );
}

fn metrics_pass_promtool_with_the_kubelet_families(n: &Nanolet) {
    // /metrics: valid Prometheus text, with the kubelet's families.
    let (code, metrics, ct) = http(n, "GET", "/metrics", None);
    assert_eq!(code, 200);
    assert!(ct.starts_with("text/plain; version=0.0.4"), "{ct}");
    for family in [
        // web and crashy; ticker has completed and its sandbox is stopped.
        "kubelet_running_pods 2\n",
        "kubelet_running_containers{container_state=\"running\"}",
        "kubelet_runtime_operations_total{operation_type=\"start_container\"}",
        "kubelet_runtime_operations_total{operation_type=\"list_containers\"}",
        "kubelet_runtime_operations_errors_total{operation_type=",
        "kubelet_pleg_relist_duration_seconds_bucket{le=\"+Inf\"}",
        "process_resident_memory_bytes ",
        "process_cpu_seconds_total ",
        "process_open_fds ",
        "process_start_time_seconds ",
        "nanolet_build_info{version=\"",
    ] {
        assert!(metrics.contains(family), "{family} missing:\n{metrics}");
    }
    let started = metrics
        .lines()
        .find_map(|l| l.strip_prefix("kubelet_pod_start_duration_seconds_count "))
        .and_then(|v| v.parse::<u64>().ok());
    assert!(
        started.is_some_and(|n| n >= 1),
        "pod start histogram:\n{metrics}"
    );
    let check = promtool_check(&metrics);
    assert!(check.0, "promtool check metrics:\n{}\n{metrics}", check.1);
}

fn stats_summary_and_resource_metrics(n: &Nanolet, web: &str, pod: &Value) {
    // /stats/summary: the Summary API's field names, node from /proc, pods from CRI stats.
    let (code, body, _) = http(n, "GET", "/stats/summary", None);
    assert_eq!(code, 200);
    let s: Value = serde_json::from_str(&body).expect("summary JSON");
    assert_eq!(s["node"]["nodeName"], node());
    for (part, field) in [
        ("cpu", "usageCoreNanoSeconds"),
        ("memory", "workingSetBytes"),
        ("memory", "availableBytes"),
        ("fs", "capacityBytes"),
        ("rlimit", "maxpid"),
    ] {
        assert!(
            s["node"][part][field].as_u64().is_some(),
            "node.{part}.{field}: {body}"
        );
    }
    let sp = s["pods"]
        .as_array()
        .and_then(|a| a.iter().find(|p| p["podRef"]["name"] == web))
        .cloned()
        .unwrap_or_else(|| panic!("no {web} in the summary: {body}"));
    assert_eq!(sp["podRef"]["uid"], pod["metadata"]["uid"]);
    let c = &sp["containers"][0];
    assert_eq!(c["name"], "c", "{sp}");
    assert!(c["cpu"]["usageCoreNanoSeconds"].as_u64().is_some(), "{sp}");
    assert!(
        c["memory"]["workingSetBytes"]
            .as_u64()
            .is_some_and(|v| v > 0),
        "{sp}"
    );
    assert!(
        c["logs"]["usedBytes"].as_u64().is_some_and(|v| v > 0),
        "{sp}"
    );
    assert!(
        sp["ephemeral-storage"]["usedBytes"].as_u64().is_some(),
        "{sp}"
    );
    let (code, text, _) = http(n, "GET", "/metrics/probes", None);
    assert_eq!(code, 200);
    let want = format!(
        "prober_probe_total{{container=\"c\",namespace=\"default\",pod=\"{web}\",probe_type=\"Readiness\",result=\"successful\"}} "
    );
    assert!(text.contains(&want), "{want} missing:\n{text}");
    let check = promtool_check(&text);
    assert!(
        check.0,
        "promtool check /metrics/probes:\n{}\n{text}",
        check.1
    );
    for path in ["/metrics/resource", "/metrics/cadvisor"] {
        let (code, text, _) = http(n, "GET", path, None);
        assert_eq!(code, 200, "{path}");
        let want = format!(
            "container_memory_working_set_bytes{{container=\"c\",namespace=\"default\",pod=\"{web}\"}}"
        );
        assert!(text.contains(&want), "{path}: {want} missing:\n{text}");
        let check = promtool_check(&text);
        assert!(check.0, "promtool check {path}:\n{}\n{text}", check.1);
    }
}

fn cli_gets_logs_and_describes(n: &Nanolet, web: &str, crashy: &str, ticker: &str, pod: &Value) {
    // The CLI against the same agent.
    let server = format!("--server={}", n.url());
    let out = ok(nanolet_cli(&["get", "pods", &server]), "nanolet get pods");
    assert!(
        out.lines().next().unwrap_or_default().starts_with("NAME "),
        "{out}"
    );
    assert!(out.contains(web) && out.contains("Running"), "{out}");
    let out = ok(
        nanolet_cli(&["get", "pods", "-A", "-o", "wide", &server]),
        "get pods -A -o wide",
    );
    assert!(
        out.lines()
            .next()
            .unwrap_or_default()
            .starts_with("NAMESPACE "),
        "{out}"
    );
    assert!(
        out.contains(pod["status"]["podIP"].as_str().unwrap_or("?")),
        "{out}"
    );
    let out = ok(
        nanolet_cli(&["get", "pods", "-o", "json", &server]),
        "get pods -o json",
    );
    let v: Value = serde_json::from_str(&out).expect("PodList JSON");
    assert_eq!(v["kind"], "PodList");
    let out = ok(
        nanolet_cli(&["get", "pods", "-o", "yaml", &server]),
        "get pods -o yaml",
    );
    assert!(out.contains("kind: PodList"), "{out}");
    let out = ok(
        nanolet_cli(&["logs", web, "--tail", "2", &server]),
        "nanolet logs",
    );
    assert_eq!(out, "second\nthird\n");
    let out = ok(
        nanolet_cli(&["logs", crashy, "-c", "crash", "--previous", &server]),
        "logs --previous",
    );
    // (The crash container keeps restarting, so "previous" moves on: check the shape.)
    assert!(
        out.starts_with("run at ") && out.lines().count() == 1,
        "{out}"
    );
    let out = ok(
        nanolet_cli(&["logs", "-f", ticker, &server]),
        "nanolet logs -f",
    );
    assert_eq!(out, "tick 1\ntick 2\ntick 3\n");
    let out = ok(
        nanolet_cli(&["describe", "pod", crashy, &server]),
        "describe pod",
    );
    assert!(
        out.contains(crashy) && out.contains("Events:") && out.contains("Started"),
        "{out}"
    );
}

fn cli_exec_runs_through_cri(n: &Nanolet, ctd: &Containerd, web: &str, crashy: &str) {
    let server = format!("--server={}", n.url());
    // exec through CRI, the exit code propagated.
    let endpoint = format!("--container-runtime-endpoint={}", ctd.endpoint());
    let out = nanolet_cli(&[
        "exec",
        web,
        &endpoint,
        "--",
        "sh",
        "-c",
        "echo hi; echo err >&2; exit 7",
    ]);
    assert_eq!(out.status.code(), Some(7), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hi\n");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "err\n");
    let out = nanolet_cli(&["exec", crashy, "-c", "main", &endpoint, "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let out = nanolet_cli(&["exec", crashy, &endpoint, "--", "true"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("choose one with -c"),
        "{out:?}"
    );
    let out = nanolet_cli(&["exec", "nope", &endpoint, "--", "true"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("pods \"nope\" not found"));
    let out = nanolet_cli(&["logs", "nope", &server]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("pods \"nope\" not found"));
}

/// `promtool check metrics` on `text`: (passed, output).
fn promtool_check(text: &str) -> (bool, String) {
    use std::io::Write;
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (Debian package prometheus; scripts/install-deps.sh installs it)");
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(text.as_bytes()).expect("write to promtool");
    }
    let out = child.wait_with_output().expect("promtool");
    let msg = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), msg)
}

#[test]
fn token_is_required_off_loopback() {
    // Without a token file, binding off loopback is refused at start.
    let out = nanolet_cli(&["run", "--address=0.0.0.0", "--pod-manifest-path="]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--read-only-token-file"), "{err}");

    let ctd = Containerd::start();
    let token_file = ctd.tmp().join("ro-token");
    fs::write(&token_file, "t0ps3cret-token\n").expect("token file");
    let n = Nanolet::start(
        &ctd,
        &[
            "--address=0.0.0.0".into(),
            format!("--read-only-token-file={}", token_file.display()),
        ],
    );
    for path in ["/pods", "/healthz", "/metrics", "/configz", "/api/v1/pods"] {
        assert_eq!(http(&n, "GET", path, None).0, 401, "{path} without token");
        assert_eq!(
            http(&n, "GET", path, Some("wrong")).0,
            401,
            "{path} with a bad token"
        );
        let (code, body, _) = http(&n, "GET", path, Some("t0ps3cret-token"));
        assert_eq!(code, 200, "{path} with the token: {body}");
        assert!(
            !body.contains("t0ps3cret"),
            "{path} serves the token: {body}"
        );
    }
    // kubectl without a token is refused. (kubectl does not send a bearer token over plain
    // HTTP, so with a token the port is for curl, Prometheus and `nanolet get --token-file`.)
    let out = kubectl_as(&n, None, &["get", "pods", "-A"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("provide credentials"), "{err}");
    // The CLI takes the token from a file too.
    let out = nanolet_cli(&["get", "pods", &format!("--server={}", n.url())]);
    assert_eq!(out.status.code(), Some(1));
    ok(
        nanolet_cli(&[
            "get",
            "pods",
            &format!("--server={}", n.url()),
            &format!("--token-file={}", token_file.display()),
        ]),
        "nanolet get pods --token-file",
    );
    assert!(
        !fs::read_to_string(&n.log)
            .unwrap_or_default()
            .contains("t0ps3cret")
    );
}

#[test]
fn validate_checks_manifests_offline_with_field_paths() {
    let dir = tempfile::tempdir().expect("tmp");
    let good = dir.path().join("good.yaml");
    fs::write(&good, WEB).expect("write");
    let out = nanolet_cli(&["validate", good.to_str().unwrap_or_default()]);
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("good.yaml: valid"),
        "{out:?}"
    );

    let bad = dir.path().join("bad.yaml");
    fs::write(
        &bad,
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: Bad_Name\nspec:\n  containers:\n  - name: c\n    image: ''\n",
    )
    .expect("write");
    let broken = dir.path().join("broken.json");
    fs::write(
        &broken,
        "{\"apiVersion\": \"v1\", \"kind\": \"Pod\", \"spec\": {\"containers\": 3}}",
    )
    .expect("write");
    let out = nanolet_cli(&[
        "validate",
        good.to_str().unwrap_or_default(),
        bad.to_str().unwrap_or_default(),
        broken.to_str().unwrap_or_default(),
        "/nonexistent/x.yaml",
    ]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    let bad_s = bad.display().to_string();
    assert!(err.contains(&format!("{bad_s}: metadata.name:")), "{err}");
    assert!(
        err.contains(&format!(
            "{bad_s}: spec.containers[0].image: Required value"
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!("{}: spec.containers:", broken.display())),
        "{err}"
    );
    assert!(err.contains("/nonexistent/x.yaml:"), "{err}");

    // Agent not running: a clear error, exit 1.
    let out = nanolet_cli(&["get", "pods", "--server=http://127.0.0.1:1"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot reach the nanolet agent at http://127.0.0.1:1"),
        "{err}"
    );

    let out = nanolet_cli(&["version"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("nanolet "));
}

#[test]
fn systemd_notify_ready_status_watchdog_and_stopping() {
    use std::os::unix::net::UnixDatagram;
    let ctd = Containerd::start();
    let sock_path = ctd.tmp().join("notify.sock");
    let sock = UnixDatagram::bind(&sock_path).expect("notify socket");
    sock.set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .expect("timeout");
    let path = sock_path.display().to_string();
    let mut n = Nanolet::start_with_env(
        &ctd,
        &[],
        &[
            ("NOTIFY_SOCKET", path.as_str()),
            ("WATCHDOG_USEC", "1000000"),
        ],
    );
    let mut got: Vec<String> = vec![];
    // Receives until a message containing `want` arrived (30 s timeout per datagram).
    fn recv(sock: &UnixDatagram, got: &mut Vec<String>, want: &str) -> bool {
        let mut buf = [0u8; 4096];
        while !got.iter().any(|m| m.contains(want)) {
            match sock.recv(&mut buf) {
                Ok(len) => got.push(String::from_utf8_lossy(&buf[..len]).into_owned()),
                Err(_) => return false,
            }
        }
        true
    }
    assert!(
        recv(&sock, &mut got, "READY=1"),
        "no READY=1: {got:?}\n{}",
        n.log_tail()
    );
    assert!(
        got.iter()
            .any(|m| m.contains("READY=1\nSTATUS=0 pods, 0 running")),
        "{got:?}"
    );
    n.write("web.yaml", WEB);
    assert!(
        recv(&sock, &mut got, "STATUS=1 pods, 1 running"),
        "no STATUS=1 pods, 1 running: {got:?}\n{}",
        n.log_tail()
    );
    assert!(
        recv(&sock, &mut got, "WATCHDOG=1"),
        "no WATCHDOG=1: {got:?}\n{}",
        n.log_tail()
    );
    n.stop();
    assert!(
        recv(&sock, &mut got, "STOPPING=1"),
        "no STOPPING=1: {got:?}\n{}",
        n.log_tail()
    );
}
