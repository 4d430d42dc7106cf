//! Pod and container security contexts → the CRI security settings, with the kubelet's
//! precedence (container fields override the pod's) and its runAsNonRoot check. Pure.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use super::{Container, Pod};
use crate::runtime::{ContainerSecurity, Seccomp};

fn obj(v: Option<&Value>) -> Option<&serde_json::Map<String, Value>> {
    v.and_then(Value::as_object)
}

fn pod_sc(pod: &Pod) -> Option<&serde_json::Map<String, Value>> {
    obj(pod.spec.extra.get("securityContext"))
}

fn container_sc(c: &Container) -> Option<&serde_json::Map<String, Value>> {
    obj(c.extra.get("securityContext"))
}

/// A field of the container's securityContext, else of the pod's.
fn effective<'a>(pod: &'a Pod, c: &'a Container, key: &str) -> Option<&'a Value> {
    container_sc(c)
        .and_then(|m| m.get(key))
        .or_else(|| pod_sc(pod).and_then(|m| m.get(key)))
        .filter(|v| !v.is_null())
}

fn seccomp_of(v: Option<&Value>, root_dir: &Path) -> Option<Seccomp> {
    let v = v?;
    match v.get("type").and_then(Value::as_str)? {
        "RuntimeDefault" => Some(Seccomp::RuntimeDefault),
        "Unconfined" => Some(Seccomp::Unconfined),
        "Localhost" => {
            let rel = v
                .get("localhostProfile")
                .and_then(Value::as_str)
                .unwrap_or_default();
            Some(Seccomp::Localhost(
                root_dir
                    .join("seccomp")
                    .join(rel)
                    .to_string_lossy()
                    .into_owned(),
            ))
        }
        _ => None,
    }
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_string)
        .collect()
}

/// Supplemental groups: fsGroup first, then supplementalGroups (the kubelet's order).
fn groups(pod: &Pod) -> Vec<i64> {
    let mut g = vec![];
    if let Some(sc) = pod_sc(pod) {
        if let Some(fs) = sc.get("fsGroup").and_then(Value::as_i64) {
            g.push(fs);
        }
        g.extend(
            sc.get("supplementalGroups")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_i64),
        );
    }
    g
}

/// The pod's fsGroup, if any (volumes are made group-owned by it).
pub fn fs_group(pod: &Pod) -> Option<u32> {
    pod_sc(pod)
        .and_then(|m| m.get("fsGroup"))
        .and_then(Value::as_u64)
        .and_then(|g| u32::try_from(g).ok())
}

/// The container's effective security settings. Seccomp `Localhost` profiles are looked up
/// below `<root-dir>/seccomp`, as the kubelet does below its root directory.
pub fn container_security(pod: &Pod, c: &Container, root_dir: &Path) -> ContainerSecurity {
    let csc = container_sc(c);
    let privileged = csc
        .and_then(|m| m.get("privileged"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let caps = csc.and_then(|m| m.get("capabilities"));
    // kubelet AddNoNewPrivileges: only an explicit allowPrivilegeEscalation: false sets it,
    // and never for privileged containers.
    let no_new_privs = !privileged
        && csc
            .and_then(|m| m.get("allowPrivilegeEscalation"))
            .and_then(Value::as_bool)
            == Some(false);
    ContainerSecurity {
        run_as_user: effective(pod, c, "runAsUser").and_then(Value::as_i64),
        run_as_group: effective(pod, c, "runAsGroup").and_then(Value::as_i64),
        supplemental_groups: groups(pod),
        privileged,
        add_capabilities: strings(caps.and_then(|c| c.get("add"))),
        drop_capabilities: strings(caps.and_then(|c| c.get("drop"))),
        readonly_rootfs: csc
            .and_then(|m| m.get("readOnlyRootFilesystem"))
            .and_then(Value::as_bool)
            .unwrap_or(false),
        no_new_privs,
        seccomp: seccomp_of(effective(pod, c, "seccompProfile"), root_dir),
    }
}

/// The sandbox's security: the pod-level user and groups and seccomp; privileged when any
/// container is (the kubelet's rule, so privileged containers can run in it).
pub fn sandbox_security(pod: &Pod, root_dir: &Path) -> ContainerSecurity {
    let sc = pod_sc(pod);
    let any_privileged = pod
        .spec
        .init_containers
        .iter()
        .chain(&pod.spec.containers)
        .any(|c| {
            container_sc(c)
                .and_then(|m| m.get("privileged"))
                .and_then(Value::as_bool)
                .unwrap_or(false)
        });
    ContainerSecurity {
        run_as_user: sc.and_then(|m| m.get("runAsUser")).and_then(Value::as_i64),
        run_as_group: sc.and_then(|m| m.get("runAsGroup")).and_then(Value::as_i64),
        supplemental_groups: groups(pod),
        privileged: any_privileged,
        seccomp: seccomp_of(sc.and_then(|m| m.get("seccompProfile")), root_dir),
        ..Default::default()
    }
}

/// spec.securityContext.sysctls.
pub fn sysctls(pod: &Pod) -> BTreeMap<String, String> {
    pod_sc(pod)
        .and_then(|m| m.get("sysctls"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|s| {
            Some((
                s.get("name")?.as_str()?.to_string(),
                s.get("value")?.as_str()?.to_string(),
            ))
        })
        .collect()
}

pub fn share_process_namespace(pod: &Pod) -> bool {
    pod.spec
        .extra
        .get("shareProcessNamespace")
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

/// Does the effective securityContext ask for runAsNonRoot?
pub fn run_as_non_root(pod: &Pod, c: &Container) -> bool {
    effective(pod, c, "runAsNonRoot").and_then(Value::as_bool) == Some(true)
}

/// The kubelet's verifyRunAsNonRoot: with runAsNonRoot, the effective user (runAsUser, else
/// the image's user) must be known and non-zero. Messages as the kubelet's.
pub fn verify_run_as_non_root(
    pod: &Pod,
    c: &Container,
    image_uid: Option<i64>,
    image_user: &str,
) -> Result<(), String> {
    if !run_as_non_root(pod, c) {
        return Ok(());
    }
    let fmt_pod = format!(
        "{}_{}({})",
        pod.metadata.name, pod.metadata.namespace, pod.metadata.uid
    );
    if let Some(uid) = effective(pod, c, "runAsUser").and_then(Value::as_i64) {
        if uid == 0 {
            return Err(format!(
                "container's runAsUser breaks non-root policy (pod: \"{fmt_pod}\", container: {})",
                c.name
            ));
        }
        return Ok(());
    }
    match image_uid {
        Some(0) | None if image_user.is_empty() => Err(format!(
            "container has runAsNonRoot and image will run as root (pod: \"{fmt_pod}\", container: {})",
            c.name
        )),
        Some(0) => Err(format!(
            "container has runAsNonRoot and image will run as root (pod: \"{fmt_pod}\", container: {})",
            c.name
        )),
        Some(_) => Ok(()),
        None => Err(format!(
            "container has runAsNonRoot and image has non-numeric user ({image_user}), cannot verify user is non-root (pod: \"{fmt_pod}\", container: {})",
            c.name
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(psc: Value, csc: Value) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = "sec-node1".into();
        p.metadata.namespace = "default".into();
        p.metadata.uid = "u1".into();
        p.spec.extra.insert("securityContext".into(), psc);
        let mut c = Container {
            name: "c".into(),
            ..Default::default()
        };
        c.extra.insert("securityContext".into(), csc);
        p.spec.containers.push(c);
        p
    }

    #[test]
    fn container_fields_override_the_pods() {
        let p = pod(
            json!({"runAsUser": 1000, "runAsGroup": 3000, "fsGroup": 2000, "supplementalGroups": [4000],
                   "seccompProfile": {"type": "RuntimeDefault"}, "sysctls": [{"name": "net.ipv4.ip_local_port_range", "value": "1024 65000"}]}),
            json!({"runAsUser": 2000, "allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
                   "capabilities": {"add": ["NET_ADMIN"], "drop": ["ALL"]}}),
        );
        let s = container_security(&p, &p.spec.containers[0], Path::new("/var/lib/nanolet"));
        assert_eq!(s.run_as_user, Some(2000));
        assert_eq!(s.run_as_group, Some(3000));
        assert_eq!(
            s.supplemental_groups,
            vec![2000, 4000],
            "fsGroup first, then supplementalGroups"
        );
        assert!(s.no_new_privs && s.readonly_rootfs && !s.privileged);
        assert_eq!(s.add_capabilities, vec!["NET_ADMIN"]);
        assert_eq!(s.drop_capabilities, vec!["ALL"]);
        assert_eq!(s.seccomp, Some(Seccomp::RuntimeDefault));
        assert_eq!(fs_group(&p), Some(2000));
        assert_eq!(
            sysctls(&p)
                .get("net.ipv4.ip_local_port_range")
                .map(String::as_str),
            Some("1024 65000")
        );
        let sb = sandbox_security(&p, Path::new("/var/lib/nanolet"));
        assert_eq!((sb.run_as_user, sb.privileged), (Some(1000), false));
    }

    #[test]
    fn privileged_never_gets_no_new_privs_and_marks_the_sandbox() {
        let p = pod(
            json!({}),
            json!({"privileged": true, "allowPrivilegeEscalation": false,
            "seccompProfile": {"type": "Localhost", "localhostProfile": "profiles/audit.json"}}),
        );
        let s = container_security(&p, &p.spec.containers[0], Path::new("/r"));
        assert!(s.privileged && !s.no_new_privs);
        assert_eq!(
            s.seccomp,
            Some(Seccomp::Localhost("/r/seccomp/profiles/audit.json".into()))
        );
        assert!(sandbox_security(&p, Path::new("/r")).privileged);
        assert_eq!(
            container_security(
                &pod(json!({}), json!({})),
                &Container::default(),
                Path::new("/r")
            )
            .seccomp,
            None
        );
    }

    #[test]
    fn run_as_non_root_is_checked_like_the_kubelet() {
        let p = pod(json!({"runAsNonRoot": true}), json!({}));
        let c = &p.spec.containers[0];
        let e = verify_run_as_non_root(&p, c, Some(0), "").expect_err("root image");
        assert_eq!(
            e,
            "container has runAsNonRoot and image will run as root (pod: \"sec-node1_default(u1)\", container: c)"
        );
        assert!(
            verify_run_as_non_root(&p, c, None, "").is_err(),
            "no user in the image means root"
        );
        assert!(verify_run_as_non_root(&p, c, Some(1000), "").is_ok());
        assert!(
            verify_run_as_non_root(&p, c, None, "nginx")
                .expect_err("non-numeric")
                .contains("non-numeric user (nginx)")
        );
        let p2 = pod(json!({"runAsNonRoot": true, "runAsUser": 0}), json!({}));
        assert!(
            verify_run_as_non_root(&p2, &p2.spec.containers[0], Some(1000), "")
                .expect_err("uid 0")
                .contains("breaks non-root policy")
        );
        let p3 = pod(json!({"runAsNonRoot": true}), json!({"runAsUser": 1000}));
        assert!(
            verify_run_as_non_root(&p3, &p3.spec.containers[0], Some(0), "").is_ok(),
            "runAsUser wins over the image"
        );
        let p4 = pod(json!({}), json!({}));
        assert!(
            verify_run_as_non_root(&p4, &p4.spec.containers[0], Some(0), "").is_ok(),
            "no policy, no check"
        );
    }
}
