//! Black-box tests of probes, lifecycle hooks, termination messages and init-container status:
//! the real `nanolet` binary on a real containerd, one of each per test.
//!
//! The scenarios are the kubelet's node e2e suites (test/e2e/common/node/container_probe.go,
//! runtime.go, init_container.go, lifecycle_hook.go in kubernetes/kubernetes), with periods of
//! one second instead of ten and shorter delays so that each test stays well under a minute; the
//! assertions are the kubelet's. Servers for HTTP and TCP probes are busybox processes inside the
//! test containers.
//!
//! Every condition is polled. Where a test asserts that something does *not* happen, it first
//! waits for a positive sign that the probes in question ran (a logged probe failure, Ready,
//! or a sibling pod on the same nanolet being restarted), then watches for several periods.

use nanolet_test_support as support;

use std::fs;
use std::time::{Duration, Instant};

use nanolet::cri::Runtime;
use nanolet::timeutil::parse_rfc3339;
use serde_json::Value;
use support::Containerd;
use support::agent::{NODE, Nanolet};

/// How long a positive condition may take (image is local; restarts are immediate or 10 s).
const WAIT: Duration = Duration::from_secs(40);
/// Poll interval: gentle on a 2-core machine running several containerds at once.
const POLL: Duration = Duration::from_millis(150);

/// Prints how long a test took (with `--nocapture`), to keep an eye on the ~40 s budget.
struct Timer(&'static str, Instant);

impl Drop for Timer {
    fn drop(&mut self) {
        eprintln!(
            "duration {}: {:.1}s",
            self.0,
            self.1.elapsed().as_secs_f64()
        );
    }
}

fn pod_yaml(name: &str, body: &str) -> String {
    format!("apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n{body}")
}

fn poll<T>(timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(POLL);
    }
}

fn status<'a>(p: &'a Value, list: &str, name: &str) -> &'a Value {
    p["status"][list]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["name"] == name))
        .unwrap_or(&Value::Null)
}

/// The status of regular container `name`.
fn cs<'a>(p: &'a Value, name: &str) -> &'a Value {
    status(p, "containerStatuses", name)
}

fn condition<'a>(p: &'a Value, t: &str) -> &'a Value {
    p["status"]["conditions"]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["type"] == t))
        .unwrap_or(&Value::Null)
}

fn restarts(p: &Value, c: &str) -> i64 {
    cs(p, c)["restartCount"].as_i64().unwrap_or(-1)
}

fn running(p: &Value, c: &str) -> bool {
    p["status"]["phase"] == "Running" && cs(p, c)["state"]["running"].is_object()
}

fn time_of(v: &Value) -> WallTime {
    let s = v.as_str().unwrap_or_else(|| panic!("not a timestamp: {v}"));
    WallTime(parse_rfc3339(s).unwrap_or_else(|| panic!("bad timestamp {s}")))
}

/// A wall-clock time from the pod status, for differences in whole seconds.
struct WallTime(std::time::SystemTime);

impl WallTime {
    fn secs_since(&self, earlier: &WallTime) -> f64 {
        match self.0.duration_since(earlier.0) {
            Ok(d) => d.as_secs_f64(),
            Err(e) => -e.duration().as_secs_f64(),
        }
    }
}

fn wait_pod(n: &Nanolet, name: &str, what: &str, f: impl Fn(&Value) -> bool) -> Value {
    poll(WAIT, || n.pod(name).filter(|p| f(p))).unwrap_or_else(|| {
        panic!(
            "pod {name}: timed out waiting for {what}; now: {:#}\nnanolet log:\n{}",
            n.pod(name).unwrap_or(Value::Null),
            n.log_tail()
        )
    })
}

fn wait_restarted(n: &Nanolet, name: &str) -> Value {
    wait_pod(n, name, "restartCount >= 1", |p| restarts(p, "c") >= 1)
}

/// Watch pod `name` for `d`: `check` must hold on every observation.
fn observe(n: &Nanolet, name: &str, d: Duration, check: impl Fn(&Value) -> Result<(), String>) {
    let end = Instant::now() + d;
    let mut seen = 0;
    while Instant::now() < end {
        if let Some(p) = n.pod(name) {
            seen += 1;
            if let Err(e) = check(&p) {
                panic!(
                    "pod {name}: {e}; status: {:#}\nnanolet log:\n{}",
                    p["status"],
                    n.log_tail()
                );
            }
        }
        std::thread::sleep(POLL);
    }
    assert!(seen > 0, "pod {name} was never listed while observing");
}

/// nanolet's own log has a line naming both `pod` and `needle` (a probe failure, for instance).
fn wait_logged(n: &Nanolet, pod: &str, needle: &str) {
    let full = format!("{pod}-{}", NODE.to_lowercase());
    poll(WAIT, || {
        fs::read_to_string(&n.log)
            .ok()
            .filter(|s| s.lines().any(|l| l.contains(&full) && l.contains(needle)))
    })
    .unwrap_or_else(|| {
        panic!(
            "nanolet never logged {needle:?} for {full}:\n{}",
            n.log_tail()
        )
    });
}

fn never_restarted(p: &Value) -> Result<(), String> {
    if restarts(p, "c") != 0 {
        return Err(format!("restarted: restartCount {}", restarts(p, "c")));
    }
    if !running(p, "c") {
        return Err("container not running".into());
    }
    Ok(())
}

/// The first container was killed by the probe (SIGKILL: these containers ignore SIGTERM, as
/// a shell or sleep as PID 1 does) and it ran at least `min_secs` before.
fn assert_killed_after(p: &Value, min_secs: f64) {
    let last = &cs(p, "c")["lastState"]["terminated"];
    assert!(last.is_object(), "lastState.terminated: {:#}", p["status"]);
    assert_eq!(last["exitCode"], 137, "killed: {last}");
    let ran = time_of(&last["finishedAt"]).secs_since(&time_of(&last["startedAt"]));
    assert!(
        ran >= min_secs,
        "the container was killed after {ran}s, before its probe could fail ({min_secs}s): {last}"
    );
}

// --- readiness -------------------------------------------------------------------------------

#[test]
fn readiness_initial_delay_failure_and_timeout() {
    let _timer = Timer(
        "readiness_initial_delay_failure_and_timeout",
        Instant::now(),
    );
    // container_probe.go: "with readiness probe should not be ready before initial delay and
    // never restart", "with readiness probe that fails should never be ready and never
    // restart", "should not be ready with an exec readiness probe timeout".
    // Kubelet rules: readiness counts as failure before initialDelaySeconds; readiness failure
    // only makes the pod unready (ContainersNotReady, `containers with unready status: [c]`),
    // it never restarts; an exec probe that exceeds timeoutSeconds fails; readiness flips to
    // success only after successThreshold successes in a row.
    let ctd = Containerd::start();
    let n = Nanolet::start(&ctd, &[]);
    let pod = |name: &str, probe: &str| {
        pod_yaml(
            name,
            &format!(
                "spec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: localhost/busybox:1.36\n    command: [sleep, '600']\n    readinessProbe:\n{probe}"
            ),
        )
    };
    n.write(
        "delay.yaml",
        &pod(
            "ready-delay",
            "      exec:\n        command: ['true']\n      initialDelaySeconds: 5\n      periodSeconds: 1\n",
        ),
    );
    n.write(
        "fail.yaml",
        &pod(
            "ready-fail",
            "      exec:\n        command: ['false']\n      periodSeconds: 1\n",
        ),
    );
    n.write(
        "timeout.yaml",
        &pod(
            "ready-timeout",
            "      exec:\n        command: [sh, -c, 'sleep 10']\n      timeoutSeconds: 1\n      failureThreshold: 1\n      periodSeconds: 1\n",
        ),
    );

    // A server that is healthy, breaks for a while, then recovers.
    n.write(
        "flap.yaml",
        &pod_yaml(
            "ready-flap",
            &format!(
                "spec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: localhost/busybox:1.36\n    command: [sh, -c]\n    args:\n    - |\n{CGI_SERVER}      httpd -p 8080 -h /www\n      while [ ! -f /tmp/break ]; do sleep 0.2; done\n      rm -f /tmp/healthy\n      while [ ! -f /tmp/heal ]; do sleep 0.2; done\n      touch /tmp/healthy\n      exec sleep 600\n    readinessProbe:\n      httpGet:\n        path: /cgi-bin/healthz\n        port: 8080\n      periodSeconds: 1\n"
            ),
        ),
    );

    n.write(
        "threshold.yaml",
        &pod(
            "ready-threshold",
            "      exec:\n        command: ['true']\n      periodSeconds: 1\n      successThreshold: 3\n",
        ),
    );

    // Running, but not ready during the initial delay.
    let p = wait_pod(&n, "ready-delay", "running", |p| running(p, "c"));
    let started = time_of(&cs(&p, "c")["state"]["running"]["startedAt"]);
    assert_eq!(
        cs(&p, "c")["ready"],
        false,
        "ready before the initial delay"
    );
    for t in ["Ready", "ContainersReady"] {
        let c = condition(&p, t);
        assert_eq!(c["status"], "False", "{t}: {c}");
        assert_eq!(c["reason"], "ContainersNotReady", "{t}: {c}");
        assert_eq!(
            c["message"], "containers with unready status: [c]",
            "{t}: {c}"
        );
    }
    let p = wait_pod(&n, "ready-delay", "Ready", |p| {
        condition(p, "Ready")["status"] == "True"
    });
    assert_eq!(cs(&p, "c")["ready"], true);
    assert_eq!(condition(&p, "ContainersReady")["status"], "True");
    let ready_at = time_of(&condition(&p, "Ready")["lastTransitionTime"]);
    let after = ready_at.secs_since(&started);
    assert!(
        after >= 5.0,
        "pod became ready {after}s after the container started, before its 5s initial delay"
    );
    assert_eq!(restarts(&p, "c"), 0);

    // successThreshold 3: ready only after three successes in a row (two periods at least).
    let p = wait_pod(&n, "ready-threshold", "Ready", |p| {
        condition(p, "Ready")["status"] == "True"
    });
    let after = time_of(&condition(&p, "Ready")["lastTransitionTime"])
        .secs_since(&time_of(&cs(&p, "c")["state"]["running"]["startedAt"]));
    assert!(
        after >= 2.0,
        "ready {after}s after start: fewer than successThreshold (3) successes"
    );

    // Failing and timing-out readiness probes: probed (and failing), never ready, never
    // restarted.
    wait_logged(&n, "ready-fail", "Readiness probe failed");
    wait_logged(&n, "ready-timeout", "timed out");
    for name in ["ready-fail", "ready-timeout"] {
        observe(&n, name, Duration::from_secs(5), |p| {
            never_restarted(p)?;
            if cs(p, "c")["ready"] != false || condition(p, "Ready")["status"] != "False" {
                return Err("ready".into());
            }
            if condition(p, "Ready")["reason"] != "ContainersNotReady" {
                return Err("Ready reason".into());
            }
            Ok(())
        });
    }
    // Still ready, still not restarted.
    let p = n.pod("ready-delay").expect("ready-delay listed");
    assert_eq!(condition(&p, "Ready")["status"], "True");
    assert_eq!(restarts(&p, "c"), 0);

    // Readiness keeps probing after success and after failure: ready, unready while the
    // server answers 500, ready again once it recovers; never restarted.
    let p = wait_pod(&n, "ready-flap", "Ready", |p| {
        condition(p, "Ready")["status"] == "True"
    });
    let id = cs(&p, "c")["containerID"]
        .as_str()
        .and_then(|s| s.strip_prefix("containerd://"))
        .expect("containerID")
        .to_string();
    let rt = ctd.runtime();
    let touch = |f: &str| {
        let r = rt
            .exec_sync(&id, &["touch".into(), f.into()], Duration::from_secs(5))
            .expect("exec in ready-flap");
        assert_eq!(r.exit_code, 0, "touch {f}");
    };
    touch("/tmp/break");
    let p = wait_pod(&n, "ready-flap", "unready", |p| {
        condition(p, "Ready")["status"] == "False"
    });
    assert_eq!(condition(&p, "Ready")["reason"], "ContainersNotReady");
    assert_eq!(cs(&p, "c")["ready"], false);
    touch("/tmp/heal");
    let p = wait_pod(&n, "ready-flap", "ready again", |p| {
        condition(p, "Ready")["status"] == "True"
    });
    assert_eq!(restarts(&p, "c"), 0, "readiness failure never restarts");
}

// --- liveness: exec --------------------------------------------------------------------------

#[test]
fn exec_liveness_restarts_on_failure_and_on_timeout_only() {
    let _timer = Timer(
        "exec_liveness_restarts_on_failure_and_on_timeout_only",
        Instant::now(),
    );
    // container_probe.go: "should be restarted with a exec "cat /tmp/health" liveness probe",
    // "should *not* be restarted with a exec "cat /tmp/health" liveness probe", "should be
    // restarted with an exec liveness probe with timeout".
    // Kubelet rules: failureThreshold liveness failures in a row kill the container and
    // restartPolicy applies (Always restarts it, Never leaves it dead and the pod Failed); an
    // exec probe exceeding timeoutSeconds is a failure (ExecProbeTimeout); a passing liveness
    // probe never restarts.
    let ctd = Containerd::start();
    let n = Nanolet::start(&ctd, &[]);
    let pod = |name: &str, cmd: &str, probe: &str| {
        pod_yaml(
            name,
            &format!(
                "spec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: localhost/busybox:1.36\n    command: [sh, -c, '{cmd}']\n    livenessProbe:\n      exec:\n        command: {probe}\n      initialDelaySeconds: 1\n      periodSeconds: 1\n      failureThreshold: 1\n"
            ),
        )
    };
    n.write(
        "restart.yaml",
        &pod(
            "live-exec",
            "echo ok >/tmp/health; sleep 4; rm -f /tmp/health; sleep 600",
            "[cat, /tmp/health]\n      timeoutSeconds: 5",
        ),
    );
    n.write(
        "ok.yaml",
        &pod(
            "live-exec-ok",
            "echo ok >/tmp/health; sleep 600",
            "[cat, /tmp/health]\n      timeoutSeconds: 5",
        ),
    );
    n.write(
        "timeout.yaml",
        &pod(
            "live-exec-timeout",
            "sleep 600",
            "[sh, -c, 'sleep 10']\n      timeoutSeconds: 1",
        ),
    );
    n.write(
        "never.yaml",
        &pod("live-never", "exec sleep 600", "['false']")
            .replace("spec:\n", "spec:\n  restartPolicy: Never\n"),
    );
    n.write(
        "loop.yaml",
        &pod("live-loop", "exec sleep 600", "['false']"),
    );

    let p = wait_restarted(&n, "live-exec");
    // Not killed while the file was there (4 s), killed once it was gone.
    assert_killed_after(&p, 4.0);
    let p = wait_pod(&n, "live-exec", "the new container running", |p| {
        running(p, "c")
    });
    assert!(restarts(&p, "c") >= 1);
    wait_logged(&n, "live-exec", "Liveness probe failed");

    let p = wait_restarted(&n, "live-exec-timeout");
    assert_eq!(cs(&p, "c")["lastState"]["terminated"]["exitCode"], 137);
    wait_logged(&n, "live-exec-timeout", "timed out");

    // restartPolicy Never: the killed container is not restarted and the pod fails.
    let p = wait_pod(&n, "live-never", "Failed", |p| {
        p["status"]["phase"] == "Failed"
    });
    let t = &cs(&p, "c")["state"]["terminated"];
    assert_eq!(t["exitCode"], 137, "killed by the liveness probe: {t}");
    assert_eq!(restarts(&p, "c"), 0);

    // Killed again and again by its liveness probe: the first kill restarts at once, the next
    // one within the back-off of the previous exit waits it out (startContainer's doBackOff
    // looks at the newest exited container), CrashLoopBackOff as for a crashing container
    // (differential corpus liveness-failing: the kubelet restarted 4 times where nanolet,
    // without the back-off, restarted 10).
    let p = wait_pod(
        &n,
        "live-loop",
        "CrashLoopBackOff after a liveness kill",
        |p| cs(p, "c")["state"]["waiting"]["reason"] == "CrashLoopBackOff",
    );
    assert!(restarts(&p, "c") >= 1, "{p:#}");
    let msg = cs(&p, "c")["state"]["waiting"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        msg.starts_with("back-off 10s restarting failed container=c pod=live-loop"),
        "{msg}"
    );
    assert_eq!(cs(&p, "c")["lastState"]["terminated"]["exitCode"], 137);

    // The same probe on a container whose file stays: never restarted, for several periods
    // (its sibling shows the prober kills failing containers).
    let p = wait_pod(&n, "live-exec-ok", "running", |p| running(p, "c"));
    let started = time_of(&cs(&p, "c")["state"]["running"]["startedAt"]);
    observe(&n, "live-exec-ok", Duration::from_secs(5), never_restarted);
    let now = WallTime(std::time::SystemTime::now());
    assert!(
        now.secs_since(&started) >= 6.0,
        "observed at least 5 probe periods after the initial delay"
    );
}

// --- liveness: HTTP and TCP ------------------------------------------------------------------

/// Serves /cgi-bin/healthz on :8080: 200 while /tmp/healthy exists, then 500;
/// /cgi-bin/redirect redirects there, /cgi-bin/away redirects to another host; /cgi-bin/env
/// records the request headers (as CGI variables) in /tmp/env.txt.
const CGI_SERVER: &str = r#"      mkdir -p /www/cgi-bin
      cat > /www/cgi-bin/healthz <<'EOF'
      #!/bin/sh
      if [ -f /tmp/healthy ]; then
        printf 'Content-Type: text/plain\r\n\r\nok\n'
      else
        printf 'Status: 500 Internal Server Error\r\nContent-Type: text/plain\r\n\r\nbroken\n'
      fi
      EOF
      cat > /www/cgi-bin/redirect <<'EOF'
      #!/bin/sh
      printf 'Status: 302 Found\r\nLocation: /cgi-bin/healthz\r\n\r\n'
      EOF
      cat > /www/cgi-bin/away <<'EOF'
      #!/bin/sh
      printf 'Status: 302 Found\r\nLocation: http://0.0.0.0/\r\n\r\n'
      EOF
      cat > /www/cgi-bin/env <<'EOF'
      #!/bin/sh
      env > /tmp/env.txt
      printf 'Content-Type: text/plain\r\n\r\nok\n'
      EOF
      chmod +x /www/cgi-bin/healthz /www/cgi-bin/redirect /www/cgi-bin/away /www/cgi-bin/env
      touch /tmp/healthy
"#;

#[test]
fn http_and_tcp_liveness() {
    let _timer = Timer("http_and_tcp_liveness", Instant::now());
    // container_probe.go: "should be restarted with a /healthz http liveness probe" (a server
    // that starts returning 500), "should *not* be restarted with a /healthz http liveness
    // probe", "should *not* be restarted with a tcp:8080 liveness probe", the local and
    // non-local redirect cases, and a TCP liveness probe on a closed port.
    // Kubelet rules: httpGet succeeds for 200 <= status < 400 and fails otherwise
    // (`HTTP probe failed with statuscode: 500`); tcpSocket succeeds when the connect does;
    // named ports resolve against the container's ports; redirects are followed only to the
    // same host; requests carry `User-Agent: kube-probe/<version>`, `Accept: */*` and the
    // probe's httpHeaders.
    let ctd = Containerd::start();
    let n = Nanolet::start(&ctd, &[]);
    let pod = |name: &str, script: &str, probes: &str| {
        pod_yaml(
            name,
            &format!(
                "spec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: localhost/busybox:1.36\n    command: [sh, -c]\n    args:\n    - |\n{CGI_SERVER}{script}    ports:\n    - name: http\n      containerPort: 8080\n{probes}"
            ),
        )
    };
    let probe = |kind: &str, handler: &str| {
        format!(
            // timeoutSeconds 5: the failing pods here fail by status or refusal at once, and a
            // passing probe slowed past the default 1 s by a loaded machine must not count.
            "    {kind}:\n{handler}      initialDelaySeconds: 1\n      periodSeconds: 1\n      failureThreshold: 1\n      timeoutSeconds: 5\n"
        )
    };
    let http = "      httpGet:\n        path: /cgi-bin/healthz\n        port: http\n";
    let tcp = |port: u16| format!("      tcpSocket:\n        port: {port}\n");
    n.write(
        "http-breaks.yaml",
        &pod(
            "http-breaks",
            "      httpd -p 8080 -h /www\n      sleep 4\n      rm -f /tmp/healthy\n      exec sleep 600\n",
            &probe("livenessProbe", http),
        ),
    );
    n.write(
        "http-ok.yaml",
        &pod(
            "http-ok",
            "      exec httpd -f -p 8080 -h /www\n",
            &(probe("livenessProbe", http) + &probe("readinessProbe", http)),
        ),
    );
    n.write(
        "tcp-open.yaml",
        &pod(
            "tcp-open",
            "      exec httpd -f -p 8080 -h /www\n",
            &(probe("livenessProbe", &tcp(8080)) + &probe("readinessProbe", &tcp(8080))),
        ),
    );
    n.write(
        "tcp-closed.yaml",
        &pod(
            "tcp-closed",
            "      exec httpd -f -p 8080 -h /www\n",
            &probe("livenessProbe", &tcp(8081)),
        ),
    );

    let redirect =
        |path: &str| format!("      httpGet:\n        path: /cgi-bin/{path}\n        port: 8080\n");
    n.write(
        "redirect-local.yaml",
        &pod(
            "redirect-local",
            "      httpd -p 8080 -h /www\n      sleep 4\n      rm -f /tmp/healthy\n      exec sleep 600\n",
            &probe("livenessProbe", &redirect("redirect")),
        ),
    );
    n.write(
        "redirect-away.yaml",
        &pod(
            "redirect-away",
            "      rm -f /tmp/healthy\n      exec httpd -f -p 8080 -h /www\n",
            &probe("livenessProbe", &redirect("away")),
        ),
    );

    n.write(
        "http-headers.yaml",
        &pod(
            "http-headers",
            "      exec httpd -f -p 8080 -h /www\n",
            &probe(
                "readinessProbe",
                "      httpGet:\n        path: /cgi-bin/env\n        port: 8080\n        httpHeaders:\n        - name: X-Custom\n          value: probed\n",
            ),
        ),
    );

    let p = wait_restarted(&n, "http-breaks");
    assert_killed_after(&p, 4.0);
    wait_logged(&n, "http-breaks", "HTTP probe failed with statuscode: 500");

    let p = wait_restarted(&n, "tcp-closed");
    assert!(
        cs(&p, "c")["lastState"]["terminated"].is_object(),
        "{:#}",
        p["status"]
    );

    // container_probe.go "should be restarted with a local redirect http liveness probe": a
    // redirect to the same host is followed, to the 500.
    let p = wait_restarted(&n, "redirect-local");
    assert_killed_after(&p, 4.0);
    // "should *not* be restarted with a non-local redirect http liveness probe": a redirect
    // elsewhere is not followed; the probe succeeds with a warning.
    wait_logged(&n, "redirect-away", "Probe terminated redirects");
    observe(&n, "redirect-away", Duration::from_secs(4), never_restarted);

    // The request carries the kubelet's headers plus httpHeaders.
    let p = wait_pod(&n, "http-headers", "Ready", |p| {
        condition(p, "Ready")["status"] == "True"
    });
    let id = cs(&p, "c")["containerID"]
        .as_str()
        .and_then(|s| s.strip_prefix("containerd://"))
        .expect("containerID")
        .to_string();
    let r = ctd
        .runtime()
        .exec_sync(
            &id,
            &["cat".into(), "/tmp/env.txt".into()],
            Duration::from_secs(5),
        )
        .expect("exec in http-headers");
    let env = String::from_utf8_lossy(&r.stdout).into_owned();
    assert!(
        env.lines()
            .any(|l| l.starts_with("HTTP_USER_AGENT=kube-probe/")),
        "User-Agent kube-probe/<version>: {env}"
    );
    assert!(env.lines().any(|l| l == "HTTP_ACCEPT=*/*"), "Accept: {env}");
    assert!(
        env.lines().any(|l| l == "HTTP_X_CUSTOM=probed"),
        "httpHeaders: {env}"
    );

    // Healthy servers: HTTP and TCP readiness pass (so those probes run and reach the
    // server), and liveness on the same endpoint never restarts.
    for name in ["http-ok", "tcp-open"] {
        wait_pod(&n, name, "Ready", |p| {
            condition(p, "Ready")["status"] == "True"
        });
        observe(&n, name, Duration::from_secs(5), |p| {
            never_restarted(p)?;
            if condition(p, "Ready")["status"] != "True" {
                return Err("became unready".into());
            }
            Ok(())
        });
    }
}

// --- startup probes --------------------------------------------------------------------------

#[test]
fn startup_probe_gates_liveness_and_readiness() {
    let _timer = Timer("startup_probe_gates_liveness_and_readiness", Instant::now());
    // container_probe.go: "should be restarted startup probe fails", "should *not* be
    // restarted by liveness probe because startup probe delays it", "should be restarted by
    // liveness probe after startup probe enables it", "should be ready immediately after
    // startupProbe succeeds".
    // Kubelet rules: a failing startup probe kills the container (restartPolicy applies);
    // liveness and readiness do not run until the startup probe succeeded; `started` is false
    // until then and the container cannot be ready before it is started.
    let ctd = Containerd::start();
    let n = Nanolet::start(&ctd, &[]);
    let exec = |kind: &str, cmd: &str, threshold: u32| {
        format!(
            "    {kind}:\n      exec:\n        command: {cmd}\n      periodSeconds: 1\n      failureThreshold: {threshold}\n"
        )
    };
    let pod = |name: &str, cmd: &str, probes: &str| {
        pod_yaml(
            name,
            &format!(
                "spec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: localhost/busybox:1.36\n    command: [sh, -c, '{cmd}']\n{probes}"
            ),
        )
    };
    n.write(
        "su-fails.yaml",
        &pod(
            "su-fails",
            "exec sleep 600",
            &(exec("startupProbe", "['false']", 3) + &exec("livenessProbe", "['true']", 1)),
        ),
    );
    n.write(
        "su-delays.yaml",
        &pod(
            "su-delays",
            "exec sleep 600",
            &(exec("startupProbe", "['false']", 60) + &exec("livenessProbe", "['false']", 1)),
        ),
    );
    n.write(
        "su-enables.yaml",
        &pod(
            "su-enables",
            "sleep 4; echo ok >/tmp/startup; exec sleep 600",
            &(exec("startupProbe", "[cat, /tmp/startup]", 60)
                + &exec("livenessProbe", "['false']", 1)),
        ),
    );
    n.write(
        "su-ready.yaml",
        &pod(
            "su-ready",
            "sleep 4; echo ok >/tmp/startup; exec sleep 600",
            &(exec("startupProbe", "[cat, /tmp/startup]", 60)
                + &exec("readinessProbe", "['true']", 1)),
        ),
    );

    // Ready only after started; started only after the file appears (4 s).
    let p = wait_pod(&n, "su-ready", "running", |p| running(p, "c"));
    assert_eq!(
        cs(&p, "c")["started"],
        false,
        "started before startup probe"
    );
    assert_eq!(cs(&p, "c")["ready"], false);
    let started_at = time_of(&cs(&p, "c")["state"]["running"]["startedAt"]);
    let deadline = Instant::now() + WAIT;
    let p = loop {
        let p = n.pod("su-ready").expect("su-ready listed");
        let c = cs(&p, "c");
        assert!(
            c["started"] == true || c["ready"] == false,
            "ready before started: {c}"
        );
        if c["ready"] == true {
            break p;
        }
        assert!(
            Instant::now() < deadline,
            "never ready: {:#}\n{}",
            p["status"],
            n.log_tail()
        );
        std::thread::sleep(POLL);
    };
    assert_eq!(condition(&p, "Ready")["status"], "True");
    let ready_after =
        time_of(&condition(&p, "Ready")["lastTransitionTime"]).secs_since(&started_at);
    assert!(
        ready_after >= 4.0,
        "ready {ready_after}s after start, before the startup probe could succeed (4s)"
    );
    assert_eq!(restarts(&p, "c"), 0);

    let p = wait_restarted(&n, "su-fails");
    assert_eq!(cs(&p, "c")["lastState"]["terminated"]["exitCode"], 137);
    wait_logged(&n, "su-fails", "Startup probe failed");

    // Liveness fails at once after startup succeeded (4 s), not before.
    let p = wait_restarted(&n, "su-enables");
    assert_killed_after(&p, 4.0);

    // Startup keeps failing (threshold 60): the always-failing liveness probe never runs.
    wait_logged(&n, "su-delays", "Startup probe failed");
    observe(&n, "su-delays", Duration::from_secs(6), |p| {
        never_restarted(p)?;
        if cs(p, "c")["started"] != false || cs(p, "c")["ready"] != false {
            return Err("started or ready while the startup probe fails".into());
        }
        Ok(())
    });
    let log = fs::read_to_string(&n.log).unwrap_or_default();
    assert!(
        !log.lines()
            .any(|l| l.contains("su-delays") && l.contains("Liveness probe failed")),
        "liveness ran before the startup probe succeeded:\n{}",
        n.log_tail()
    );
}

// --- probe-level terminationGracePeriodSeconds -----------------------------------------------

#[test]
fn probe_termination_grace_period_overrides_the_pods() {
    let _timer = Timer(
        "probe_termination_grace_period_overrides_the_pods",
        Instant::now(),
    );
    // container_probe.go: "should override timeoutGracePeriodSeconds when LivenessProbe field
    // is set" and "... when StartupProbe field is set".
    // Kubelet rule: a liveness or startup kill uses the probe's terminationGracePeriodSeconds
    // instead of the pod's. The containers ignore SIGTERM (sleep as PID 1) and the pod allows
    // 600 s, so only the probe's 1 s lets them be replaced quickly.
    let ctd = Containerd::start();
    let n = Nanolet::start(&ctd, &[]);
    for kind in ["livenessProbe", "startupProbe"] {
        let name = format!("grace-{}", kind.trim_end_matches("Probe").to_lowercase());
        n.write(
            &format!("{name}.yaml"),
            &pod_yaml(
                &name,
                &format!(
                    "spec:\n  terminationGracePeriodSeconds: 600\n  containers:\n  - name: c\n    image: localhost/busybox:1.36\n    command: [sleep, '600']\n    {kind}:\n      exec:\n        command: ['false']\n      initialDelaySeconds: 1\n      periodSeconds: 1\n      failureThreshold: 1\n      terminationGracePeriodSeconds: 1\n"
                ),
            ),
        );
    }
    for name in ["grace-liveness", "grace-startup"] {
        let p = wait_pod(&n, name, "running", |p| running(p, "c"));
        let started = time_of(&cs(&p, "c")["state"]["running"]["startedAt"]);
        let p = wait_restarted(&n, name);
        let last = &cs(&p, "c")["lastState"]["terminated"];
        assert_eq!(
            last["exitCode"], 137,
            "SIGKILL after the probe's grace: {last}"
        );
        let killed_after = time_of(&last["finishedAt"]).secs_since(&started);
        // Initial delay 1 s, one failed probe, then SIGKILL after the probe's 1 s: a few
        // seconds, where the pod's grace period would take 600 s.
        assert!(
            killed_after < 15.0,
            "{name}: killed {killed_after}s after start: the pod's grace period was used"
        );
    }
}

// --- termination messages --------------------------------------------------------------------

#[test]
fn termination_messages() {
    let _timer = Timer("termination_messages", Instant::now());
    // runtime.go: "should report termination message if TerminationMessagePath is set",
    // "... from log output if TerminationMessagePolicy FallbackToLogsOnError is set",
    // "... as empty when pod succeeds and TerminationMessagePolicy FallbackToLogsOnError is
    // set", "... from file when pod succeeds and TerminationMessagePolicy
    // FallbackToLogsOnError is set".
    // Kubelet rules: the file at terminationMessagePath (default /dev/termination-log) becomes
    // state.terminated.message; FallbackToLogsOnError uses the log tail only when the file is
    // empty and the container failed.
    let ctd = Containerd::start();
    let n = Nanolet::start(&ctd, &[]);
    let pod = |name: &str, cmd: &str, extra: &str| {
        pod_yaml(
            name,
            &format!(
                "spec:\n  restartPolicy: Never\n  containers:\n  - name: c\n    image: localhost/busybox:1.36\n    command: [sh, -c, '{cmd}']\n{extra}"
            ),
        )
    };
    let fallback = "    terminationMessagePolicy: FallbackToLogsOnError\n";
    let cases = [
        (
            "tm-default",
            "echo -n DONE > /dev/termination-log",
            String::new(),
            "Succeeded",
            "DONE",
        ),
        (
            "tm-custom",
            "echo -n DONE > /dev/termination-custom-log",
            "    terminationMessagePath: /dev/termination-custom-log\n".to_string(),
            "Succeeded",
            "DONE",
        ),
        (
            "tm-fallback-fail",
            "echo -n DONE; exit 1",
            fallback.to_string(),
            "Failed",
            "DONE",
        ),
        (
            "tm-fallback-ok",
            "echo -n OK",
            fallback.to_string(),
            "Succeeded",
            "",
        ),
        (
            "tm-fallback-file",
            "echo -n OK > /dev/termination-log",
            fallback.to_string(),
            "Succeeded",
            "OK",
        ),
        (
            "tm-file-wins",
            "echo -n FILE > /dev/termination-log; echo LOG; exit 2",
            fallback.to_string(),
            "Failed",
            "FILE",
        ),
    ];
    for (name, cmd, extra, _, _) in &cases {
        n.write(&format!("{name}.yaml"), &pod(name, cmd, extra));
    }
    for (name, _, _, phase, message) in &cases {
        let p = wait_pod(&n, name, phase, |p| p["status"]["phase"] == *phase);
        let t = &cs(&p, "c")["state"]["terminated"];
        assert!(t.is_object(), "{name}: {:#}", p["status"]);
        assert_eq!(
            t["message"].as_str().unwrap_or_default(),
            *message,
            "{name}: {t}"
        );
    }
}

// --- lifecycle hooks -------------------------------------------------------------------------

#[test]
fn lifecycle_hooks_exec_and_http() {
    let _timer = Timer("lifecycle_hooks_exec_and_http", Instant::now());
    // lifecycle_hook.go: "should execute poststart exec hook properly", "should execute
    // prestop exec hook properly", "should execute poststart http hook properly", "should
    // execute prestop http hook properly": each hook sends a request to a separate handler
    // pod, whose log proves the hook ran.
    // Kubelet rules: postStart runs right after the container started, and a failing one kills
    // the container (FailedPostStartHook), then restartPolicy applies; preStop runs when the
    // container is stopped (here: its static pod's manifest is removed), before SIGTERM, and
    // only within the grace period (plus a one-off 2 s) however long the hook would take.
    let ctd = Containerd::start();
    let n = Nanolet::start(&ctd, &[]);
    let (port, handler_log) = start_hook_handler(&n);
    write_hook_targets(&n, port);
    let wait_request = |path: &str| wait_hook_request(&n, &handler_log, path);
    for name in [
        "poststart-exec",
        "poststart-http",
        "prestop-exec",
        "prestop-http",
    ] {
        let p = wait_pod(&n, name, "running", |p| running(p, "c"));
        assert_eq!(restarts(&p, "c"), 0, "{name}: a failed postStart kills");
    }
    wait_request("poststart-exec");
    wait_request("poststart-http");
    let log = fs::read_to_string(&handler_log).unwrap_or_default();
    assert!(
        !log.contains("url:/prestop"),
        "preStop ran while the pods were running:\n{log}"
    );

    let p = wait_restarted(&n, "poststart-fails");
    assert!(
        cs(&p, "c")["lastState"]["terminated"].is_object(),
        "{:#}",
        p["status"]
    );
    wait_logged(&n, "poststart-fails", "FailedPostStartHook");

    wait_pod(&n, "prestop-hangs", "running", |p| running(p, "c"));
    let removed = Instant::now();
    n.remove("prestop-hangs.yaml");
    poll(WAIT, || n.pod("prestop-hangs").is_none().then_some(())).unwrap_or_else(|| {
        panic!(
            "prestop-hangs: the hanging preStop hook held the pod past its grace period:\n{}",
            n.log_tail()
        )
    });
    let took = removed.elapsed();
    eprintln!("prestop-hangs: terminated {took:?} after its manifest was removed");
    assert!(
        took >= Duration::from_secs(3) && took < Duration::from_secs(20),
        "terminating with a hanging preStop took {took:?}, expected the grace period (3 s) + 2 s"
    );

    n.remove("prestop-exec.yaml");
    n.remove("prestop-http.yaml");
    wait_request("prestop-exec");
    wait_request("prestop-http");
    for name in ["prestop-exec", "prestop-http"] {
        poll(WAIT, || n.pod(name).is_none().then_some(()))
            .unwrap_or_else(|| panic!("{name} never finished terminating:\n{}", n.log_tail()));
    }
}

/// The handler pod of `lifecycle_hooks_exec_and_http`: busybox httpd on the host network,
/// serving a file per hook and logging every request. Returns its port and its log file.
fn start_hook_handler(n: &Nanolet) -> (u16, std::path::PathBuf) {
    let port = support::agent::free_port();
    let paths = [
        "poststart-exec",
        "prestop-exec",
        "poststart-http",
        "prestop-http",
    ];
    n.write(
        "handler.yaml",
        &pod_yaml(
            "handler",
            &format!(
                "spec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: localhost/busybox:1.36\n    command: [sh, -c]\n    args:\n    - |\n      mkdir -p /www\n      for f in {}; do echo ok > /www/$f; done\n      exec httpd -f -vv -p 127.0.0.1:{port} -h /www\n",
                paths.join(" ")
            ),
        ),
    );
    let p = wait_pod(n, "handler", "running", |p| running(p, "c"));
    let uid = p["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    poll(WAIT, || {
        ureq::get(&format!("http://127.0.0.1:{port}/poststart-exec"))
            .call()
            .ok()
    })
    .expect("handler pod serves");
    let handler_log = n
        .pod_logs()
        .join(format!("default_handler-node1_{uid}/c/0.log"));
    (port, handler_log)
}

/// The pods whose hooks call the handler on `port`, one per hook kind, and the failing and the
/// hanging hook.
fn write_hook_targets(n: &Nanolet, port: u16) {
    let target = |name: &str, hook: &str, handler: &str| {
        pod_yaml(
            name,
            &format!(
                "spec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 5\n  containers:\n  - name: c\n    image: localhost/busybox:1.36\n    command: [sleep, '600']\n    lifecycle:\n      {hook}:\n{handler}"
            ),
        )
    };
    let exec = |path: &str| {
        format!(
            "        exec:\n          command: [wget, -q, -O-, 'http://127.0.0.1:{port}/{path}']\n"
        )
    };
    let http = |path: &str| {
        format!(
            "        httpGet:\n          host: 127.0.0.1\n          port: {port}\n          path: /{path}\n"
        )
    };
    n.write(
        "poststart-exec.yaml",
        &target("poststart-exec", "postStart", &exec("poststart-exec")),
    );
    n.write(
        "poststart-http.yaml",
        &target("poststart-http", "postStart", &http("poststart-http")),
    );
    n.write(
        "prestop-exec.yaml",
        &target("prestop-exec", "preStop", &exec("prestop-exec")),
    );
    n.write(
        "prestop-http.yaml",
        &target("prestop-http", "preStop", &http("prestop-http")),
    );
    // A failing postStart hook kills the container (FailedPostStartHook); Always restarts it.
    n.write(
        "poststart-fails.yaml",
        &target(
            "poststart-fails",
            "postStart",
            "        exec:\n          command: ['false']\n",
        ),
    );
    // A preStop hook that hangs is cut off by the grace period (3 s, plus the kubelet's
    // one-off 2 s extension), then the container is killed.
    n.write(
        "prestop-hangs.yaml",
        &target(
            "prestop-hangs",
            "preStop",
            "        exec:\n          command: [sleep, '300']\n",
        )
        .replace(
            "terminationGracePeriodSeconds: 5",
            "terminationGracePeriodSeconds: 3",
        ),
    );
}

/// Waits until the handler's log shows a request for `/path` (the hook ran).
fn wait_hook_request(n: &Nanolet, handler_log: &std::path::Path, path: &str) {
    let needle = format!("url:/{path}");
    poll(WAIT, || {
        fs::read_to_string(handler_log)
            .ok()
            .filter(|s| s.contains(&needle))
    })
    .unwrap_or_else(|| {
        panic!(
            "the handler never saw {needle}; its log:\n{}\nnanolet log:\n{}",
            fs::read_to_string(handler_log).unwrap_or_default(),
            n.log_tail()
        )
    });
}

// --- init containers -------------------------------------------------------------------------

#[test]
fn failing_init_container_with_restart_always_keeps_the_pod_pending() {
    let _timer = Timer(
        "failing_init_container_with_restart_always_keeps_the_pod_pending",
        Instant::now(),
    );
    // init_container.go: "should not start app containers if init containers fail on a
    // RestartAlways pod".
    // Kubelet rules: with restartPolicy Always a failed init container is retried (with crash
    // backoff) and the pod stays Pending with Initialized False (ContainersNotInitialized,
    // `containers with incomplete status: [init1 init2]`); later init containers and the app
    // container never start; restart counts never decrease.
    let ctd = Containerd::start();
    let n = Nanolet::start(&ctd, &[]);
    n.write(
        "init.yaml",
        &pod_yaml(
            "init-fail",
            "spec:\n  restartPolicy: Always\n  terminationGracePeriodSeconds: 1\n  initContainers:\n  - name: init1\n    image: localhost/busybox:1.36\n    command: ['false']\n  - name: init2\n    image: localhost/busybox:1.36\n    command: ['true']\n  containers:\n  - name: run1\n    image: localhost/busybox:1.36\n    command: [sleep, '600']\n",
        ),
    );
    let mut last = 0;
    let deadline = Instant::now() + WAIT;
    loop {
        let Some(p) = n.pod("init-fail") else {
            std::thread::sleep(POLL);
            continue;
        };
        let init1 = status(&p, "initContainerStatuses", "init1");
        let count = init1["restartCount"].as_i64().unwrap_or(0);
        assert!(count >= last, "restartCount decreased: {last} -> {count}");
        last = count;
        assert_eq!(p["status"]["phase"], "Pending", "{:#}", p["status"]);
        let init2 = status(&p, "initContainerStatuses", "init2");
        assert!(
            !init2["state"]["running"].is_object() && !init2["state"]["terminated"].is_object(),
            "init2 started after init1 failed: {init2}"
        );
        let run1 = cs(&p, "run1");
        assert!(
            run1["state"]["waiting"].is_object(),
            "run1 must wait: {run1}"
        );
        assert_eq!(run1["state"]["waiting"]["reason"], "PodInitializing");
        let c = condition(&p, "Initialized");
        if c.is_object() {
            assert_eq!(c["status"], "False", "{c}");
            assert_eq!(c["reason"], "ContainersNotInitialized", "{c}");
            assert_eq!(
                c["message"], "containers with incomplete status: [init1 init2]",
                "{c}"
            );
        }
        if count >= 2 {
            assert!(
                init1["lastState"]["terminated"].is_object(),
                "init1 lastState: {init1}"
            );
            assert_eq!(init1["lastState"]["terminated"]["exitCode"], 1);
            assert!(c.is_object(), "no Initialized condition: {:#}", p["status"]);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "init1 not retried twice: {:#}\n{}",
            p["status"],
            n.log_tail()
        );
        std::thread::sleep(POLL);
    }
}

// --- sidecars ----------------------------------------------------------------------------------

#[test]
fn sidecar_startup_probe_gates_the_pod_and_its_readiness_counts() {
    let _timer = Timer(
        "sidecar_startup_probe_gates_the_pod_and_its_readiness_counts",
        Instant::now(),
    );
    // Kubelet rules (SidecarContainers, kuberuntime computeInitContainerActions): an init
    // container with restartPolicy Always is a sidecar; when it has a startup probe, the next
    // containers start only after that probe succeeded; its readiness counts toward the pod's
    // Ready and ContainersReady conditions; Initialized never goes from True back to False.
    let ctd = Containerd::start();
    let n = Nanolet::start(&ctd, &[]);
    n.write(
        "sidecar.yaml",
        &pod_yaml(
            "sidecar",
            "spec:\n  terminationGracePeriodSeconds: 1\n  initContainers:\n  - name: side\n    image: localhost/busybox:1.36\n    restartPolicy: Always\n    command: [sh, -c, 'sleep 4; touch /tmp/started; exec sleep 600']\n    startupProbe:\n      exec:\n        command: [cat, /tmp/started]\n      periodSeconds: 1\n      failureThreshold: 60\n    readinessProbe:\n      exec:\n        command: [cat, /tmp/ready]\n      periodSeconds: 1\n  containers:\n  - name: c\n    image: localhost/busybox:1.36\n    command: [sleep, '600']\n",
        ),
    );
    let side = |p: &Value| status(p, "initContainerStatuses", "side").clone();
    let p = wait_pod(&n, "sidecar", "sidecar running", |p| {
        side(p)["state"]["running"].is_object()
    });
    let side_started = time_of(&side(&p)["state"]["running"]["startedAt"]);
    let p = wait_pod(&n, "sidecar", "main container running", |p| running(p, "c"));
    let main_started = time_of(&cs(&p, "c")["state"]["running"]["startedAt"]);
    let gap = main_started.secs_since(&side_started);
    assert!(
        gap >= 4.0,
        "the main container started {gap}s after the sidecar, before its startup probe \
         succeeded (4s)"
    );
    assert_eq!(side(&p)["started"], true);
    assert_eq!(condition(&p, "Initialized")["status"], "True");

    // The sidecar is not ready (no /tmp/ready): neither is the pod.
    let p = wait_pod(&n, "sidecar", "main container ready", |p| {
        cs(p, "c")["ready"] == true
    });
    assert_eq!(side(&p)["ready"], false);
    for t in ["Ready", "ContainersReady"] {
        let c = condition(&p, t);
        assert_eq!(c["status"], "False", "{t}: {c}");
        assert_eq!(c["reason"], "ContainersNotReady", "{t}: {c}");
        assert_eq!(
            c["message"], "containers with unready status: [side]",
            "{t}: {c}"
        );
    }
    let id = side(&p)["containerID"]
        .as_str()
        .and_then(|s| s.strip_prefix("containerd://"))
        .expect("containerID")
        .to_string();
    let r = ctd
        .runtime()
        .exec_sync(
            &id,
            &["touch".into(), "/tmp/ready".into()],
            Duration::from_secs(5),
        )
        .expect("exec in the sidecar");
    assert_eq!(r.exit_code, 0);
    let p = wait_pod(&n, "sidecar", "Ready", |p| {
        condition(p, "Ready")["status"] == "True"
    });
    assert_eq!(side(&p)["ready"], true);
    assert_eq!(restarts(&p, "c"), 0);

    // The sidecar dies and is restarted (its startup probe runs again): Initialized never goes
    // back to False and the main container keeps running.
    ctd.runtime()
        .stop_container(&id, Duration::ZERO)
        .expect("stop the sidecar");
    let deadline = Instant::now() + WAIT;
    loop {
        let p = n.pod("sidecar").expect("sidecar listed");
        assert_eq!(
            condition(&p, "Initialized")["status"],
            "True",
            "Initialized went back to False: {:#}",
            p["status"]
        );
        assert!(
            running(&p, "c"),
            "main container stopped: {:#}",
            p["status"]
        );
        assert_eq!(restarts(&p, "c"), 0);
        let s = side(&p);
        if s["restartCount"].as_i64().unwrap_or(0) >= 1 && s["started"] == true {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "sidecar not restarted: {:#}\n{}",
            p["status"],
            n.log_tail()
        );
        std::thread::sleep(POLL);
    }
}

// --- gRPC ------------------------------------------------------------------------------------

/// The grpc.health.v1 server binary (examples/grpc_health_server.rs), built if missing.
fn grpc_server_binary() -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let debug = exe.parent().and_then(|d| d.parent()).expect("target/debug");
    let bin = debug.join("examples/grpc_health_server");
    if !bin.exists() {
        // Alone, as the upgrade test's build: `cargo test --all-targets` builds only the
        // example's test harness, so a fresh checkout compiles it here (nanolet and a few
        // dependencies again, without the dev-dependencies' features: both cores for a minute).
        let _alone = support::exclusive();
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let st = std::process::Command::new(cargo)
            .args(["build", "--example", "grpc_health_server"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .expect("cargo build --example");
        assert!(st.success(), "building the grpc test server");
    }
    bin
}

#[test]
fn grpc_probes() {
    // container_probe.go: "should *not* be restarted with a GRPC liveness probe" and "should be
    // restarted with a GRPC liveness probe".
    // Kubelet rules: a grpc probe calls grpc.health.v1.Health/Check on the pod IP with the
    // probe's `service`; SERVING is success, anything else a failure.
    // The server is a real process inside each container: examples/grpc_health_server, mounted
    // with the host's C library through hostPath volumes (the image has only busybox).
    let _timer = Timer("grpc_probes", Instant::now());
    let bin = grpc_server_binary();
    let bin_dir = bin.parent().expect("examples dir").display().to_string();
    let ctd = Containerd::start();
    let n = Nanolet::start(&ctd, &[]);
    let pod = |name: &str, kind: &str, service: &str| {
        pod_yaml(
            name,
            &format!(
                "spec:\n  terminationGracePeriodSeconds: 1\n  volumes:\n  - name: bin\n    hostPath: {{path: {bin_dir}, type: Directory}}\n  - name: lib\n    hostPath: {{path: /lib, type: Directory}}\n  - name: lib64\n    hostPath: {{path: /lib64, type: Directory}}\n  containers:\n  - name: c\n    image: localhost/busybox:1.36\n    command: [/probe-bin/grpc_health_server, '50051']\n    ports:\n    - name: grpc\n      containerPort: 50051\n    volumeMounts:\n    - {{name: bin, mountPath: /probe-bin, readOnly: true}}\n    - {{name: lib, mountPath: /lib, readOnly: true}}\n    - {{name: lib64, mountPath: /lib64, readOnly: true}}\n    {kind}:\n      grpc:\n        port: 50051\n        service: {service}\n      periodSeconds: 1\n      failureThreshold: 1\n      timeoutSeconds: 5\n"
            ),
        )
    };
    n.write("grpc-ok.yaml", &pod("grpc-ok", "readinessProbe", "fine"));
    n.write("grpc-live.yaml", &pod("grpc-live", "livenessProbe", "fine"));
    n.write("grpc-bad.yaml", &pod("grpc-bad", "livenessProbe", "broken"));

    wait_pod(&n, "grpc-ok", "Ready", |p| {
        condition(p, "Ready")["status"] == "True"
    });
    let p = wait_restarted(&n, "grpc-bad");
    assert!(
        cs(&p, "c")["lastState"]["terminated"].is_object(),
        "{:#}",
        p["status"]
    );
    observe(&n, "grpc-live", Duration::from_secs(4), never_restarted);
    // The servers inside the containers saw the probes' service names.
    for (name, needle) in [
        ("grpc-ok", "check service=fine"),
        ("grpc-bad", "check service=broken"),
    ] {
        let uid = n
            .pod(name)
            .map(|p| {
                p["metadata"]["uid"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            })
            .unwrap_or_default();
        let dir = n.pod_logs().join(format!("default_{name}-node1_{uid}/c"));
        poll(WAIT, || {
            fs::read_dir(&dir).ok()?.flatten().find_map(|e| {
                fs::read_to_string(e.path())
                    .ok()
                    .filter(|t| t.contains(needle))
            })
        })
        .unwrap_or_else(|| {
            panic!(
                "{name}: the server never logged {needle:?} in {}",
                dir.display()
            )
        });
    }
}

// --- termination -------------------------------------------------------------------------------

#[test]
fn terminating_pod_is_unready_and_not_liveness_probed() {
    // container_probe.go: "should mark readiness on pods to false and disable liveness probes
    // while pod is in progress of terminating".
    // Kubelet rules (SyncTerminatingPod): liveness and startup probes stop when the pod starts
    // terminating, readiness probes go on until its containers stopped, so the pod turns not
    // ready when its readiness probe fails (here the container's SIGTERM handler removes the
    // ready and liveness files, then takes 6 s to exit 0), and liveness no longer kills.
    let _timer = Timer(
        "terminating_pod_is_unready_and_not_liveness_probed",
        Instant::now(),
    );
    let ctd = Containerd::start();
    let n = Nanolet::start(&ctd, &[]);
    n.write(
        "term.yaml",
        &pod_yaml(
            "term",
            "spec:\n  terminationGracePeriodSeconds: 20\n  containers:\n  - name: c\n    image: localhost/busybox:1.36\n    command: [sh, -c]\n    args:\n    - |\n      trap 'rm -f /tmp/ready /tmp/liveness; sleep 6; exit 0' TERM\n      touch /tmp/ready /tmp/liveness\n      while true; do sleep 1; done\n    readinessProbe:\n      exec:\n        command: [cat, /tmp/ready]\n      periodSeconds: 1\n    livenessProbe:\n      exec:\n        command: [cat, /tmp/liveness]\n      periodSeconds: 1\n      failureThreshold: 1\n      timeoutSeconds: 5\n",
        ),
    );
    wait_pod(&n, "term", "Ready", |p| {
        condition(p, "Ready")["status"] == "True"
    });
    n.remove("term.yaml");
    let p = wait_pod(&n, "term", "unready while terminating", |p| {
        condition(p, "Ready")["status"] == "False"
    });
    assert_eq!(cs(&p, "c")["ready"], false);
    // Until the pod is gone: never restarted.
    let deadline = Instant::now() + WAIT;
    while let Some(p) = n.pod("term") {
        assert!(
            restarts(&p, "c") <= 0,
            "restarted while terminating: {:#}",
            p["status"]
        );
        assert!(Instant::now() < deadline, "never finished terminating");
        std::thread::sleep(POLL);
    }
    let log = fs::read_to_string(&n.log).unwrap_or_default();
    assert!(
        !log.lines()
            .any(|l| l.contains("term-node1") && l.contains("Liveness probe failed")),
        "liveness probed a terminating pod:\n{}",
        n.log_tail()
    );
}
