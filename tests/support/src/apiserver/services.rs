//! The double's Services (core v1, namespaced), with kube-apiserver's semantics where nanolet
//! or kubectl can see them:
//! - stored objects like the others: get, list (`/api/v1/services` across namespaces, or one
//!   namespace's), watch (resourceVersion, 410, bookmarks), create, update, patch, delete;
//! - on create the registry's defaults (pkg/apis/core/v1/defaults.go `SetDefaults_Service`,
//!   the service REST strategy): `type` ClusterIP, `sessionAffinity` None, each port's
//!   `protocol` TCP and `targetPort` = `port`, `internalTrafficPolicy` Cluster; a ClusterIP
//!   allocated from the service CIDR 10.96.0.0/12 when none is given (not for `None`, headless,
//!   nor ExternalName), `clusterIPs`, `ipFamilies`, `ipFamilyPolicy` SingleStack;
//!   `status.loadBalancer` {};
//! - validation: a ClusterIP/NodePort/LoadBalancer Service needs ports (`spec.ports: Required
//!   value`); a requested ClusterIP that is taken is refused with the allocator's text;
//! - `kubectl create service clusterip` (protobuf: k8s.io/api core/v1 generated.proto field
//!   numbers), and the apiserver printer's Table columns (NAME TYPE CLUSTER-IP EXTERNAL-IP
//!   PORT(S) AGE);
//! - the API server's own `default/kubernetes` Service is an explicit call,
//!   [`FakeApiServer::create_kubernetes_service`] (kube-apiserver's bootstrap controller).

use serde_json::{Value, json};

use super::csr::{pb_fields, pb_str};
use super::{FakeApiServer, State, status};

/// The first address of the default service CIDR: `default/kubernetes`'s ClusterIP.
pub const KUBERNETES_SERVICE_IP: &str = "10.96.0.1";

/// The discovery entry of `services` (`/api/v1`).
pub(super) fn discovery(verbs: &Value) -> Value {
    json!({"name": "services", "singularName": "service", "namespaced": true,
           "kind": "Service", "verbs": verbs, "shortNames": ["svc"], "categories": ["all"]})
}

fn used_ips(st: &State) -> Vec<String> {
    st.objects
        .iter()
        .filter(|(k, _)| k.starts_with("/api/v1/namespaces/") && k.contains("/services/"))
        .filter_map(|(_, v)| v["spec"]["clusterIP"].as_str().map(String::from))
        .collect()
}

/// The service strategy on create: defaults, validation, ClusterIP allocation. `Err` is the
/// answer to send instead.
pub(super) fn prepare_create(st: &State, obj: &mut Value) -> Result<(), (u16, Value)> {
    let name = obj["metadata"]["name"].as_str().unwrap_or_default().to_string();
    let spec = &mut obj["spec"];
    if !spec.is_object() {
        *spec = json!({});
    }
    let ty = spec["type"].as_str().filter(|t| !t.is_empty()).unwrap_or("ClusterIP").to_string();
    spec["type"] = json!(ty);
    if spec["sessionAffinity"].as_str().is_none_or(str::is_empty) {
        spec["sessionAffinity"] = json!("None");
    }
    if let Some(ports) = spec["ports"].as_array_mut() {
        for p in ports {
            if p["protocol"].as_str().is_none_or(str::is_empty) {
                p["protocol"] = json!("TCP");
            }
            if p["targetPort"].is_null() || p["targetPort"] == json!(0) {
                p["targetPort"] = p["port"].clone();
            }
        }
    }
    if ty == "ExternalName" {
        return Ok(());
    }
    let ip = spec["clusterIP"].as_str().unwrap_or_default().to_string();
    let has_ports = spec["ports"].as_array().is_some_and(|a| !a.is_empty());
    if ip != "None" && !has_ports {
        return Err(status(
            422,
            "Invalid",
            &format!("Service \"{name}\" is invalid: spec.ports: Required value"),
        ));
    }
    spec["internalTrafficPolicy"] = json!("Cluster");
    let used = used_ips(st);
    let ip = if ip.is_empty() {
        let free = (10u32..65_000).map(|n| format!("10.96.{}.{}", n / 256, n % 256)).find(|c| !used.contains(c));
        match free {
            Some(ip) => ip,
            None => return Err(status(500, "InternalError", "range is full")),
        }
    } else if ip != "None" && used.contains(&ip) {
        return Err(status(
            422,
            "Invalid",
            &format!("Service \"{name}\" is invalid: spec.clusterIPs: Invalid value: []string{{\"{ip}\"}}: failed to allocate IP {ip}: provided IP is already allocated"),
        ));
    } else {
        ip
    };
    spec["clusterIP"] = json!(ip);
    spec["clusterIPs"] = json!([ip]);
    spec["ipFamilies"] = json!([if ip.contains(':') { "IPv6" } else { "IPv4" }]);
    spec["ipFamilyPolicy"] = json!("SingleStack");
    obj["status"] = json!({"loadBalancer": {}});
    Ok(())
}

/// printService: NAME TYPE CLUSTER-IP EXTERNAL-IP PORT(S) AGE (SELECTOR with -o wide).
pub(super) fn service_row(o: &Value) -> (Vec<Value>, Vec<Value>) {
    let col = |name: &str, format: &str, priority: u8| {
        json!({"name": name, "type": "string", "format": format, "priority": priority})
    };
    let spec = &o["spec"];
    let ports: Vec<String> = spec["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            let proto = p["protocol"].as_str().unwrap_or("TCP");
            match p["nodePort"].as_i64().filter(|n| *n > 0) {
                Some(n) => format!("{}:{n}/{proto}", p["port"]),
                None => format!("{}/{proto}", p["port"]),
            }
        })
        .collect();
    let external = match spec["type"].as_str().unwrap_or_default() {
        "ExternalName" => spec["externalName"].as_str().unwrap_or("<none>").to_string(),
        _ => "<none>".to_string(),
    };
    let selector = spec["selector"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                .collect::<Vec<_>>()
                .join(",")
        })
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "<none>".into());
    (
        vec![
            col("Name", "name", 0),
            col("Type", "", 0),
            col("Cluster-IP", "", 0),
            col("External-IP", "", 0),
            col("Port(s)", "", 0),
            col("Age", "", 0),
            col("Selector", "", 1),
        ],
        vec![
            o["metadata"]["name"].clone(),
            json!(spec["type"].as_str().unwrap_or_default()),
            json!(spec["clusterIP"].as_str().unwrap_or("<none>")),
            json!(external),
            json!(if ports.is_empty() { "<none>".to_string() } else { ports.join(",") }),
            json!(super::age(o)),
            json!(selector),
        ],
    )
}

/// A Service sent as protobuf (`kubectl create service`): metadata 1, spec 2 (ports 1:
/// name 1, protocol 2, port 3, targetPort 4 (IntOrString: type 1, intVal 2, strVal 3),
/// nodePort 5, appProtocol 6; selector 2; clusterIP 3; type 4; externalName 10).
pub(super) fn from_protobuf(obj: &[u8], meta: impl Fn(&[u8]) -> Option<Value>) -> Option<Value> {
    let mut out = json!({"spec": {}});
    for (f, _, v) in pb_fields(obj)? {
        match f {
            1 => out["metadata"] = meta(v)?,
            2 => out["spec"] = spec_from_protobuf(v)?,
            _ => {}
        }
    }
    Some(out)
}

fn spec_from_protobuf(b: &[u8]) -> Option<Value> {
    let mut spec = json!({"ports": []});
    for (f, _, v) in pb_fields(b)? {
        match f {
            1 => {
                let mut p = json!({});
                for (pf, n, pv) in pb_fields(v)? {
                    match pf {
                        1 => p["name"] = pb_str(pv),
                        2 => p["protocol"] = pb_str(pv),
                        3 => p["port"] = json!(n),
                        4 => {
                            let mut t = (0, 0, String::new());
                            for (tf, tn, tv) in pb_fields(pv)? {
                                match tf {
                                    1 => t.0 = tn,
                                    2 => t.1 = tn,
                                    3 => t.2 = String::from_utf8_lossy(tv).into_owned(),
                                    _ => {}
                                }
                            }
                            p["targetPort"] = if t.0 == 1 { json!(t.2) } else { json!(t.1) };
                        }
                        // Zero is the unset value (omitempty on the JSON side).
                        5 if n != 0 => p["nodePort"] = json!(n),
                        6 => p["appProtocol"] = pb_str(pv),
                        _ => {}
                    }
                }
                if let Some(a) = spec["ports"].as_array_mut() {
                    a.push(p);
                }
            }
            2 => {
                let mut k = String::new();
                let mut val = String::new();
                for (ef, _, ev) in pb_fields(v)? {
                    match ef {
                        1 => k = String::from_utf8_lossy(ev).into_owned(),
                        2 => val = String::from_utf8_lossy(ev).into_owned(),
                        _ => {}
                    }
                }
                spec["selector"][k] = json!(val);
            }
            3 => spec["clusterIP"] = pb_str(v),
            4 => spec["type"] = pb_str(v),
            10 => spec["externalName"] = pb_str(v),
            _ => {}
        }
    }
    Some(spec)
}

impl FakeApiServer {
    /// kube-apiserver's bootstrap controller: the `default/kubernetes` Service (ClusterIP
    /// 10.96.0.1, port `https` 443 → the API server's port, no selector). Returns it.
    pub fn create_kubernetes_service(&self) -> Value {
        self.create_object(
            "/api/v1/namespaces/default/services",
            json!({"metadata": {"name": "kubernetes", "namespace": "default",
                                "labels": {"component": "apiserver", "provider": "kubernetes"}},
                   "spec": {"clusterIP": KUBERNETES_SERVICE_IP, "type": "ClusterIP",
                            "ports": [{"name": "https", "port": 443, "protocol": "TCP",
                                       "targetPort": self.port}]}}),
        )
    }
}
