//! Service environment variables, pure: the kubelet's `pkg/kubelet/envvars` (`FromServices`)
//! and the projection of kubelet_pods.go `getServiceEnvVarMap`.
//!
//! Services are read as JSON (`metadata.namespace`, `metadata.name`, `spec.clusterIP`,
//! `spec.ports[].{name,port,protocol}`), as `apiobjects::services` keeps them.

use std::collections::BTreeMap;

use serde_json::Value;

/// The namespace of the master services (`metav1.NamespaceDefault`).
pub const MASTER_NAMESPACE: &str = "default";

/// The master services (kubelet_pods.go `masterServices`): their variables are given to every
/// pod, even with `enableServiceLinks: false`.
pub const MASTER_SERVICES: [&str; 1] = ["kubernetes"];

fn str_of<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    let mut at = v;
    for k in path {
        at = &at[*k];
    }
    at.as_str().unwrap_or_default()
}

/// `v1helper.IsServiceIPSet`: the ClusterIP is neither empty nor `None` (headless).
pub fn is_service_ip_set(svc: &Value) -> bool {
    let ip = str_of(svc, &["spec", "clusterIP"]);
    !ip.is_empty() && ip != "None"
}

/// `makeEnvVariableName`: upper case, `-` becomes `_`.
pub fn env_variable_name(s: &str) -> String {
    s.replace('-', "_").to_uppercase()
}

/// `net.JoinHostPort`: an IPv6 address (any `:`) is bracketed.
fn join_host_port(host: &str, port: i64) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

fn ports(svc: &Value) -> &[Value] {
    svc["spec"]["ports"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
}

/// `makeLinkVariables`: the Docker-link variables (`<NAME>_PORT` for the first port, then per
/// port `<NAME>_PORT_<port>_<PROTO>` and its `_PROTO`, `_PORT`, `_ADDR`).
fn link_variables(svc: &Value, out: &mut Vec<(String, String)>) {
    let prefix = env_variable_name(str_of(svc, &["metadata", "name"]));
    let ip = str_of(svc, &["spec", "clusterIP"]);
    for (i, sp) in ports(svc).iter().enumerate() {
        let protocol = match sp["protocol"].as_str().unwrap_or_default() {
            "" => "TCP",
            p => p,
        };
        let port = sp["port"].as_i64().unwrap_or_default();
        let url = format!("{}://{}", protocol.to_lowercase(), join_host_port(ip, port));
        if i == 0 {
            out.push((format!("{prefix}_PORT"), url.clone()));
        }
        let pp = format!("{prefix}_PORT_{port}_{}", protocol.to_uppercase());
        out.push((pp.clone(), url));
        out.push((format!("{pp}_PROTO"), protocol.to_lowercase()));
        out.push((format!("{pp}_PORT"), port.to_string()));
        out.push((format!("{pp}_ADDR"), ip.to_string()));
    }
}

/// `FromServices`: per Service with a ClusterIP, `<NAME>_SERVICE_HOST`, `<NAME>_SERVICE_PORT`
/// (the first port), `<NAME>_SERVICE_PORT_<PORTNAME>` for each named port, and the link
/// variables. (A ClusterIP Service without ports cannot pass the API server's validation; one
/// here gets the host variable only.)
pub fn from_services(services: &[&Value]) -> Vec<(String, String)> {
    let mut out = vec![];
    for svc in services {
        if !is_service_ip_set(svc) {
            continue;
        }
        let name = env_variable_name(str_of(svc, &["metadata", "name"]));
        out.push((
            format!("{name}_SERVICE_HOST"),
            str_of(svc, &["spec", "clusterIP"]).to_string(),
        ));
        let ports = ports(svc);
        if let Some(first) = ports.first() {
            let port_var = format!("{name}_SERVICE_PORT");
            out.push((
                port_var.clone(),
                first["port"].as_i64().unwrap_or_default().to_string(),
            ));
            for sp in ports {
                let pn = sp["name"].as_str().unwrap_or_default();
                if !pn.is_empty() {
                    out.push((
                        format!("{port_var}_{}", env_variable_name(pn)),
                        sp["port"].as_i64().unwrap_or_default().to_string(),
                    ));
                }
            }
        }
        link_variables(svc, &mut out);
    }
    out
}

/// `getServiceEnvVarMap`: the variables of the Services with a ClusterIP that a pod of
/// namespace `ns` sees: the master services of `default` always, the Services of `ns` when
/// `enable_service_links` (one of `ns` named like a master service replaces it).
pub fn service_env_map(
    services: &[Value],
    ns: &str,
    enable_service_links: bool,
) -> BTreeMap<String, String> {
    let mut by_name: BTreeMap<&str, &Value> = BTreeMap::new();
    for svc in services {
        if !is_service_ip_set(svc) {
            continue;
        }
        let name = str_of(svc, &["metadata", "name"]);
        let svc_ns = str_of(svc, &["metadata", "namespace"]);
        if svc_ns == MASTER_NAMESPACE && MASTER_SERVICES.contains(&name) {
            by_name.entry(name).or_insert(svc);
        } else if svc_ns == ns && enable_service_links {
            by_name.insert(name, svc);
        }
    }
    let mapped: Vec<&Value> = by_name.into_values().collect();
    from_services(&mapped).into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn svc(ns: &str, name: &str, ip: &str, ports: Value) -> Value {
        json!({"metadata": {"namespace": ns, "name": name},
               "spec": {"clusterIP": ip, "ports": ports}})
    }

    /// pkg/kubelet/envvars FromServices: host, first port, named ports, Docker-link variables;
    /// `net.JoinHostPort` brackets an IPv6 ClusterIP in the URLs, `_ADDR` keeps it bare.
    #[test]
    fn from_services_names_the_variables_as_the_kubelet() {
        let s = svc(
            "prod",
            "my-svc",
            "fd00::10",
            json!([{"name": "http-web", "port": 80, "protocol": "TCP"},
                   {"name": "dns", "port": 53, "protocol": "UDP"}]),
        );
        let m: BTreeMap<String, String> = from_services(&[&s]).into_iter().collect();
        let want = [
            ("MY_SVC_SERVICE_HOST", "fd00::10"),
            ("MY_SVC_SERVICE_PORT", "80"),
            ("MY_SVC_SERVICE_PORT_HTTP_WEB", "80"),
            ("MY_SVC_SERVICE_PORT_DNS", "53"),
            ("MY_SVC_PORT", "tcp://[fd00::10]:80"),
            ("MY_SVC_PORT_80_TCP", "tcp://[fd00::10]:80"),
            ("MY_SVC_PORT_80_TCP_PROTO", "tcp"),
            ("MY_SVC_PORT_80_TCP_PORT", "80"),
            ("MY_SVC_PORT_80_TCP_ADDR", "fd00::10"),
            ("MY_SVC_PORT_53_UDP", "udp://[fd00::10]:53"),
            ("MY_SVC_PORT_53_UDP_PROTO", "udp"),
            ("MY_SVC_PORT_53_UDP_PORT", "53"),
            ("MY_SVC_PORT_53_UDP_ADDR", "fd00::10"),
        ];
        let want: BTreeMap<String, String> = want
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(m, want);
        // An unnamed first port and no protocol: TCP, no _SERVICE_PORT_<NAME>.
        let plain = svc("d", "kubernetes", "10.96.0.1", json!([{"port": 443}]));
        let v = from_services(&[&plain]);
        assert!(v.contains(&("KUBERNETES_PORT".into(), "tcp://10.96.0.1:443".into())));
        assert!(v.contains(&("KUBERNETES_SERVICE_PORT".into(), "443".into())));
        assert_eq!(v.len(), 7, "{v:?}");
    }

    /// kubelet_pods.go getServiceEnvVarMap: headless (`None`) and IP-less Services are skipped;
    /// `default/kubernetes` always; the pod's namespace only with enableServiceLinks; other
    /// namespaces never; a Service of the pod's namespace named `kubernetes` wins.
    #[test]
    fn the_service_map_projects_the_namespace_onto_the_master_services() {
        let all = vec![
            svc(
                "default",
                "kubernetes",
                "10.96.0.1",
                json!([{"name": "https", "port": 443}]),
            ),
            svc("prod", "web", "10.96.0.20", json!([{"port": 8080}])),
            svc("prod", "headless", "None", json!([{"port": 80}])),
            svc("prod", "pending", "", json!([{"port": 80}])),
            svc("other", "db", "10.96.0.30", json!([{"port": 5432}])),
            svc("default", "web2", "10.96.0.40", json!([{"port": 81}])),
        ];
        let m = service_env_map(&all, "prod", true);
        assert_eq!(m["KUBERNETES_SERVICE_HOST"], "10.96.0.1");
        assert_eq!(m["KUBERNETES_SERVICE_PORT_HTTPS"], "443");
        assert_eq!(m["WEB_SERVICE_HOST"], "10.96.0.20");
        assert!(
            !m.keys()
                .any(|k| k.starts_with("HEADLESS_") || k.starts_with("PENDING_"))
        );
        assert!(
            !m.keys()
                .any(|k| k.starts_with("DB_") || k.starts_with("WEB2_"))
        );
        let off = service_env_map(&all, "prod", false);
        assert_eq!(off["KUBERNETES_SERVICE_PORT"], "443");
        assert!(!off.keys().any(|k| k.starts_with("WEB_")), "{off:?}");
        // Pods of `default` see default's Services with links on.
        assert_eq!(
            service_env_map(&all, "default", true)["WEB2_SERVICE_PORT"],
            "81"
        );
        let mut shadow = all.clone();
        shadow.push(svc("prod", "kubernetes", "10.96.9.9", json!([{"port": 1}])));
        assert_eq!(
            service_env_map(&shadow, "prod", true)["KUBERNETES_SERVICE_HOST"],
            "10.96.9.9"
        );
        assert_eq!(
            service_env_map(&shadow, "prod", false)["KUBERNETES_SERVICE_HOST"],
            "10.96.0.1"
        );
    }
}
