//! Pod DNS as the kubelet builds it (pkg/kubelet/network/dns `GetPodDNS`): `ClusterFirst`
//! (the default; for a hostNetwork pod it is `Default`) and `ClusterFirstWithHostNet` use the
//! cluster DNS (`--cluster-dns`, [`ClusterDns`]): its servers only, the cluster search domains
//! before the node's, `ndots:5`. Without cluster DNS (every standalone box) they fall back to
//! `Default`, the node's resolv.conf (`--resolv-conf`), as the kubelet does (nanolet emits no
//! `MissingClusterDNS` event: that is the normal case here). `None` uses only `dnsConfig`.
//! `dnsConfig` is merged in: nameservers and searches appended (deduplicated), options merged
//! by name.
//!
//! The node's resolv.conf is [`HostResolvConf`]: read at every sandbox creation (the kubelet's
//! `getHostDNSConfig`), with kubeadm's systemd-resolved rule applied to its content.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::Value;
use tracing::info;

use super::Pod;

/// A sandbox's DNS settings (CRI `DNSConfig`): what [`pod_dns`] builds and the runtime passes on.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DnsConfig {
    pub servers: Vec<String>,
    pub searches: Vec<String>,
    pub options: Vec<String>,
}

/// Parse the text of a resolv.conf.
pub fn parse_resolv_conf(text: &str) -> DnsConfig {
    let mut d = DnsConfig::default();
    for line in text.lines() {
        let line = line.split(['#', ';']).next().unwrap_or("").trim();
        let mut f = line.split_whitespace();
        match f.next() {
            Some("nameserver") => d.servers.extend(f.next().map(str::to_string)),
            Some("search") => d.searches = f.map(str::to_string).collect(),
            Some("options") => d.options.extend(f.map(str::to_string)),
            _ => {}
        }
    }
    d
}

/// systemd-resolved's stub listener: it answers only on the host's loopback, not inside a pod's
/// network namespace.
pub const SYSTEMD_RESOLVED_STUB: &str = "127.0.0.53";

/// The file systemd-resolved keeps with the real upstream nameservers (the one kubeadm writes
/// into the kubelet's `resolvConf` when systemd-resolved is active).
pub const SYSTEMD_RESOLVED_UPSTREAM: &str = "/run/systemd/resolve/resolv.conf";

#[derive(Debug, thiserror::Error)]
pub enum DnsError {
    #[error("reading the node's resolv.conf {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// True when every nameserver of `d` is systemd-resolved's stub (and there is at least one).
pub fn only_systemd_resolved_stub(d: &DnsConfig) -> bool {
    !d.servers.is_empty() && d.servers.iter().all(|s| s == SYSTEMD_RESOLVED_STUB)
}

/// The node's resolv.conf as pods see it (`--resolv-conf` / `resolvConf`).
#[derive(Debug)]
pub struct HostResolvConf {
    /// `None`: `--resolv-conf=""`, no host DNS (the kubelet's rule).
    path: Option<PathBuf>,
    /// Used instead of `path` when `path` names only the systemd-resolved stub; the product
    /// uses [`SYSTEMD_RESOLVED_UPSTREAM`], tests a file of their own.
    upstream: PathBuf,
    /// The switch to `upstream` is logged once.
    announced: AtomicBool,
}

impl HostResolvConf {
    pub fn new(path: Option<PathBuf>, upstream: PathBuf) -> HostResolvConf {
        HostResolvConf {
            path,
            upstream,
            announced: AtomicBool::new(false),
        }
    }

    /// The file's nameservers, searches and options, read now. An unreadable `--resolv-conf`
    /// is an error (the kubelet fails the sandbox); a missing or unreadable systemd-resolved
    /// file leaves the stub's content as it is.
    pub fn read(&self) -> Result<DnsConfig, DnsError> {
        let Some(path) = &self.path else {
            return Ok(DnsConfig::default());
        };
        let given = read_file(path)?;
        if !only_systemd_resolved_stub(&given) {
            return Ok(given);
        }
        match read_file(&self.upstream) {
            Ok(upstream) => {
                if !self.announced.swap(true, Ordering::Relaxed) {
                    info!(
                        resolv_conf = %path.display(),
                        using = %self.upstream.display(),
                        "the node's resolv.conf names only systemd-resolved's stub {SYSTEMD_RESOLVED_STUB}, which does not answer inside a pod's network namespace: pods get the upstream nameservers of systemd-resolved instead (as kubeadm configures the kubelet)"
                    );
                }
                Ok(upstream)
            }
            Err(e) => {
                if !self.announced.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        resolv_conf = %path.display(),
                        error = %e,
                        "the node's resolv.conf names only systemd-resolved's stub {SYSTEMD_RESOLVED_STUB} and systemd-resolved's own file is unreadable: pods get the stub, which does not answer inside a pod's network namespace; pass --resolv-conf"
                    );
                }
                Ok(given)
            }
        }
    }
}

fn read_file(path: &Path) -> Result<DnsConfig, DnsError> {
    std::fs::read_to_string(path)
        .map(|t| parse_resolv_conf(&t))
        .map_err(|source| DnsError::Read {
            path: path.display().to_string(),
            source,
        })
}

fn push_unique(v: &mut Vec<String>, s: String) {
    if !v.contains(&s) {
        v.push(s);
    }
}

/// The cluster's DNS (`--cluster-dns`, `--cluster-domain`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClusterDns {
    /// The nameservers of cluster-DNS pods; empty: no cluster DNS.
    pub servers: Vec<String>,
    /// e.g. `cluster.local`; empty: none.
    pub domain: String,
}

/// dns.go `defaultDNSOptions`.
pub const DEFAULT_DNS_OPTIONS: [&str; 1] = ["ndots:5"];

/// dns.go `getPodDNSType`: whether the pod uses the cluster DNS (`Some(true)`), the node's
/// (`Some(false)`) or none (`None`, policy `None`). An unknown policy is cluster DNS (the
/// kubelet's fallback).
fn uses_cluster_dns(pod: &Pod) -> Option<bool> {
    match pod.spec.dns_policy.as_str() {
        "None" => None,
        "ClusterFirstWithHostNet" => Some(true),
        "ClusterFirst" | "" => Some(!pod.spec.host_network),
        "Default" => Some(false),
        _ => Some(true),
    }
}

/// dns.go `generateSearchesForDNSClusterFirst`: `<ns>.svc.<domain>`, `svc.<domain>`,
/// `<domain>`, then the node's searches, without duplicates; the node's alone without a domain.
pub fn cluster_searches(ns: &str, domain: &str, host: &[String]) -> Vec<String> {
    if domain.is_empty() {
        return host.to_vec();
    }
    let mut out = vec![];
    let all = [
        format!("{ns}.svc.{domain}"),
        format!("svc.{domain}"),
        domain.to_string(),
    ];
    for s in all.into_iter().chain(host.iter().cloned()) {
        push_unique(&mut out, s);
    }
    out
}

/// The DNS config to send with the sandbox, from the node's (`host`, see [`HostResolvConf`])
/// and the cluster's. An empty config makes containerd copy its own host's /etc/resolv.conf
/// (containerd's rule, for the kubelet too).
pub fn pod_dns(pod: &Pod, host: &DnsConfig, cluster: &ClusterDns) -> DnsConfig {
    let cfg = pod.spec.extra.get("dnsConfig").filter(|v| !v.is_null());
    let mut d = match uses_cluster_dns(pod) {
        None => DnsConfig::default(),
        Some(true) if !cluster.servers.is_empty() => DnsConfig {
            servers: cluster.servers.clone(),
            searches: cluster_searches(&pod.metadata.namespace, &cluster.domain, &host.searches),
            options: DEFAULT_DNS_OPTIONS.iter().map(|o| o.to_string()).collect(),
        },
        // No cluster DNS: the kubelet falls back to Default.
        Some(_) => host.clone(),
    };
    if let Some(c) = cfg {
        let strs = |k: &str| -> Vec<String> {
            c.get(k)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        };
        for s in strs("nameservers") {
            push_unique(&mut d.servers, s);
        }
        for s in strs("searches") {
            push_unique(&mut d.searches, s);
        }
        for o in c
            .get("options")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let Some(name) = o.get("name").and_then(Value::as_str) else {
                continue;
            };
            let opt = match o.get("value").and_then(Value::as_str) {
                Some(v) => format!("{name}:{v}"),
                None => name.to_string(),
            };
            d.options.retain(|x| x.split(':').next() != Some(name));
            d.options.push(opt);
        }
    }
    d
}

/// kubelet_pods.go `GeneratePodHostNameAndDomain`: the hostname (spec.hostnameOverride, which
/// comes with no domain (HostnameOverride, beta and on since v1.35); else spec.hostname, else
/// the pod name; `truncatePodHostnameIfNeeded`: at most 63 characters, no trailing `-` or
/// `.`) and, with spec.subdomain, the domain `<subdomain>.<namespace>.svc.<clusterDomain>`.
pub fn pod_hostname_and_domain(pod: &Pod, cluster_domain: &str) -> (String, String) {
    let over = pod
        .spec
        .extra
        .get("hostnameOverride")
        .and_then(Value::as_str);
    let name = match over {
        Some(o) => o,
        None if pod.spec.hostname.is_empty() => &pod.metadata.name,
        None => &pod.spec.hostname,
    };
    let hostname = if name.len() > 63 {
        name.chars()
            .take(63)
            .collect::<String>()
            .trim_end_matches(['-', '.'])
            .to_string()
    } else {
        name.to_string()
    };
    if over.is_some() {
        return (hostname, String::new());
    }
    let sub = pod
        .spec
        .extra
        .get("subdomain")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let domain = if sub.is_empty() {
        String::new()
    } else {
        format!("{sub}.{}.svc.{cluster_domain}", pod.metadata.namespace)
    };
    (hostname, domain)
}

/// The kubelet-managed /etc/hosts of a pod (not hostNetwork; `managedHostsFileContent`):
/// localhost entries, the pod's own IP with its FQDN (`<hostname>.<domain>`, when the pod has a
/// subdomain) and hostname, then `hostAliases`.
pub fn managed_hosts(pod: &Pod, pod_ip: &str, hostname: &str, domain: &str) -> String {
    let mut s = String::from(
        "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n",
    );
    if !pod_ip.is_empty() && !domain.is_empty() {
        s.push_str(&format!("{pod_ip}\t{hostname}.{domain}\t{hostname}\n"));
    } else if !pod_ip.is_empty() {
        s.push_str(&format!("{pod_ip}\t{hostname}\n"));
    }
    s.push_str(&host_aliases(pod));
    s
}

/// The `hostAliases` block ("" when there are none).
pub fn host_aliases(pod: &Pod) -> String {
    let Some(list) = pod.spec.extra.get("hostAliases").and_then(Value::as_array) else {
        return String::new();
    };
    let mut s = String::from("\n# Entries added by HostAliases.\n");
    for a in list {
        let ip = a.get("ip").and_then(Value::as_str).unwrap_or_default();
        let names: Vec<&str> = a
            .get("hostnames")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        if !ip.is_empty() && !names.is_empty() {
            s.push_str(&format!("{ip}\t{}\n", names.join("\t")));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const HOST: &str = "# comment\nnameserver 192.0.2.53\nnameserver 192.0.2.54\nsearch example.com lan\noptions ndots:1 edns0\n";

    #[test]
    fn default_policies_use_the_node_resolv_conf() {
        // kubelet dns.go GetPodDNS: ClusterFirst without clusterDNS falls back to podDNSHost,
        // the resolvConf file's content (not whatever /etc/resolv.conf the runtime copies).
        for policy in ["ClusterFirst", "Default", "ClusterFirstWithHostNet"] {
            let mut p = Pod::default();
            p.spec.dns_policy = policy.into();
            let d = pod_dns(&p, &parse_resolv_conf(HOST), &ClusterDns::default());
            assert_eq!(d.servers, vec!["192.0.2.53", "192.0.2.54"], "{policy}");
            assert_eq!(d.searches, vec!["example.com", "lan"], "{policy}");
        }
    }

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).expect("write");
        p
    }

    const STUB: &str = "# This is /run/systemd/resolve/stub-resolv.conf\nnameserver 127.0.0.53\noptions edns0 trust-ad\nsearch lan\n";

    #[test]
    fn a_stub_only_resolv_conf_is_replaced_by_systemd_resolveds_upstream_file() {
        // kubeadm (phases/kubelet, resolv-conf detection): with systemd-resolved the kubelet's
        // resolvConf is /run/systemd/resolve/resolv.conf, 127.0.0.53 not being reachable from
        // a pod's network namespace.
        let dir = tempfile::tempdir().expect("tempdir");
        let stub = write(dir.path(), "stub", STUB);
        let up = write(
            dir.path(),
            "up",
            "nameserver 192.0.2.1\nnameserver 2001:db8::1\n",
        );
        let h = HostResolvConf::new(Some(stub), up);
        let d = h.read().expect("read");
        assert_eq!(d.servers, vec!["192.0.2.1", "2001:db8::1"]);
        // Read again at every sandbox: systemd-resolved rewrites its file on network changes.
        assert_eq!(h.read().expect("read"), d);
    }

    #[test]
    fn a_resolv_conf_with_another_nameserver_is_used_as_it_is() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mixed = write(
            dir.path(),
            "mixed",
            "nameserver 127.0.0.53\nnameserver 192.0.2.9\n",
        );
        let up = write(dir.path(), "up", "nameserver 192.0.2.1\n");
        let d = HostResolvConf::new(Some(mixed), up).read().expect("read");
        assert_eq!(d.servers, vec!["127.0.0.53", "192.0.2.9"]);
        assert!(!only_systemd_resolved_stub(&parse_resolv_conf(
            "search lan\n"
        )));
    }

    #[test]
    fn the_stub_stays_when_systemd_resolveds_file_is_missing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let stub = write(dir.path(), "stub", STUB);
        let h = HostResolvConf::new(Some(stub), dir.path().join("absent"));
        assert_eq!(h.read().expect("read").servers, vec!["127.0.0.53"]);
    }

    #[test]
    fn empty_resolv_conf_flag_means_no_host_dns_and_a_missing_file_is_an_error() {
        // kubelet: --resolv-conf="" gives pods no host DNS; an unreadable file fails the
        // sandbox (getHostDNSConfig returns the open error).
        let dir = tempfile::tempdir().expect("tempdir");
        let none = HostResolvConf::new(None, write(dir.path(), "up", "nameserver 192.0.2.1\n"));
        assert_eq!(none.read().expect("read"), DnsConfig::default());
        let missing = HostResolvConf::new(Some(dir.path().join("nope")), dir.path().join("up"));
        let e = missing.read().expect_err("missing file").to_string();
        assert!(e.starts_with("reading the node's resolv.conf "), "{e}");
    }

    #[test]
    fn dns_config_merges_into_the_node_settings() {
        let mut p = Pod::default();
        p.spec.dns_policy = "ClusterFirst".into();
        p.spec.extra.insert(
            "dnsConfig".into(),
            json!({"nameservers": ["192.0.2.99"], "searches": ["lan", "svc.local"], "options": [{"name": "ndots", "value": "5"}, {"name": "rotate"}]}),
        );
        let d = pod_dns(&p, &parse_resolv_conf(HOST), &ClusterDns::default());
        assert_eq!(d.servers, vec!["192.0.2.53", "192.0.2.54", "192.0.2.99"]);
        assert_eq!(d.searches, vec!["example.com", "lan", "svc.local"]);
        assert_eq!(d.options, vec!["edns0", "ndots:5", "rotate"]);
    }

    #[test]
    fn policy_none_uses_only_dns_config() {
        let mut p = Pod::default();
        p.spec.dns_policy = "None".into();
        p.spec
            .extra
            .insert("dnsConfig".into(), json!({"nameservers": ["1.1.1.1"]}));
        let d = pod_dns(&p, &parse_resolv_conf(HOST), &ClusterDns::default());
        assert_eq!(d.servers, vec!["1.1.1.1"]);
        assert!(d.searches.is_empty() && d.options.is_empty());
    }

    #[test]
    fn hosts_file_has_pod_entry_and_aliases() {
        let mut p = Pod::default();
        p.spec.extra.insert(
            "hostAliases".into(),
            json!([{"ip": "192.0.2.7", "hostnames": ["foo.local", "bar.local"]}]),
        );
        let h = managed_hosts(&p, "10.1.0.4", "web-node1", "");
        assert!(h.starts_with("# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n"));
        assert!(h.contains("10.1.0.4\tweb-node1\n"));
        assert!(h.ends_with("# Entries added by HostAliases.\n192.0.2.7\tfoo.local\tbar.local\n"));
    }

    fn cluster() -> ClusterDns {
        ClusterDns {
            servers: vec!["10.96.0.10".into()],
            domain: "cluster.local".into(),
        }
    }

    /// dns.go GetPodDNS / getPodDNSType / generateSearchesForDNSClusterFirst: ClusterFirst
    /// (not hostNetwork) and ClusterFirstWithHostNet get the cluster DNS servers only, the
    /// cluster searches before the node's (duplicates omitted), defaultDNSOptions (ndots:5);
    /// dnsConfig merges on top.
    #[test]
    fn cluster_first_uses_the_cluster_dns() {
        let host = parse_resolv_conf(
            "nameserver 192.0.2.53\nsearch lan svc.cluster.local\noptions edns0\n",
        );
        let mut p = Pod::default();
        p.metadata.namespace = "prod".into();
        p.spec.dns_policy = "ClusterFirst".into();
        let d = pod_dns(&p, &host, &cluster());
        assert_eq!(d.servers, ["10.96.0.10"]);
        assert_eq!(
            d.searches,
            [
                "prod.svc.cluster.local",
                "svc.cluster.local",
                "cluster.local",
                "lan"
            ]
        );
        assert_eq!(d.options, ["ndots:5"]);
        // hostNetwork: ClusterFirst falls through to Default; ClusterFirstWithHostNet does not.
        p.spec.host_network = true;
        assert_eq!(pod_dns(&p, &host, &cluster()), host);
        p.spec.dns_policy = "ClusterFirstWithHostNet".into();
        assert_eq!(pod_dns(&p, &host, &cluster()).servers, ["10.96.0.10"]);
        // dnsConfig merged after: appended, options replaced by name.
        p.spec.extra.insert(
            "dnsConfig".into(),
            json!({"nameservers": ["192.0.2.99"], "searches": ["x.example"], "options": [{"name": "ndots", "value": "2"}]}),
        );
        let d = pod_dns(&p, &host, &cluster());
        assert_eq!(d.servers, ["10.96.0.10", "192.0.2.99"]);
        assert_eq!(d.searches.last().map(String::as_str), Some("x.example"));
        assert_eq!(d.options, ["ndots:2"]);
        // No cluster domain: the node's searches alone.
        let no_domain = ClusterDns {
            domain: String::new(),
            ..cluster()
        };
        assert_eq!(
            pod_dns(&p, &host, &no_domain).searches,
            ["lan", "svc.cluster.local", "x.example"]
        );
        // Default never uses the cluster DNS.
        p.spec.dns_policy = "Default".into();
        p.spec.extra.clear();
        assert_eq!(pod_dns(&p, &host, &cluster()), host);
    }

    /// GeneratePodHostNameAndDomain (HostnameOverride, beta and on since v1.35): an override
    /// is the hostname, before spec.hostname, and comes without a domain even with a
    /// subdomain; /etc/hosts names the pod's IP with it alone.
    #[test]
    fn a_hostname_override_is_the_hostname_without_a_domain() {
        let mut p = Pod::default();
        p.metadata.name = "web".into();
        p.metadata.namespace = "prod".into();
        p.spec.hostname = "custom-host".into();
        p.spec
            .extra
            .insert("subdomain".into(), serde_json::json!("t"));
        assert_eq!(
            pod_hostname_and_domain(&p, "cluster.local"),
            (
                "custom-host".to_string(),
                "t.prod.svc.cluster.local".to_string()
            )
        );
        p.spec.extra.insert(
            "hostnameOverride".into(),
            serde_json::json!("override.example.host"),
        );
        let (h, d) = pod_hostname_and_domain(&p, "cluster.local");
        assert_eq!((h.as_str(), d.as_str()), ("override.example.host", ""));
        assert!(
            managed_hosts(&p, "10.0.0.5", &h, &d).contains("10.0.0.5\toverride.example.host\n")
        );
    }

    /// GeneratePodHostNameAndDomain and managedHostsFileContent: with a subdomain the pod's
    /// line is `<ip>\t<hostname>.<subdomain>.<ns>.svc.<clusterDomain>\t<hostname>`; names
    /// longer than 63 characters are truncated without a trailing `-`/`.`.
    #[test]
    fn a_subdomain_gives_the_pod_an_fqdn_in_etc_hosts() {
        let mut p = Pod::default();
        p.metadata.name = "web-0".into();
        p.metadata.namespace = "prod".into();
        assert_eq!(
            pod_hostname_and_domain(&p, "cluster.local"),
            ("web-0".into(), String::new())
        );
        p.spec.hostname = "db".into();
        p.spec.extra.insert("subdomain".into(), json!("backend"));
        let (h, d) = pod_hostname_and_domain(&p, "cluster.local");
        assert_eq!(
            (h.as_str(), d.as_str()),
            ("db", "backend.prod.svc.cluster.local")
        );
        let hosts = managed_hosts(&p, "10.1.0.4", &h, &d);
        assert!(
            hosts.contains("10.1.0.4\tdb.backend.prod.svc.cluster.local\tdb\n"),
            "{hosts}"
        );
        p.spec.hostname.clear();
        p.metadata.name = format!("{}-{}", "a".repeat(62), "b");
        assert_eq!(pod_hostname_and_domain(&p, "").0, "a".repeat(62));
    }
}
