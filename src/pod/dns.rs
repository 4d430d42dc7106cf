//! Pod DNS as the kubelet builds it (pkg/kubelet/network/dns): nanolet has no cluster DNS, so
//! `ClusterFirst` (the default) and `ClusterFirstWithHostNet` fall back to `Default` (the node's
//! resolv.conf), as the kubelet does when no clusterDNS is configured. `None` uses only
//! `dnsConfig`. `dnsConfig` is merged in: nameservers and searches appended (deduplicated),
//! options merged by name.

use serde_json::Value;

use super::Pod;
use crate::runtime::DnsConfig;

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

fn push_unique(v: &mut Vec<String>, s: String) {
    if !v.contains(&s) {
        v.push(s);
    }
}

/// The DNS config to send with the sandbox, or None to let the runtime copy the node's
/// resolv.conf (same result as `Default`).
pub fn pod_dns(pod: &Pod, host_resolv_conf: &str) -> Option<DnsConfig> {
    let cfg = pod.spec.extra.get("dnsConfig").filter(|v| !v.is_null());
    let policy = pod.spec.dns_policy.as_str();
    if cfg.is_none() && policy != "None" {
        return None;
    }
    let mut d = if policy == "None" {
        DnsConfig::default()
    } else {
        parse_resolv_conf(host_resolv_conf)
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
    Some(d)
}

/// The kubelet-managed /etc/hosts of a pod (not hostNetwork): localhost entries, the pod's own
/// IP and hostname, then `hostAliases`.
pub fn managed_hosts(pod: &Pod, pod_ip: &str, hostname: &str) -> String {
    let mut s = String::from(
        "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n",
    );
    if !pod_ip.is_empty() {
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
    fn default_policies_leave_the_node_resolv_conf_to_the_runtime() {
        let mut p = Pod::default();
        p.spec.dns_policy = "ClusterFirst".into();
        assert_eq!(pod_dns(&p, HOST), None);
    }

    #[test]
    fn dns_config_merges_into_the_node_settings() {
        let mut p = Pod::default();
        p.spec.dns_policy = "ClusterFirst".into();
        p.spec.extra.insert(
            "dnsConfig".into(),
            json!({"nameservers": ["192.0.2.99"], "searches": ["lan", "svc.local"], "options": [{"name": "ndots", "value": "5"}, {"name": "rotate"}]}),
        );
        let d = pod_dns(&p, HOST).expect("dns");
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
        let d = pod_dns(&p, HOST).expect("dns");
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
        let h = managed_hosts(&p, "10.1.0.4", "web-node1");
        assert!(h.starts_with("# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n"));
        assert!(h.contains("10.1.0.4\tweb-node1\n"));
        assert!(h.ends_with("# Entries added by HostAliases.\n192.0.2.7\tfoo.local\tbar.local\n"));
    }
}
