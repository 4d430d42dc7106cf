//! The JSON types of the v1 Pod fields, checked as Go's `encoding/json` checks them when the
//! kubelet decodes a manifest into `v1.Pod`: a string where a bool or an integer belongs (a
//! quoted `"true"`, `"0400"`), a number where a string belongs (`image: 1.0`), a list where a
//! map belongs, an integer out of its Go type's range, all fail the decode and the pod is
//! refused. nanolet keeps many fields as raw JSON and reads them later; without this check a
//! wrongly typed `readOnly`, `defaultMode` or `runAsNonRoot` would fall back to a default and
//! run the pod weaker than its manifest asks.
//!
//! Unknown fields are ignored, as by the kubelet's decoder. Field names and types are the
//! core/v1 API's (k8s.io/api/core/v1/types.go).

use serde_json::Value;

/// A field's Go type, as far as JSON decoding cares.
#[derive(Debug, Clone, Copy)]
pub enum T {
    Str,
    Bool,
    I32,
    I64,
    /// `resource.Quantity`: a string or a number.
    Quantity,
    /// `intstr.IntOrString`: an int32 or a string.
    IntOrStr,
    List(&'static T),
    /// `map[string]T`.
    Map(&'static T),
    Obj(&'static [(&'static str, T)]),
    /// Anything (`runtime.RawExtension`-like or not checked).
    Any,
}

use T::*;

const STRS: T = List(&Str);
const STR_MAP: T = Map(&Str);
const QTY_MAP: T = Map(&Quantity);

const KEY_TO_PATH: T = List(&Obj(&[("key", Str), ("path", Str), ("mode", I32)]));
const LOCAL_REF: T = Obj(&[("name", Str)]);
const OBJECT_FIELD_SELECTOR: T = Obj(&[("apiVersion", Str), ("fieldPath", Str)]);
const RESOURCE_FIELD_SELECTOR: T = Obj(&[
    ("containerName", Str),
    ("resource", Str),
    ("divisor", Quantity),
]);
const DOWNWARD_ITEMS: T = List(&Obj(&[
    ("path", Str),
    ("fieldRef", OBJECT_FIELD_SELECTOR),
    ("resourceFieldRef", RESOURCE_FIELD_SELECTOR),
    ("mode", I32),
]));

const LABEL_SELECTOR: T = Obj(&[
    ("matchLabels", STR_MAP),
    (
        "matchExpressions",
        List(&Obj(&[("key", Str), ("operator", Str), ("values", STRS)])),
    ),
]);
const NODE_SELECTOR_TERM: T = Obj(&[
    (
        "matchExpressions",
        List(&Obj(&[("key", Str), ("operator", Str), ("values", STRS)])),
    ),
    (
        "matchFields",
        List(&Obj(&[("key", Str), ("operator", Str), ("values", STRS)])),
    ),
]);
const POD_AFFINITY_TERM: T = Obj(&[
    ("labelSelector", LABEL_SELECTOR),
    ("namespaces", STRS),
    ("topologyKey", Str),
    ("namespaceSelector", LABEL_SELECTOR),
    ("matchLabelKeys", STRS),
    ("mismatchLabelKeys", STRS),
]);
const WEIGHTED_POD_AFFINITY_TERM: T =
    Obj(&[("weight", I32), ("podAffinityTerm", POD_AFFINITY_TERM)]);
const POD_AFFINITY: T = Obj(&[
    (
        "requiredDuringSchedulingIgnoredDuringExecution",
        List(&POD_AFFINITY_TERM),
    ),
    (
        "preferredDuringSchedulingIgnoredDuringExecution",
        List(&WEIGHTED_POD_AFFINITY_TERM),
    ),
]);
const AFFINITY: T = Obj(&[
    (
        "nodeAffinity",
        Obj(&[
            (
                "requiredDuringSchedulingIgnoredDuringExecution",
                Obj(&[("nodeSelectorTerms", List(&NODE_SELECTOR_TERM))]),
            ),
            (
                "preferredDuringSchedulingIgnoredDuringExecution",
                List(&Obj(&[("weight", I32), ("preference", NODE_SELECTOR_TERM)])),
            ),
        ]),
    ),
    ("podAffinity", POD_AFFINITY),
    ("podAntiAffinity", POD_AFFINITY),
]);

const SE_LINUX: T = Obj(&[("user", Str), ("role", Str), ("type", Str), ("level", Str)]);
const PROFILE: T = Obj(&[("type", Str), ("localhostProfile", Str)]);
const WINDOWS: T = Obj(&[
    ("gmsaCredentialSpecName", Str),
    ("gmsaCredentialSpec", Str),
    ("runAsUserName", Str),
    ("hostProcess", Bool),
]);
const CONTAINER_SECURITY: T = Obj(&[
    ("capabilities", Obj(&[("add", STRS), ("drop", STRS)])),
    ("privileged", Bool),
    ("seLinuxOptions", SE_LINUX),
    ("windowsOptions", WINDOWS),
    ("runAsUser", I64),
    ("runAsGroup", I64),
    ("runAsNonRoot", Bool),
    ("readOnlyRootFilesystem", Bool),
    ("allowPrivilegeEscalation", Bool),
    ("procMount", Str),
    ("seccompProfile", PROFILE),
    ("appArmorProfile", PROFILE),
]);
const POD_SECURITY: T = Obj(&[
    ("seLinuxOptions", SE_LINUX),
    ("windowsOptions", WINDOWS),
    ("runAsUser", I64),
    ("runAsGroup", I64),
    ("runAsNonRoot", Bool),
    ("supplementalGroups", List(&I64)),
    ("supplementalGroupsPolicy", Str),
    ("fsGroup", I64),
    ("sysctls", List(&Obj(&[("name", Str), ("value", Str)]))),
    ("fsGroupChangePolicy", Str),
    ("seccompProfile", PROFILE),
    ("appArmorProfile", PROFILE),
    ("seLinuxChangePolicy", Str),
]);

const HANDLER_FIELDS: &[(&str, T)] = &[
    ("exec", Obj(&[("command", STRS)])),
    (
        "httpGet",
        Obj(&[
            ("path", Str),
            ("port", IntOrStr),
            ("host", Str),
            ("scheme", Str),
            ("httpHeaders", List(&Obj(&[("name", Str), ("value", Str)]))),
        ]),
    ),
    ("tcpSocket", Obj(&[("port", IntOrStr), ("host", Str)])),
    ("sleep", Obj(&[("seconds", I64)])),
];
const HANDLER: T = Obj(HANDLER_FIELDS);
const PROBE: T = Obj(&[
    ("exec", Obj(&[("command", STRS)])),
    (
        "httpGet",
        Obj(&[
            ("path", Str),
            ("port", IntOrStr),
            ("host", Str),
            ("scheme", Str),
            ("httpHeaders", List(&Obj(&[("name", Str), ("value", Str)]))),
        ]),
    ),
    ("tcpSocket", Obj(&[("port", IntOrStr), ("host", Str)])),
    ("grpc", Obj(&[("port", I32), ("service", Str)])),
    ("initialDelaySeconds", I32),
    ("timeoutSeconds", I32),
    ("periodSeconds", I32),
    ("successThreshold", I32),
    ("failureThreshold", I32),
    ("terminationGracePeriodSeconds", I64),
]);

const CONTAINER: T = Obj(&[
    ("name", Str),
    ("image", Str),
    ("command", STRS),
    ("args", STRS),
    ("workingDir", Str),
    (
        "ports",
        List(&Obj(&[
            ("name", Str),
            ("hostPort", I32),
            ("containerPort", I32),
            ("protocol", Str),
            ("hostIP", Str),
        ])),
    ),
    (
        "envFrom",
        List(&Obj(&[
            ("prefix", Str),
            ("configMapRef", Obj(&[("name", Str), ("optional", Bool)])),
            ("secretRef", Obj(&[("name", Str), ("optional", Bool)])),
        ])),
    ),
    (
        "env",
        List(&Obj(&[
            ("name", Str),
            ("value", Str),
            (
                "valueFrom",
                Obj(&[
                    ("fieldRef", OBJECT_FIELD_SELECTOR),
                    ("resourceFieldRef", RESOURCE_FIELD_SELECTOR),
                    (
                        "configMapKeyRef",
                        Obj(&[("name", Str), ("key", Str), ("optional", Bool)]),
                    ),
                    (
                        "secretKeyRef",
                        Obj(&[("name", Str), ("key", Str), ("optional", Bool)]),
                    ),
                ]),
            ),
        ])),
    ),
    (
        "resources",
        Obj(&[
            ("limits", QTY_MAP),
            ("requests", QTY_MAP),
            ("claims", List(&Obj(&[("name", Str), ("request", Str)]))),
        ]),
    ),
    (
        "resizePolicy",
        List(&Obj(&[("resourceName", Str), ("restartPolicy", Str)])),
    ),
    ("restartPolicy", Str),
    (
        "volumeMounts",
        List(&Obj(&[
            ("name", Str),
            ("readOnly", Bool),
            ("recursiveReadOnly", Str),
            ("mountPath", Str),
            ("subPath", Str),
            ("mountPropagation", Str),
            ("subPathExpr", Str),
        ])),
    ),
    (
        "volumeDevices",
        List(&Obj(&[("name", Str), ("devicePath", Str)])),
    ),
    ("livenessProbe", PROBE),
    ("readinessProbe", PROBE),
    ("startupProbe", PROBE),
    (
        "lifecycle",
        Obj(&[
            ("postStart", HANDLER),
            ("preStop", HANDLER),
            ("stopSignal", Str),
        ]),
    ),
    ("terminationMessagePath", Str),
    ("terminationMessagePolicy", Str),
    ("imagePullPolicy", Str),
    ("securityContext", CONTAINER_SECURITY),
    ("stdin", Bool),
    ("stdinOnce", Bool),
    ("tty", Bool),
]);

const VOLUME: T = Obj(&[
    ("name", Str),
    ("hostPath", Obj(&[("path", Str), ("type", Str)])),
    ("emptyDir", Obj(&[("medium", Str), ("sizeLimit", Quantity)])),
    (
        "secret",
        Obj(&[
            ("secretName", Str),
            ("items", KEY_TO_PATH),
            ("defaultMode", I32),
            ("optional", Bool),
        ]),
    ),
    (
        "configMap",
        Obj(&[
            ("name", Str),
            ("items", KEY_TO_PATH),
            ("defaultMode", I32),
            ("optional", Bool),
        ]),
    ),
    (
        "downwardAPI",
        Obj(&[("items", DOWNWARD_ITEMS), ("defaultMode", I32)]),
    ),
    (
        "projected",
        Obj(&[
            (
                "sources",
                List(&Obj(&[
                    (
                        "secret",
                        Obj(&[("name", Str), ("items", KEY_TO_PATH), ("optional", Bool)]),
                    ),
                    (
                        "configMap",
                        Obj(&[("name", Str), ("items", KEY_TO_PATH), ("optional", Bool)]),
                    ),
                    ("downwardAPI", Obj(&[("items", DOWNWARD_ITEMS)])),
                    (
                        "serviceAccountToken",
                        Obj(&[("audience", Str), ("expirationSeconds", I64), ("path", Str)]),
                    ),
                    ("clusterTrustBundle", Any),
                    ("podCertificate", Any),
                ])),
            ),
            ("defaultMode", I32),
        ]),
    ),
    (
        "persistentVolumeClaim",
        Obj(&[("claimName", Str), ("readOnly", Bool)]),
    ),
    ("ephemeral", Obj(&[("volumeClaimTemplate", Any)])),
    (
        "csi",
        Obj(&[
            ("driver", Str),
            ("readOnly", Bool),
            ("fsType", Str),
            ("volumeAttributes", STR_MAP),
            ("nodePublishSecretRef", LOCAL_REF),
        ]),
    ),
    (
        "nfs",
        Obj(&[("server", Str), ("path", Str), ("readOnly", Bool)]),
    ),
    ("image", Obj(&[("reference", Str), ("pullPolicy", Str)])),
]);

const TOLERATION: T = Obj(&[
    ("key", Str),
    ("operator", Str),
    ("value", Str),
    ("effect", Str),
    ("tolerationSeconds", I64),
]);

const TOPOLOGY_SPREAD: T = Obj(&[
    ("maxSkew", I32),
    ("topologyKey", Str),
    ("whenUnsatisfiable", Str),
    ("labelSelector", LABEL_SELECTOR),
    ("minDomains", I32),
    ("nodeAffinityPolicy", Str),
    ("nodeTaintsPolicy", Str),
    ("matchLabelKeys", STRS),
]);

const POD_SPEC: T = Obj(&[
    ("volumes", List(&VOLUME)),
    ("initContainers", List(&CONTAINER)),
    ("containers", List(&CONTAINER)),
    ("ephemeralContainers", List(&CONTAINER)),
    ("restartPolicy", Str),
    ("terminationGracePeriodSeconds", I64),
    ("activeDeadlineSeconds", I64),
    ("dnsPolicy", Str),
    ("nodeSelector", STR_MAP),
    ("serviceAccountName", Str),
    ("serviceAccount", Str),
    ("automountServiceAccountToken", Bool),
    ("nodeName", Str),
    ("hostNetwork", Bool),
    ("hostPID", Bool),
    ("hostIPC", Bool),
    ("shareProcessNamespace", Bool),
    ("securityContext", POD_SECURITY),
    ("imagePullSecrets", List(&LOCAL_REF)),
    ("hostname", Str),
    ("subdomain", Str),
    ("affinity", AFFINITY),
    ("schedulerName", Str),
    ("tolerations", List(&TOLERATION)),
    (
        "hostAliases",
        List(&Obj(&[("ip", Str), ("hostnames", STRS)])),
    ),
    ("priorityClassName", Str),
    ("priority", I32),
    (
        "dnsConfig",
        Obj(&[
            ("nameservers", STRS),
            ("searches", STRS),
            ("options", List(&Obj(&[("name", Str), ("value", Str)]))),
        ]),
    ),
    ("readinessGates", List(&Obj(&[("conditionType", Str)]))),
    ("runtimeClassName", Str),
    ("enableServiceLinks", Bool),
    ("preemptionPolicy", Str),
    ("overhead", QTY_MAP),
    ("topologySpreadConstraints", List(&TOPOLOGY_SPREAD)),
    ("setHostnameAsFQDN", Bool),
    ("os", Obj(&[("name", Str)])),
    ("hostUsers", Bool),
    ("schedulingGates", List(&Obj(&[("name", Str)]))),
    (
        "resourceClaims",
        List(&Obj(&[
            ("name", Str),
            ("resourceClaimName", Str),
            ("resourceClaimTemplateName", Str),
        ])),
    ),
    (
        "resources",
        Obj(&[("limits", QTY_MAP), ("requests", QTY_MAP)]),
    ),
]);

const OBJECT_META: T = Obj(&[
    ("name", Str),
    ("generateName", Str),
    ("namespace", Str),
    ("uid", Str),
    ("resourceVersion", Str),
    ("generation", I64),
    ("labels", STR_MAP),
    ("annotations", STR_MAP),
    ("finalizers", STRS),
]);

/// The Pod as the kubelet's decoder sees it.
pub const POD: T = Obj(&[
    ("apiVersion", Str),
    ("kind", Str),
    ("metadata", OBJECT_META),
    ("spec", POD_SPEC),
]);

/// Every JSON type error in `v` against `t`, as (field path, reason), e.g.
/// `("spec.volumes[0].secret.defaultMode", "Invalid value: \"0400\": must be an integer (int32) ...")`.
pub fn type_errors(v: &Value, t: &T) -> Vec<(String, String)> {
    let mut out = Vec::new();
    check(v, t, "", &mut out);
    out
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a map",
    }
}

fn shown(v: &Value) -> String {
    match v {
        Value::String(s) if s.chars().count() <= 40 => format!("{s:?}"),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        other => json_kind(other).to_string(),
    }
}

fn int_in(v: &Value, min: i64, max: i64) -> bool {
    v.as_i64().is_some_and(|i| (min..=max).contains(&i))
}

fn check(v: &Value, t: &T, path: &str, out: &mut Vec<(String, String)>) {
    // null decodes to the zero value of any type (crate::yaml removes most nulls before this).
    if v.is_null() {
        return;
    }
    let mut wrong = |want: &str, hint: &str| {
        out.push((
            path.to_string(),
            format!(
                "Invalid value: {}: must be {want}; the kubelet cannot decode {} into this field{hint}",
                shown(v),
                json_kind(v)
            ),
        ))
    };
    match t {
        Any => {}
        Str => {
            if !v.is_string() {
                wrong("a string", " (quote the value)");
            }
        }
        Bool => {
            if !v.is_boolean() {
                wrong("a boolean (true or false)", " (write it unquoted)");
            }
        }
        I32 => {
            if !int_in(v, i32::MIN as i64, i32::MAX as i64) {
                wrong(
                    "an integer (int32)",
                    if v.is_string() {
                        " (write it unquoted; a leading 0 is octal)"
                    } else {
                        ""
                    },
                );
            }
        }
        I64 => {
            if !(v.is_i64() || v.as_u64().is_some_and(|u| u <= i64::MAX as u64)) {
                wrong(
                    "an integer (int64)",
                    if v.is_string() {
                        " (write it unquoted)"
                    } else {
                        ""
                    },
                );
            }
        }
        Quantity => {
            if !(v.is_string() || v.is_number()) {
                wrong("a quantity (a string or a number)", "");
            }
        }
        IntOrStr => {
            if !(v.is_string() || int_in(v, i32::MIN as i64, i32::MAX as i64)) {
                wrong("an integer (int32) or a string", "");
            }
        }
        List(elem) => match v {
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    check(item, elem, &format!("{path}[{i}]"), out);
                }
            }
            _ => wrong("a list", ""),
        },
        Map(elem) => match v {
            Value::Object(m) => {
                for (k, item) in m {
                    check(item, elem, &join(path, k), out);
                }
            }
            _ => wrong("a map", ""),
        },
        Obj(fields) => match v {
            Value::Object(m) => {
                for (name, ft) in fields.iter() {
                    if let Some(item) = m.get(*name) {
                        check(item, ft, &join(path, name), out);
                    }
                }
            }
            _ => wrong("a map (an object)", ""),
        },
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn errs(pod: Value) -> Vec<(String, String)> {
        type_errors(&pod, &POD)
    }

    #[test]
    fn go_json_type_errors_refuse_the_pod() {
        // encoding/json: a string into a bool or int32 field, a number into a string field,
        // a list where a struct belongs: each fails the kubelet's decode of the manifest.
        let e = errs(json!({"spec": {
            "hostNetwork": "yes",
            "containers": [{"name": "c", "image": 1,
                "volumeMounts": [{"name": "v", "mountPath": "/v", "readOnly": "true"}],
                "securityContext": {"runAsNonRoot": "yes", "runAsUser": "1000"}}],
            "volumes": [{"name": "v", "secret": {"secretName": "s", "defaultMode": "0400"}}],
            "tolerations": {"key": "x"},
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "In", "values": "b"}]}]}}},
            "topologySpreadConstraints": [{"maxSkew": "1"}]
        }}));
        let paths: Vec<&str> = e.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(
            paths,
            [
                "spec.volumes[0].secret.defaultMode",
                "spec.containers[0].image",
                "spec.containers[0].volumeMounts[0].readOnly",
                "spec.containers[0].securityContext.runAsUser",
                "spec.containers[0].securityContext.runAsNonRoot",
                "spec.hostNetwork",
                "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].values",
                "spec.tolerations",
                "spec.topologySpreadConstraints[0].maxSkew",
            ]
        );
        assert!(
            e[0].1.contains("\"0400\"") && e[0].1.contains("int32"),
            "{}",
            e[0].1
        );
    }

    #[test]
    fn well_typed_pods_and_unknown_fields_pass() {
        let e = errs(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "a", "labels": {"x": "1"}, "somethingNew": [1]},
            "spec": {"hostNetwork": true, "containers": [{"name": "c", "image": "busybox",
                "ports": [{"containerPort": 80}], "resources": {"limits": {"cpu": 1, "memory": "1Gi"}},
                "livenessProbe": {"httpGet": {"port": "http"}}, "futureField": "x"}],
                "volumes": [{"name": "v", "configMap": {"name": "m", "defaultMode": 256}}]}}));
        assert!(e.is_empty(), "{e:?}");
    }

    #[test]
    fn integers_out_of_their_go_range_fail() {
        let e =
            errs(json!({"spec": {"containers": [{"ports": [{"containerPort": 4294967296i64}]}]}}));
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].0, "spec.containers[0].ports[0].containerPort");
    }
}
