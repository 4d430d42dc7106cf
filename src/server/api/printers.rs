//! The apiserver's table printers (kubectl `get` columns) for pods, nodes and events, and
//! kubectl's human durations.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};

use crate::timeutil::parse_rfc3339;

fn column(name: &str, type_: &str, format: &str, priority: u8, description: &str) -> Value {
    json!({
        "name": name,
        "type": type_,
        "format": format,
        "description": description,
        "priority": priority,
    })
}

/// The row's object: the full object with `includeObject=Object`, `None` omits it, otherwise
/// (the default, `Metadata`) a PartialObjectMetadata.
fn row_object(obj: &Value, q: &BTreeMap<String, String>) -> Option<Value> {
    match q.get("includeObject").map(String::as_str) {
        Some("None") => None,
        Some("Object") => Some(obj.clone()),
        _ => Some(json!({
            "kind": "PartialObjectMetadata",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": obj["metadata"],
        })),
    }
}

fn table(columns: Vec<Value>, rows: Vec<Value>) -> Value {
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": ""},
        "columnDefinitions": columns,
        "rows": rows,
    })
}

fn row(cells: Vec<Value>, obj: &Value, q: &BTreeMap<String, String>) -> Value {
    let mut r = json!({"cells": cells});
    if let Some(o) = row_object(obj, q) {
        r["object"] = o;
    }
    r
}

/// kubectl's `duration.HumanDuration`.
pub fn human_duration(d: Duration) -> String {
    let secs = d.as_secs_f64().round() as u64;
    if secs < 120 {
        return format!("{secs}s");
    }
    let minutes = secs / 60;
    if minutes < 10 {
        let s = secs % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = secs / 3600;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 {
            format!("{}d", hours / 24)
        } else {
            format!("{}d{h}h", hours / 24)
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let dy = (hours / 24) % 365;
        return if dy == 0 {
            format!("{}y", hours / 24 / 365)
        } else {
            format!("{}y{dy}d", hours / 24 / 365)
        };
    }
    format!("{}y", hours / 24 / 365)
}

/// Age of an RFC 3339 timestamp at `now`; `<unknown>` when absent.
fn age(ts: Option<&str>, now: SystemTime) -> String {
    match ts.and_then(parse_rfc3339) {
        Some(t) => human_duration(now.duration_since(t).unwrap_or_default()),
        None => "<unknown>".into(),
    }
}

fn reason_of_terminated(t: &Value) -> String {
    if let Some(r) = t["reason"].as_str().filter(|r| !r.is_empty()) {
        return r.to_string();
    }
    match t["signal"].as_i64().filter(|s| *s != 0) {
        Some(s) => format!("Signal:{s}"),
        None => format!("ExitCode:{}", t["exitCode"].as_i64().unwrap_or(0)),
    }
}

/// (READY, STATUS, RESTARTS) as kubectl's pod printer computes them.
pub fn pod_columns(p: &Value, now: SystemTime) -> (String, String, String) {
    let st = &p["status"];
    let empty = vec![];
    let spec_containers = p["spec"]["containers"].as_array().unwrap_or(&empty);
    let statuses = st["containerStatuses"].as_array().unwrap_or(&empty);
    let init_statuses = st["initContainerStatuses"].as_array().unwrap_or(&empty);
    let init_specs = p["spec"]["initContainers"].as_array().unwrap_or(&empty);
    let mut reason = st["phase"].as_str().unwrap_or("").to_string();
    if let Some(r) = st["reason"].as_str().filter(|r| !r.is_empty()) {
        reason = r.to_string();
    }
    let mut restarts: i64 = 0;
    let mut last_restart: Option<SystemTime> = None;
    let mut note_restart = |c: &Value| {
        restarts += c["restartCount"].as_i64().unwrap_or(0);
        if let Some(t) = c["lastState"]["terminated"]["finishedAt"]
            .as_str()
            .and_then(parse_rfc3339)
        {
            if last_restart.is_none_or(|l| t > l) {
                last_restart = Some(t);
            }
        }
    };
    let mut initializing = false;
    for (i, c) in init_statuses.iter().enumerate() {
        note_restart(c);
        let term = &c["state"]["terminated"];
        if term.is_object() && term["exitCode"].as_i64() == Some(0) {
            continue;
        }
        if c["started"] == true && c["state"]["running"].is_object() {
            // A running restartable init container (sidecar) does not block.
            let sidecar = init_specs
                .iter()
                .find(|s| s["name"] == c["name"])
                .is_some_and(|s| s["restartPolicy"] == "Always");
            if sidecar {
                continue;
            }
        }
        reason = if term.is_object() {
            format!("Init:{}", reason_of_terminated(term))
        } else if let Some(w) = c["state"]["waiting"]["reason"]
            .as_str()
            .filter(|r| !r.is_empty() && *r != "PodInitializing")
        {
            format!("Init:{w}")
        } else {
            format!("Init:{i}/{}", init_specs.len())
        };
        initializing = true;
        break;
    }
    let mut ready = 0;
    if !initializing {
        let mut has_running = false;
        for c in statuses.iter().rev() {
            note_restart(c);
            if let Some(w) = c["state"]["waiting"]["reason"]
                .as_str()
                .filter(|r| !r.is_empty())
            {
                reason = w.to_string();
            } else if c["state"]["terminated"].is_object() {
                reason = reason_of_terminated(&c["state"]["terminated"]);
            } else if c["ready"] == true && c["state"]["running"].is_object() {
                has_running = true;
                ready += 1;
            }
        }
        if reason == "Completed" && has_running {
            let pod_ready = st["conditions"].as_array().is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            });
            reason = if pod_ready { "Running" } else { "NotReady" }.into();
        }
    } else {
        for c in statuses {
            note_restart(c);
        }
    }
    if p["metadata"]["deletionTimestamp"].is_string() {
        reason = "Terminating".into();
    }
    let restarts = match last_restart {
        Some(t) if restarts > 0 => format!(
            "{restarts} ({} ago)",
            human_duration(now.duration_since(t).unwrap_or_default())
        ),
        _ => restarts.to_string(),
    };
    (
        format!("{ready}/{}", spec_containers.len()),
        reason,
        restarts,
    )
}

pub fn pod_table(pods: &[Value], q: &BTreeMap<String, String>, now: SystemTime) -> Value {
    let columns = vec![
        column(
            "Name",
            "string",
            "name",
            0,
            "Name must be unique within a namespace.",
        ),
        column(
            "Ready",
            "string",
            "",
            0,
            "The aggregate readiness state of this pod for accepting traffic.",
        ),
        column(
            "Status",
            "string",
            "",
            0,
            "The aggregate status of the containers in this pod.",
        ),
        column(
            "Restarts",
            "string",
            "",
            0,
            "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.",
        ),
        column(
            "Age",
            "string",
            "",
            0,
            "CreationTimestamp is a timestamp representing the server time when this object was created.",
        ),
        column("IP", "string", "", 1, "IP address allocated to the pod."),
        column(
            "Node",
            "string",
            "",
            1,
            "Name of the node the pod is assigned to.",
        ),
        column(
            "Nominated Node",
            "string",
            "",
            1,
            "Name of the node the pod is nominated to.",
        ),
        column(
            "Readiness Gates",
            "string",
            "",
            1,
            "Readiness gates of the pod.",
        ),
    ];
    let rows = pods
        .iter()
        .map(|p| {
            let (ready, status, restarts) = pod_columns(p, now);
            let none = || json!("<none>");
            let ip = p["status"]["podIP"]
                .as_str()
                .filter(|s| !s.is_empty())
                .map_or_else(none, |s| json!(s));
            let node = p["spec"]["nodeName"]
                .as_str()
                .filter(|s| !s.is_empty())
                .map_or_else(none, |s| json!(s));
            row(
                vec![
                    p["metadata"]["name"].clone(),
                    json!(ready),
                    json!(status),
                    json!(restarts),
                    json!(age(p["metadata"]["creationTimestamp"].as_str(), now)),
                    ip,
                    node,
                    none(),
                    none(),
                ],
                p,
                q,
            )
        })
        .collect();
    table(columns, rows)
}

pub(super) fn node_table(nodes: &[Value], q: &BTreeMap<String, String>, now: SystemTime) -> Value {
    let columns = vec![
        column(
            "Name",
            "string",
            "name",
            0,
            "Name must be unique within a namespace.",
        ),
        column("Status", "string", "", 0, "The status of the node"),
        column("Roles", "string", "", 0, "The roles of the node"),
        column(
            "Age",
            "string",
            "",
            0,
            "CreationTimestamp is a timestamp representing the server time when this object was created.",
        ),
        column(
            "Version",
            "string",
            "",
            0,
            "Kubelet Version reported by the node.",
        ),
        column(
            "Internal-IP",
            "string",
            "",
            1,
            "List of internal IPs in the PodStatus.",
        ),
        column(
            "External-IP",
            "string",
            "",
            1,
            "List of external IPs in the PodStatus.",
        ),
        column(
            "OS-Image",
            "string",
            "",
            1,
            "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy)).",
        ),
        column(
            "Kernel-Version",
            "string",
            "",
            1,
            "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64).",
        ),
        column(
            "Container-Runtime",
            "string",
            "",
            1,
            "Container Runtime Version reported by the node through runtime remote API (e.g. containerd://1.4.2).",
        ),
    ];
    let rows = nodes
        .iter()
        .map(|n| {
            let info = &n["status"]["nodeInfo"];
            let internal = n["status"]["addresses"]
                .as_array()
                .and_then(|a| a.iter().find(|x| x["type"] == "InternalIP"))
                .map_or(json!("<none>"), |x| x["address"].clone());
            row(
                vec![
                    n["metadata"]["name"].clone(),
                    json!("Ready"),
                    json!("<none>"),
                    json!(age(n["metadata"]["creationTimestamp"].as_str(), now)),
                    info["kubeletVersion"].clone(),
                    internal,
                    json!("<none>"),
                    info["osImage"].clone(),
                    info["kernelVersion"].clone(),
                    info["containerRuntimeVersion"].clone(),
                ],
                n,
                q,
            )
        })
        .collect();
    table(columns, rows)
}

pub(super) fn event_table(
    events: &[Value],
    q: &BTreeMap<String, String>,
    now: SystemTime,
) -> Value {
    let columns = vec![
        column(
            "Last Seen",
            "string",
            "",
            0,
            "Time when this Event was last seen",
        ),
        column(
            "Type",
            "string",
            "",
            0,
            "Type of this event (Normal, Warning), new types could be added in the future.",
        ),
        column(
            "Reason",
            "string",
            "",
            0,
            "A machine-readable description of why this event was generated.",
        ),
        column("Object", "string", "", 0, "The object this Event is about."),
        column(
            "Subobject",
            "string",
            "",
            1,
            "The subobject this Event is about.",
        ),
        column(
            "Source",
            "string",
            "",
            1,
            "The component reporting this event.",
        ),
        column(
            "Message",
            "string",
            "",
            0,
            "A human-readable description of the status of this operation.",
        ),
        column(
            "First Seen",
            "string",
            "",
            1,
            "Time when this Event was first seen",
        ),
        column(
            "Count",
            "string",
            "",
            1,
            "The number of times this event has occurred.",
        ),
        column("Name", "string", "name", 1, "The name of this event"),
    ];
    let rows = events
        .iter()
        .map(|e| {
            let io = &e["involvedObject"];
            row(
                vec![
                    json!(age(e["lastTimestamp"].as_str(), now)),
                    e["type"].clone(),
                    e["reason"].clone(),
                    // Node events too (kubectl prints kind/name in lower case).
                    json!(format!(
                        "{}/{}",
                        io["kind"].as_str().unwrap_or("Pod").to_lowercase(),
                        io["name"].as_str().unwrap_or_default()
                    )),
                    json!(io["fieldPath"].as_str().unwrap_or("")),
                    json!(format!(
                        "kubelet, {}",
                        e["source"]["host"].as_str().unwrap_or_default()
                    )),
                    e["message"].clone(),
                    json!(age(e["firstTimestamp"].as_str(), now)),
                    json!(e["count"].as_i64().unwrap_or(1).to_string()),
                    e["metadata"]["name"].clone(),
                ],
                e,
                q,
            )
        })
        .collect();
    table(columns, rows)
}

// ---------------------------------------------------------------------------------------------
// Events

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_durations_like_kubectl() {
        for (s, want) in [
            (0, "0s"),
            (119, "119s"),
            (120, "2m"),
            (125, "2m5s"),
            (600, "10m"),
            (3 * 3600, "3h"),
            (3 * 3600 + 60, "3h1m"),
            (10 * 3600, "10h"),
            (50 * 3600, "2d2h"),
            (10 * 86400, "10d"),
            (800 * 86400, "2y70d"),
        ] {
            assert_eq!(human_duration(Duration::from_secs(s)), want, "{s}");
        }
    }

    fn pod_json(status: Value) -> Value {
        json!({
            "metadata": {"name": "web-node1", "namespace": "default", "creationTimestamp": "2026-11-22T18:00:00Z"},
            "spec": {"nodeName": "node1", "containers": [{"name": "a"}, {"name": "b"}]},
            "status": status,
        })
    }

    #[test]
    fn pod_table_columns() {
        let now = parse_rfc3339("2026-11-22T18:05:00Z").unwrap();
        let p = pod_json(json!({
            "phase": "Running",
            "podIP": "10.1.0.5",
            "containerStatuses": [
                {"name": "a", "ready": true, "restartCount": 0, "state": {"running": {}}},
                {"name": "b", "ready": false, "restartCount": 3,
                 "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                 "lastState": {"terminated": {"exitCode": 1, "finishedAt": "2026-11-22T18:04:30Z"}}},
            ],
        }));
        let t = pod_table(&[p], &BTreeMap::new(), now);
        assert_eq!(t["kind"], "Table");
        assert_eq!(t["apiVersion"], "meta.k8s.io/v1");
        let names: Vec<&str> = t["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "Name",
                "Ready",
                "Status",
                "Restarts",
                "Age",
                "IP",
                "Node",
                "Nominated Node",
                "Readiness Gates"
            ]
        );
        assert_eq!(
            t["rows"][0]["cells"],
            json!([
                "web-node1",
                "1/2",
                "CrashLoopBackOff",
                "3 (30s ago)",
                "5m",
                "10.1.0.5",
                "node1",
                "<none>",
                "<none>"
            ])
        );
        assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
        assert_eq!(t["rows"][0]["object"]["metadata"]["namespace"], "default");

        // Init containers and completed pods.
        let p = pod_json(json!({
            "phase": "Pending",
            "initContainerStatuses": [{"name": "i", "restartCount": 0, "state": {"running": {}}}],
        }));
        let mut p = p;
        p["spec"]["initContainers"] = json!([{"name": "i"}]);
        assert_eq!(pod_columns(&p, now).1, "Init:0/1");
        let p = pod_json(json!({
            "phase": "Succeeded",
            "containerStatuses": [
                {"name": "a", "restartCount": 0, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
                {"name": "b", "restartCount": 0, "state": {"terminated": {"exitCode": 137}}},
            ],
        }));
        assert_eq!(
            pod_columns(&p, now),
            ("0/2".into(), "Completed".into(), "0".into())
        );
    }
}
