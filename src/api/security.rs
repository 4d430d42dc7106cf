//! Pod and container security contexts → the CRI security settings, with the kubelet's
//! precedence (container fields override the pod's) and its runAsNonRoot check. Pure.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use super::{Container, Pod};

/// A seccomp or AppArmor profile (CRI SecurityProfile).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecurityProfile {
    RuntimeDefault,
    Unconfined,
    /// Seccomp: absolute path of a profile on the node; AppArmor: the name of a profile
    /// loaded on the node.
    Localhost(String),
}

/// The Linux security settings of one container (CRI LinuxContainerSecurityContext).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ContainerSecurity {
    pub run_as_user: Option<i64>,
    pub run_as_group: Option<i64>,
    pub supplemental_groups: Vec<i64>,
    pub privileged: bool,
    pub add_capabilities: Vec<String>,
    pub drop_capabilities: Vec<String>,
    pub readonly_rootfs: bool,
    pub no_new_privs: bool,
    pub seccomp: Option<SecurityProfile>,
    pub apparmor: Option<SecurityProfile>,
    /// seLinuxOptions (user, role, type, level); `None` when the pod sets none.
    pub selinux: Option<[String; 4]>,
}

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

fn seccomp_of(v: Option<&Value>, root_dir: &Path) -> Option<SecurityProfile> {
    let v = v?;
    match v.get("type").and_then(Value::as_str)? {
        "RuntimeDefault" => Some(SecurityProfile::RuntimeDefault),
        "Unconfined" => Some(SecurityProfile::Unconfined),
        "Localhost" => {
            let rel = v
                .get("localhostProfile")
                .and_then(Value::as_str)
                .unwrap_or_default();
            Some(SecurityProfile::Localhost(
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

/// The container's effective security settings. SecurityProfile `Localhost` profiles are looked up
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
        // Unset: Unconfined, sent explicitly as the kubelet's getSeccompProfile does without
        // seccompDefault.
        seccomp: Some(
            seccomp_of(effective(pod, c, "seccompProfile"), root_dir)
                .unwrap_or(SecurityProfile::Unconfined),
        ),
        apparmor: apparmor_profile(pod, c).and_then(|p| p.ok()),
        selinux: selinux_of(effective(pod, c, "seLinuxOptions")),
    }
}

/// The legacy per-container AppArmor annotation (values `runtime/default`, `unconfined`,
/// `localhost/<profile>`).
pub const APPARMOR_ANNOTATION_PREFIX: &str = "container.apparmor.security.beta.kubernetes.io/";

/// The container's AppArmor profile as the kubelet picks it for a static pod: the container's
/// An AppArmor setting that names no profile.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AppArmorError {
    #[error("appArmorProfile type Localhost needs a localhostProfile")]
    NoLocalhostProfile,
    #[error(
        "unsupported appArmorProfile type {0:?}: supported values: \"Localhost\", \"RuntimeDefault\", \"Unconfined\""
    )]
    Type(String),
    #[error(
        "invalid AppArmor annotation {key}: {value:?}: must be runtime/default, unconfined or localhost/<profile>"
    )]
    Annotation { key: String, value: String },
}

/// runAsNonRoot cannot be honoured (the kubelet's messages; `pod` is `name_namespace(uid)`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NonRootError {
    #[error(
        "container's runAsUser breaks non-root policy (pod: \"{pod}\", container: {container})"
    )]
    RunAsUserRoot { pod: String, container: String },
    #[error(
        "container has runAsNonRoot and image will run as root (pod: \"{pod}\", container: {container})"
    )]
    ImageRoot { pod: String, container: String },
    #[error(
        "container has runAsNonRoot and image has non-numeric user ({user}), cannot verify user is non-root (pod: \"{pod}\", container: {container})"
    )]
    NonNumericUser {
        user: String,
        pod: String,
        container: String,
    },
}

/// `securityContext.appArmorProfile`, else the legacy annotation (static pods never had their
/// annotations synced to fields by an API server), else the pod's `appArmorProfile`.
/// `Some(Err(reason))` for a value that names no profile.
pub fn apparmor_profile(
    pod: &Pod,
    c: &Container,
) -> Option<Result<SecurityProfile, AppArmorError>> {
    let field = |v: &Value| -> Result<SecurityProfile, AppArmorError> {
        match v.get("type").and_then(Value::as_str).unwrap_or_default() {
            "RuntimeDefault" => Ok(SecurityProfile::RuntimeDefault),
            "Unconfined" => Ok(SecurityProfile::Unconfined),
            "Localhost" => match v.get("localhostProfile").and_then(Value::as_str) {
                Some(p) if !p.is_empty() => Ok(SecurityProfile::Localhost(p.to_string())),
                _ => Err(AppArmorError::NoLocalhostProfile),
            },
            other => Err(AppArmorError::Type(other.into())),
        }
    };
    if let Some(v) = container_sc(c).and_then(|m| m.get("appArmorProfile")) {
        return Some(field(v));
    }
    let key = format!("{APPARMOR_ANNOTATION_PREFIX}{}", c.name);
    if let Some(a) = pod.metadata.annotations.get(&key) {
        return Some(match a.as_str() {
            "runtime/default" => Ok(SecurityProfile::RuntimeDefault),
            "unconfined" => Ok(SecurityProfile::Unconfined),
            other => match other.strip_prefix("localhost/") {
                Some(p) if !p.is_empty() => Ok(SecurityProfile::Localhost(p.to_string())),
                _ => Err(AppArmorError::Annotation {
                    key: key.clone(),
                    value: other.into(),
                }),
            },
        });
    }
    pod_sc(pod)
        .and_then(|m| m.get("appArmorProfile"))
        .map(field)
}

fn selinux_of(v: Option<&Value>) -> Option<[String; 4]> {
    let m = v?.as_object()?;
    let f = |k: &str| {
        m.get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let o = [f("user"), f("role"), f("type"), f("level")];
    if o.iter().all(String::is_empty) {
        None
    } else {
        Some(o)
    }
}

/// What the host's kernel enforces (read once from /sys by the caller).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HostSecurity {
    /// `/sys/module/apparmor/parameters/enabled` is `Y`.
    pub apparmor: bool,
    /// `/sys/fs/selinux/enforce` exists.
    pub selinux: bool,
    /// The runtime's default handler reports user namespace support (CRI `Status`
    /// `runtime_handlers[].features.user_namespaces`: containerd 2 with runc >= 1.2 on a
    /// kernel with idmapped mounts). Asked when a `hostUsers: false` pod is admitted.
    pub user_namespaces: bool,
}

impl HostSecurity {
    pub fn detect() -> HostSecurity {
        HostSecurity {
            apparmor: std::fs::read_to_string("/sys/module/apparmor/parameters/enabled")
                .is_ok_and(|s| s.trim() == "Y"),
            selinux: Path::new("/sys/fs/selinux/enforce").exists(),
            // The runtime is asked when a pod needs it (kubelet::sync_loop).
            user_namespaces: false,
        }
    }
}

/// Isolation the pod asks for that this node cannot give: the pod is refused (reason,
/// message), as the kubelet refuses a pod whose security features the node lacks, instead of
/// running it weaker than its manifest says.
/// - AppArmor (any profile but Unconfined) on a host without AppArmor: the kubelet's AppArmor
///   admission handler, reason `AppArmor`.
/// - `hostUsers: false` where the runtime's handler does not report user namespace support
///   (containerd 1.6 and 1.7 report no handlers): refused (`UserNamespacesNotSupported`, the
///   kubelet's message); where it does, the pod runs in its own user namespace
///   (`kuberuntime::userns`).
/// - `supplementalGroupsPolicy: Strict`: needs a runtime that reports the feature (containerd
///   2); refused as the kubelet does (`SupplementalGroupsPolicyNotSupported`).
/// - `procMount: Unmasked`: needs user namespaces (refused with them, `ProcMountNotSupported`).
pub fn unsupported_isolation(pod: &Pod, host: HostSecurity) -> Option<(&'static str, String)> {
    let containers = || pod.spec.init_containers.iter().chain(&pod.spec.containers);
    for c in containers() {
        match apparmor_profile(pod, c) {
            Some(Err(reason)) => return Some(("AppArmor", reason.to_string())),
            Some(Ok(p)) if p != SecurityProfile::Unconfined && !host.apparmor => {
                return Some((
                    "AppArmor",
                    format!(
                        "Cannot enforce AppArmor: AppArmor is not enabled on the host (container {:?} asks for a profile)",
                        c.name
                    ),
                ));
            }
            _ => {}
        }
    }
    if pod.spec.extra.get("hostUsers").and_then(Value::as_bool) == Some(false)
        && !host.user_namespaces
    {
        // The kubelet's GetOrCreateUserNamespaceMappings error text.
        return Some((
            "UserNamespacesNotSupported",
            "can't set `spec.hostUsers: false`, runtime does not support user namespaces".into(),
        ));
    }
    if pod_sc(pod)
        .and_then(|m| m.get("supplementalGroupsPolicy"))
        .and_then(Value::as_str)
        == Some("Strict")
    {
        return Some((
            "SupplementalGroupsPolicyNotSupported",
            "Pod requires SupplementalGroupsPolicy=Strict, but the node's runtime does not support it".into(),
        ));
    }
    for c in containers() {
        if container_sc(c)
            .and_then(|m| m.get("procMount"))
            .and_then(Value::as_str)
            == Some("Unmasked")
        {
            return Some((
                "ProcMountNotSupported",
                format!(
                    "container {:?} sets procMount: Unmasked, which nanolet does not support (it always masks /proc)",
                    c.name
                ),
            ));
        }
    }
    None
}

/// Isolation the pod asks for that the runtime is told about but this host does not enforce:
/// the pod runs (as on a kubelet, whose runtime ignores them too), and nanolet says so.
pub fn unenforced_isolation(pod: &Pod, host: HostSecurity) -> Vec<String> {
    let mut out = Vec::new();
    if !host.selinux {
        let pod_level = pod_sc(pod).and_then(|m| m.get("seLinuxOptions")).is_some();
        let containers = pod
            .spec
            .init_containers
            .iter()
            .chain(&pod.spec.containers)
            .filter(|c| {
                container_sc(c)
                    .and_then(|m| m.get("seLinuxOptions"))
                    .is_some()
            })
            .count();
        if pod_level || containers > 0 {
            out.push(
                "seLinuxOptions are passed to the runtime, but SELinux is not enabled on this host: they are not enforced".into(),
            );
        }
    }
    out
}

/// The sandbox's security: the pod-level user and groups; privileged when any container is
/// (the kubelet's rule, so privileged containers can run in it); seccomp always
/// RuntimeDefault, whatever the pod asks for its containers (the kubelet's
/// generatePodSandboxLinuxConfig: "Forcing sandbox to run as `runtime/default` allow users to
/// use least privileged seccomp profiles at pod level", kubernetes/kubernetes#84623).
pub fn sandbox_security(pod: &Pod) -> ContainerSecurity {
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
        seccomp: Some(SecurityProfile::RuntimeDefault),
        selinux: selinux_of(sc.and_then(|m| m.get("seLinuxOptions"))),
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
) -> Result<(), NonRootError> {
    if !run_as_non_root(pod, c) {
        return Ok(());
    }
    let fmt_pod = format!(
        "{}_{}({})",
        pod.metadata.name, pod.metadata.namespace, pod.metadata.uid
    );
    if let Some(uid) = effective(pod, c, "runAsUser").and_then(Value::as_i64) {
        if uid == 0 {
            return Err(NonRootError::RunAsUserRoot {
                pod: fmt_pod,
                container: c.name.clone(),
            });
        }
        return Ok(());
    }
    match image_uid {
        Some(0) | None if image_user.is_empty() => Err(NonRootError::ImageRoot {
            pod: fmt_pod,
            container: c.name.clone(),
        }),
        Some(0) => Err(NonRootError::ImageRoot {
            pod: fmt_pod,
            container: c.name.clone(),
        }),
        Some(_) => Ok(()),
        None => Err(NonRootError::NonNumericUser {
            user: image_user.into(),
            pod: fmt_pod,
            container: c.name.clone(),
        }),
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
        assert_eq!(s.seccomp, Some(SecurityProfile::RuntimeDefault));
        assert_eq!(fs_group(&p), Some(2000));
        assert_eq!(
            sysctls(&p)
                .get("net.ipv4.ip_local_port_range")
                .map(String::as_str),
            Some("1024 65000")
        );
        let sb = sandbox_security(&p);
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
            Some(SecurityProfile::Localhost(
                "/r/seccomp/profiles/audit.json".into()
            ))
        );
        assert!(sandbox_security(&p).privileged);
        assert_eq!(
            container_security(
                &pod(json!({}), json!({})),
                &Container::default(),
                Path::new("/r")
            )
            .seccomp,
            Some(SecurityProfile::Unconfined),
            "unset is Unconfined, sent explicitly (the kubelet's getSeccompProfile)"
        );
        assert_eq!(
            sandbox_security(&pod(
                json!({"seccompProfile": {"type": "Unconfined"}}),
                json!({})
            ))
            .seccomp,
            Some(SecurityProfile::RuntimeDefault),
            "the sandbox is always RuntimeDefault (the kubelet's generatePodSandboxLinuxConfig)"
        );
    }

    #[test]
    fn run_as_non_root_is_checked_like_the_kubelet() {
        let p = pod(json!({"runAsNonRoot": true}), json!({}));
        let c = &p.spec.containers[0];
        let e = verify_run_as_non_root(&p, c, Some(0), "").expect_err("root image");
        assert_eq!(
            e.to_string(),
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
                .to_string()
                .contains("non-numeric user (nginx)")
        );
        let p2 = pod(json!({"runAsNonRoot": true, "runAsUser": 0}), json!({}));
        assert!(
            verify_run_as_non_root(&p2, &p2.spec.containers[0], Some(1000), "")
                .expect_err("uid 0")
                .to_string()
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

    #[test]
    fn apparmor_profile_precedence_is_the_kubelets_for_static_pods() {
        // GetProfile: the container's field, else the legacy annotation (static pods never had
        // annotations synced to fields), else the pod's field.
        let mut p = pod(
            json!({"appArmorProfile": {"type": "Unconfined"}}),
            json!({}),
        );
        assert_eq!(
            apparmor_profile(&p, &p.spec.containers[0]),
            Some(Ok(SecurityProfile::Unconfined))
        );
        p.metadata.annotations.insert(
            format!("{APPARMOR_ANNOTATION_PREFIX}c"),
            "localhost/k8s-deny-write".into(),
        );
        assert_eq!(
            apparmor_profile(&p, &p.spec.containers[0]),
            Some(Ok(SecurityProfile::Localhost("k8s-deny-write".into())))
        );
        p.spec.containers[0].extra.insert(
            "securityContext".into(),
            json!({"appArmorProfile": {"type": "RuntimeDefault"}}),
        );
        let c = &p.spec.containers[0];
        assert_eq!(
            apparmor_profile(&p, c),
            Some(Ok(SecurityProfile::RuntimeDefault))
        );
        let sec = container_security(&p, c, Path::new("/var/lib/nanolet"));
        assert_eq!(sec.apparmor, Some(SecurityProfile::RuntimeDefault));
        let bad = pod(json!({}), json!({"appArmorProfile": {"type": "Localhost"}}));
        assert!(matches!(
            apparmor_profile(&bad, &bad.spec.containers[0]),
            Some(Err(_))
        ));
    }

    #[test]
    fn isolation_the_node_cannot_give_refuses_the_pod() {
        let none = HostSecurity::default();
        let both = HostSecurity {
            apparmor: true,
            selinux: true,
            user_namespaces: false,
        };
        // AppArmor: the kubelet's admit handler, only when a profile other than Unconfined.
        let aa = pod(
            json!({}),
            json!({"appArmorProfile": {"type": "RuntimeDefault"}}),
        );
        let (reason, msg) = unsupported_isolation(&aa, none).expect("refused");
        assert_eq!(reason, "AppArmor");
        assert!(
            msg.starts_with("Cannot enforce AppArmor: AppArmor is not enabled on the host"),
            "{msg}"
        );
        assert_eq!(unsupported_isolation(&aa, both), None);
        let unconfined = pod(
            json!({"appArmorProfile": {"type": "Unconfined"}}),
            json!({}),
        );
        assert_eq!(unsupported_isolation(&unconfined, none), None);
        let mut annotated = pod(json!({}), json!({}));
        annotated.metadata.annotations.insert(
            format!("{APPARMOR_ANNOTATION_PREFIX}c"),
            "runtime/default".into(),
        );
        assert_eq!(
            unsupported_isolation(&annotated, none).map(|r| r.0),
            Some("AppArmor")
        );
        // User namespaces: refused where the runtime reports no support (the kubelet's
        // message), admitted where it does. Strict supplemental groups, unmasked /proc:
        // refused everywhere.
        let mut userns = pod(json!({}), json!({}));
        userns.spec.extra.insert("hostUsers".into(), json!(false));
        assert_eq!(
            unsupported_isolation(&userns, both),
            Some((
                "UserNamespacesNotSupported",
                "can't set `spec.hostUsers: false`, runtime does not support user namespaces"
                    .to_string()
            ))
        );
        let userns_ok = HostSecurity {
            user_namespaces: true,
            ..both
        };
        assert_eq!(unsupported_isolation(&userns, userns_ok), None);
        userns.spec.extra.insert("hostUsers".into(), json!(true));
        assert_eq!(unsupported_isolation(&userns, both), None);
        let strict = pod(json!({"supplementalGroupsPolicy": "Strict"}), json!({}));
        assert_eq!(
            unsupported_isolation(&strict, both).map(|r| r.0),
            Some("SupplementalGroupsPolicyNotSupported")
        );
        let merge = pod(json!({"supplementalGroupsPolicy": "Merge"}), json!({}));
        assert_eq!(unsupported_isolation(&merge, both), None);
        let unmasked = pod(json!({}), json!({"procMount": "Unmasked"}));
        assert_eq!(
            unsupported_isolation(&unmasked, both).map(|r| r.0),
            Some("ProcMountNotSupported")
        );
        let default_mount = pod(json!({}), json!({"procMount": "Default"}));
        assert_eq!(unsupported_isolation(&default_mount, both), None);
    }

    #[test]
    fn selinux_options_go_to_the_runtime_and_are_said_when_not_enforced() {
        let p = pod(
            json!({"seLinuxOptions": {"level": "s0:c123,c456"}}),
            json!({"seLinuxOptions": {"type": "spc_t"}}),
        );
        let c = &p.spec.containers[0];
        let sec = container_security(&p, c, Path::new("/r"));
        // The container's options replace the pod's as a whole (the kubelet's effective context).
        assert_eq!(
            sec.selinux,
            Some(["".into(), "".into(), "spc_t".into(), "".into()])
        );
        let sb = sandbox_security(&p);
        assert_eq!(
            sb.selinux,
            Some(["".into(), "".into(), "".into(), "s0:c123,c456".into()])
        );
        assert_eq!(unenforced_isolation(&p, HostSecurity::default()).len(), 1);
        assert!(
            unenforced_isolation(
                &p,
                HostSecurity {
                    apparmor: false,
                    selinux: true,
                    user_namespaces: false,
                }
            )
            .is_empty()
        );
        assert!(
            unenforced_isolation(&pod(json!({}), json!({})), HostSecurity::default()).is_empty()
        );
    }
}
