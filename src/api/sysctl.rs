//! The kubelet's sysctl admission (pkg/kubelet/sysctl, v1.33 as v1.36): a pod whose
//! `securityContext.sysctls` names a sysctl that is neither in the safe set nor allowed by
//! `--allowed-unsafe-sysctls` is refused (`SysctlForbidden`), and so is a namespaced sysctl
//! of a namespace the pod shares with the host (hostNetwork, hostIPC). Pure.

use serde_json::Value;

use crate::api::Pod;

/// The rejection reason (sysctl.ForbiddenReason).
pub const FORBIDDEN_REASON: &str = "SysctlForbidden";

/// The safe sysctls (safe_sysctls.go), each with the kernel (major, minor) from which it is
/// namespaced; older kernels drop it from the set.
const SAFE_SYSCTLS: &[(&str, (u32, u32))] = &[
    ("kernel.shm_rmid_forced", (0, 0)),
    ("net.ipv4.ip_local_port_range", (0, 0)),
    ("net.ipv4.tcp_syncookies", (0, 0)),
    ("net.ipv4.ping_group_range", (0, 0)),
    ("net.ipv4.ip_unprivileged_port_start", (0, 0)),
    ("net.ipv4.ip_local_reserved_ports", (3, 16)),
    ("net.ipv4.tcp_keepalive_time", (4, 5)),
    ("net.ipv4.tcp_fin_timeout", (4, 6)),
    ("net.ipv4.tcp_keepalive_intvl", (4, 5)),
    ("net.ipv4.tcp_keepalive_probes", (4, 5)),
    ("net.ipv4.tcp_rmem", (4, 15)),
    ("net.ipv4.tcp_wmem", (4, 15)),
];

/// The kernel namespace a sysctl belongs to (component-helpers node/util/sysctl).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Namespace {
    Ipc,
    Net,
}

impl Namespace {
    fn as_str(self) -> &'static str {
        match self {
            Namespace::Ipc => "IPC",
            Namespace::Net => "Net",
        }
    }
}

/// An `--allowed-unsafe-sysctls` entry the kubelet would refuse at start-up (NewAllowlist).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatternError {
    #[error(
        "sysctl {0:?} must have at most 253 characters and match regex ([a-z0-9]([-_a-z0-9]*[a-z0-9])?[\\./])*([a-z0-9][-_a-z0-9]*)?[a-z0-9*]"
    )]
    Invalid(String),
    #[error("the sysctls {0:?} are not known to be namespaced")]
    NotNamespaced(String),
}

/// `net/ipv4/conf/eno2.100/rp_filter` -> `net.ipv4.conf.eno2/100.rp_filter` (NormalizeName):
/// a name whose first separator is `/` has `.` and `/` swapped.
fn normalize(name: &str) -> String {
    match name.find(['.', '/']) {
        Some(i) if name.as_bytes()[i] == b'/' => name
            .chars()
            .map(|c| match c {
                '.' => '/',
                '/' => '.',
                c => c,
            })
            .collect(),
        _ => name.to_string(),
    }
}

fn namespace_of(name: &str) -> Option<Namespace> {
    const IPC: &[&str] = &[
        "kernel.sem",
        "kernel.shmall",
        "kernel.shmmax",
        "kernel.shmmni",
        "kernel.shm_rmid_forced",
        "kernel.shm",
        "kernel.msgmax",
        "kernel.msgmnb",
        "kernel.msgmni",
        "kernel.msg",
    ];
    if IPC.contains(&name) || name.starts_with("fs.mqueue.") {
        Some(Namespace::Ipc)
    } else if name.starts_with("net.") {
        Some(Namespace::Net)
    } else {
        None
    }
}

/// IsValidSysctlPattern: at most 253 characters; segments separated by `.` or `/`, each
/// `[a-z0-9]([-_a-z0-9]*[a-z0-9])?`, the last `([a-z0-9][-_a-z0-9]*)?[a-z0-9*]`.
fn valid_pattern(p: &str) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    let inner = |c: char| alnum(c) || c == '-' || c == '_';
    if p.is_empty() || p.len() > 253 {
        return false;
    }
    let segments: Vec<&str> = p.split(['.', '/']).collect();
    let (last, rest) = match segments.split_last() {
        Some(x) => x,
        None => return false,
    };
    let segment_ok = |s: &str| {
        let mut cs = s.chars();
        match (cs.next(), s.chars().last()) {
            (Some(f), Some(l)) => alnum(f) && alnum(l) && s.chars().all(inner),
            _ => false,
        }
    };
    if !rest.iter().all(|s| segment_ok(s)) {
        return false;
    }
    let Some(end) = last.chars().last() else {
        return false;
    };
    let body = &last[..last.len() - end.len_utf8()];
    (alnum(end) || end == '*') && body.chars().all(inner) && body.chars().next().is_none_or(alnum)
}

/// The sysctls a pod may set: exact names and prefixes (a pattern ending in `*`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Allowlist {
    sysctls: Vec<(String, Namespace)>,
    prefixes: Vec<(String, Namespace)>,
}

impl Allowlist {
    /// The safe set for `kernel` (major, minor) plus `unsafe_patterns`
    /// (`--allowed-unsafe-sysctls`), as the kubelet's NewAllowlist builds it.
    pub fn new(kernel: Option<(u32, u32)>, unsafe_patterns: &[String]) -> Self {
        let safe = SAFE_SYSCTLS
            .iter()
            .filter(|(_, min)| *min == (0, 0) || kernel.is_some_and(|k| k >= *min))
            .map(|(n, _)| n.to_string());
        let mut w = Allowlist::default();
        for p in safe.chain(unsafe_patterns.iter().cloned()) {
            // Invalid patterns are refused when the config is read (`check_patterns`).
            let _ = w.add(&p);
        }
        w
    }

    fn add(&mut self, pattern: &str) -> Result<(), PatternError> {
        if !valid_pattern(pattern) {
            return Err(PatternError::Invalid(pattern.to_string()));
        }
        let mut name = normalize(pattern);
        let prefixed = match name.find('*') {
            Some(i) => {
                name.truncate(i);
                true
            }
            None => false,
        };
        let ns = namespace_of(&name).ok_or_else(|| PatternError::NotNamespaced(name.clone()))?;
        if prefixed {
            self.prefixes.push((name, ns));
        } else {
            self.sysctls.push((name, ns));
        }
        Ok(())
    }

    /// validateSysctl: why `sysctl` is not allowed for a pod with these host namespaces.
    fn check(&self, sysctl: &str, host_net: bool, host_ipc: bool) -> Result<(), String> {
        let sysctl = normalize(sysctl);
        let found = self
            .sysctls
            .iter()
            .find(|(n, _)| *n == sysctl)
            .or_else(|| self.prefixes.iter().find(|(p, _)| sysctl.starts_with(p)))
            .map(|(_, ns)| *ns);
        match found {
            None => Err(format!("{sysctl:?} not allowlisted")),
            Some(ns @ Namespace::Ipc) if host_ipc => Err(format!(
                "{sysctl:?} not allowed with host {} enabled",
                ns.as_str()
            )),
            Some(ns @ Namespace::Net) if host_net => Err(format!(
                "{sysctl:?} not allowed with host {} enabled",
                ns.as_str()
            )),
            Some(_) => Ok(()),
        }
    }

    /// The Admit handler: `Some(message)` when the pod is refused (reason
    /// [`FORBIDDEN_REASON`]), for the first offending sysctl in the spec's order.
    pub fn rejection(&self, pod: &Pod) -> Option<String> {
        let sysctls = pod
            .spec
            .extra
            .get("securityContext")
            .and_then(|sc| sc.get("sysctls"))
            .and_then(Value::as_array)?;
        sysctls.iter().find_map(|s| {
            let name = s.get("name").and_then(Value::as_str).unwrap_or_default();
            self.check(name, pod.spec.host_network, pod.spec.host_ipc)
                .err()
                .map(|e| format!("forbidden sysctl: {e}"))
        })
    }
}

/// Admission for this host: `Some(message)` when `pod` is refused (reason
/// [`FORBIDDEN_REASON`]). The allowlist is built only for a pod that sets sysctls.
pub fn rejection(pod: &Pod, unsafe_patterns: &[String]) -> Option<String> {
    let sets_sysctls = pod
        .spec
        .extra
        .get("securityContext")
        .and_then(|sc| sc.get("sysctls"))
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty());
    if !sets_sysctls {
        return None;
    }
    Allowlist::new(kernel_version(), unsafe_patterns).rejection(pod)
}

/// `--allowed-unsafe-sysctls` entries the kubelet refuses at start-up, the first one's error.
pub fn check_patterns(patterns: &[String]) -> Result<(), PatternError> {
    let mut w = Allowlist::default();
    patterns.iter().try_for_each(|p| w.add(p))
}

/// This host's kernel (major, minor) from uname's release, e.g. `6.1.0-18-amd64`.
pub fn kernel_version() -> Option<(u32, u32)> {
    let uts = nix::sys::utsname::uname().ok()?;
    parse_release(&uts.release().to_string_lossy())
}

fn parse_release(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.split(['.', '-']);
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "default", "uid": "u1"},
            "spec": spec,
        }))
        .expect("pod")
    }

    /// e2e "[sig-node] Sysctls [LinuxOnly] [NodeConformance] should not launch unsafe, but not
    /// explicitly enabled sysctls on the node": kernel.msgmax is not safe; sysctl/allowlist.go
    /// Admit refuses the pod with SysctlForbidden and "forbidden sysctl: %v" of validateSysctl's
    /// "%q not allowlisted". The safe set passes; `--allowed-unsafe-sysctls` admits the rest.
    #[test]
    fn an_unsafe_sysctl_is_forbidden_unless_allowed() {
        let p = pod(
            serde_json::json!({"containers": [{"name": "c", "image": "i"}],
            "securityContext": {"sysctls": [
                {"name": "kernel.shm_rmid_forced", "value": "1"},
                {"name": "kernel.msgmax", "value": "10000000000"}]}}),
        );
        let w = Allowlist::new(Some((6, 1)), &[]);
        assert_eq!(
            w.rejection(&p).as_deref(),
            Some("forbidden sysctl: \"kernel.msgmax\" not allowlisted")
        );
        assert_eq!(FORBIDDEN_REASON, "SysctlForbidden");
        let allowed = Allowlist::new(Some((6, 1)), &["kernel.msg*".to_string()]);
        assert_eq!(allowed.rejection(&p), None);
        let exact = Allowlist::new(Some((6, 1)), &["kernel.msgmax".to_string()]);
        assert_eq!(exact.rejection(&p), None);
        // No sysctls: admitted.
        let none = pod(serde_json::json!({"containers": [{"name": "c", "image": "i"}]}));
        assert_eq!(w.rejection(&none), None);
    }

    /// validateSysctl: a Net sysctl with hostNetwork, an IPC one with hostIPC, is refused
    /// even when allowed ("%q not allowed with host %s enabled"); slashes are normalised.
    #[test]
    fn host_namespaces_refuse_their_sysctls_and_names_are_normalised() {
        let p = pod(serde_json::json!({"hostNetwork": true,
            "containers": [{"name": "c", "image": "i"}],
            "securityContext": {"sysctls": [{"name": "net/ipv4/ip_local_port_range", "value": "1024 65000"}]}}));
        let w = Allowlist::new(Some((6, 1)), &[]);
        assert_eq!(
            w.rejection(&p).as_deref(),
            Some(
                "forbidden sysctl: \"net.ipv4.ip_local_port_range\" not allowed with host Net enabled"
            )
        );
        let ipc = pod(serde_json::json!({"hostIPC": true,
            "containers": [{"name": "c", "image": "i"}],
            "securityContext": {"sysctls": [{"name": "kernel.shm_rmid_forced", "value": "1"}]}}));
        assert_eq!(
            w.rejection(&ipc).as_deref(),
            Some("forbidden sysctl: \"kernel.shm_rmid_forced\" not allowed with host IPC enabled")
        );
        assert_eq!(
            normalize("net/ipv4/conf/eno2.100/rp_filter"),
            "net.ipv4.conf.eno2/100.rp_filter"
        );
    }

    /// safe_sysctls.go: sysctls namespaced only from a kernel version are dropped before it.
    #[test]
    fn the_safe_set_follows_the_kernel_version() {
        let p = pod(
            serde_json::json!({"containers": [{"name": "c", "image": "i"}],
            "securityContext": {"sysctls": [{"name": "net.ipv4.tcp_rmem", "value": "4096 87380 6291456"}]}}),
        );
        assert_eq!(Allowlist::new(Some((6, 1)), &[]).rejection(&p), None);
        assert!(Allowlist::new(Some((4, 14)), &[]).rejection(&p).is_some());
        assert!(Allowlist::new(None, &[]).rejection(&p).is_some());
        assert_eq!(parse_release("6.1.0-18-amd64"), Some((6, 1)));
        assert_eq!(parse_release("4.15.0"), Some((4, 15)));
    }

    /// NewAllowlist refuses an invalid pattern and a sysctl not known to be namespaced.
    #[test]
    fn bad_unsafe_patterns_are_refused() {
        assert!(
            check_patterns(&[
                "kernel.msg*".into(),
                "net.*".into(),
                "net.core.somaxconn".into()
            ])
            .is_ok()
        );
        assert_eq!(
            check_patterns(&["kernel.printk".into()]),
            Err(PatternError::NotNamespaced("kernel.printk".into()))
        );
        assert_eq!(
            check_patterns(&["Net.Core".into()]),
            Err(PatternError::Invalid("Net.Core".into()))
        );
        assert!(check_patterns(&["net.*.x".into()]).is_err());
        assert!(check_patterns(&["net..x".into()]).is_err());
    }
}
