//! The operator's hardening options, checked at admission (pure): `--allow-privileged=false`,
//! `--allowed-host-paths=PREFIX,...` and `--deny-host-namespaces`.
//!
//! A pod that breaks one is rejected like the kubelet rejects a pod it cannot admit: phase
//! `Failed`, reason [`REASON`], and a message naming the field path, e.g.
//! `spec.containers[0].securityContext.privileged: Forbidden: privileged containers are not
//! allowed on this node (--allow-privileged=false)`. The next edit of the manifest (a new UID)
//! is admitted afresh.

use std::path::{Component, Path, PathBuf};

use serde_json::Value;

use crate::api::Pod;
pub use crate::kubeletconfig::SecurityPolicy;

/// The status reason of a pod rejected by the node's security policy.
pub const REASON: &str = "Forbidden";

/// The first violation of `policy` in `pod`: a message that starts with the field path.
pub fn violation(pod: &Pod, policy: &SecurityPolicy) -> Option<String> {
    if policy.deny_host_namespaces {
        for (field, on) in [
            ("hostNetwork", pod.spec.host_network),
            ("hostPID", pod.spec.host_pid),
            ("hostIPC", pod.spec.host_ipc),
        ] {
            if on {
                return Some(format!(
                    "spec.{field}: Forbidden: host namespaces are not allowed on this node (--deny-host-namespaces)"
                ));
            }
        }
    }
    if !policy.allow_privileged {
        for (list, containers) in [
            ("initContainers", &pod.spec.init_containers),
            ("containers", &pod.spec.containers),
        ] {
            for (i, c) in containers.iter().enumerate() {
                let privileged = c
                    .extra
                    .get("securityContext")
                    .and_then(|sc| sc.get("privileged"))
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                if privileged {
                    return Some(format!(
                        "spec.{list}[{i}].securityContext.privileged: Forbidden: privileged containers are not allowed on this node (--allow-privileged=false)"
                    ));
                }
            }
        }
    }
    if !policy.allowed_host_paths.is_empty() {
        let volumes = pod.spec.extra.get("volumes").and_then(Value::as_array);
        for (i, v) in volumes.into_iter().flatten().enumerate() {
            let Some(hp) = v.get("hostPath") else {
                continue;
            };
            let path = hp.get("path").and_then(Value::as_str).unwrap_or_default();
            if !host_path_allowed(Path::new(path), &policy.allowed_host_paths) {
                let allowed: Vec<String> = policy
                    .allowed_host_paths
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect();
                return Some(format!(
                    "spec.volumes[{i}].hostPath.path: Forbidden: {path:?} is not below an allowed host path (--allowed-host-paths={})",
                    allowed.join(",")
                ));
            }
        }
    }
    None
}

/// Whether `path` is absolute, free of `..`, and equal to or below one of `allowed`, compared
/// by whole components (`/srv` allows `/srv/a`, not `/srv2`).
pub fn host_path_allowed(path: &Path, allowed: &[PathBuf]) -> bool {
    if !path.is_absolute() || path.components().any(|c| c == Component::ParentDir) {
        return false;
    }
    allowed.iter().any(|prefix| path.starts_with(prefix))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec
        }))
        .expect("pod")
    }

    #[test]
    fn defaults_allow_everything() {
        let p = pod(serde_json::json!({
            "hostNetwork": true, "hostPID": true,
            "containers": [{"name": "c", "image": "i", "securityContext": {"privileged": true}}],
            "volumes": [{"name": "v", "hostPath": {"path": "/etc"}}]
        }));
        assert_eq!(violation(&p, &SecurityPolicy::default()), None);
    }

    #[test]
    fn privileged_containers_are_refused_with_the_field_path() {
        let policy = SecurityPolicy {
            allow_privileged: false,
            ..Default::default()
        };
        let p = pod(serde_json::json!({
            "initContainers": [{"name": "i", "image": "i", "securityContext": {"privileged": false}}],
            "containers": [
                {"name": "a", "image": "i"},
                {"name": "b", "image": "i", "securityContext": {"privileged": true}}
            ]
        }));
        let v = violation(&p, &policy).expect("violation");
        assert!(
            v.starts_with("spec.containers[1].securityContext.privileged: Forbidden:"),
            "{v}"
        );
        let p = pod(serde_json::json!({
            "initContainers": [{"name": "i", "image": "i", "securityContext": {"privileged": true}}],
            "containers": [{"name": "a", "image": "i"}]
        }));
        assert!(
            violation(&p, &policy)
                .expect("violation")
                .starts_with("spec.initContainers[0]")
        );
        let p = pod(serde_json::json!({"containers": [{"name": "a", "image": "i"}]}));
        assert_eq!(violation(&p, &policy), None);
    }

    #[test]
    fn host_namespaces_are_refused() {
        let policy = SecurityPolicy {
            deny_host_namespaces: true,
            ..Default::default()
        };
        for (field, name) in [
            ("hostNetwork", "spec.hostNetwork"),
            ("hostPID", "spec.hostPID"),
            ("hostIPC", "spec.hostIPC"),
        ] {
            let p =
                pod(serde_json::json!({field: true, "containers": [{"name": "a", "image": "i"}]}));
            let v = violation(&p, &policy).expect("violation");
            assert!(v.starts_with(&format!("{name}: Forbidden: ")), "{v}");
        }
        let p = pod(serde_json::json!({"containers": [{"name": "a", "image": "i"}]}));
        assert_eq!(violation(&p, &policy), None);
    }

    #[test]
    fn host_paths_must_be_below_an_allowed_prefix() {
        let allowed = vec![PathBuf::from("/var/log"), PathBuf::from("/srv/")];
        let ok = |p: &str| host_path_allowed(Path::new(p), &allowed);
        assert!(ok("/var/log"));
        assert!(ok("/var/log/app"));
        assert!(ok("/srv"));
        assert!(ok("/srv/data/x/"));
        assert!(ok("/var//log/./a"));
        assert!(!ok("/var/logs"));
        assert!(!ok("/srv2"));
        assert!(!ok("/var/log/../../etc"));
        assert!(!ok("var/log"));
        assert!(!ok("/"));
        assert!(!ok("/etc"));
        let policy = SecurityPolicy {
            allowed_host_paths: allowed,
            ..Default::default()
        };
        let p = pod(serde_json::json!({
            "containers": [{"name": "a", "image": "i"}],
            "volumes": [
                {"name": "e", "emptyDir": {}},
                {"name": "logs", "hostPath": {"path": "/var/log/app"}},
                {"name": "etc", "hostPath": {"path": "/etc"}}
            ]
        }));
        let v = violation(&p, &policy).expect("violation");
        assert_eq!(
            v,
            "spec.volumes[2].hostPath.path: Forbidden: \"/etc\" is not below an allowed host path (--allowed-host-paths=/var/log,/srv/)"
        );
    }
}
