//! Probe and lifecycle-hook specs, parsed from the container's JSON (they live in
//! `Container::extra` so the pod's canonical form, and so its UID, is untouched).

use serde::Deserialize;
use serde_json::Value;

use crate::api::Container;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ProbeKind {
    Liveness,
    Readiness,
    Startup,
}

impl ProbeKind {
    pub fn field(self) -> &'static str {
        match self {
            ProbeKind::Liveness => "livenessProbe",
            ProbeKind::Readiness => "readinessProbe",
            ProbeKind::Startup => "startupProbe",
        }
    }

    /// As the kubelet writes it in events and metrics ("Liveness", ...).
    pub fn title(self) -> &'static str {
        match self {
            ProbeKind::Liveness => "Liveness",
            ProbeKind::Readiness => "Readiness",
            ProbeKind::Startup => "Startup",
        }
    }

    pub const ALL: [ProbeKind; 3] = [
        ProbeKind::Startup,
        ProbeKind::Liveness,
        ProbeKind::Readiness,
    ];
}

/// A port given as a number or as the name of a container port.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum IntOrString {
    Int(i32),
    Str(String),
}

impl Default for IntOrString {
    fn default() -> Self {
        IntOrString::Int(0)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
pub struct ExecAction {
    #[serde(default)]
    pub command: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
pub struct HttpHeader {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub value: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpGetAction {
    #[serde(default)]
    pub path: String,
    #[serde(default)]
    pub port: IntOrString,
    #[serde(default)]
    pub host: String,
    #[serde(default)]
    pub scheme: String,
    #[serde(default)]
    pub http_headers: Vec<HttpHeader>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
pub struct TcpSocketAction {
    #[serde(default)]
    pub port: IntOrString,
    #[serde(default)]
    pub host: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
pub struct GrpcAction {
    #[serde(default)]
    pub port: i32,
    #[serde(default)]
    pub service: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
pub struct SleepAction {
    #[serde(default)]
    pub seconds: i64,
}

/// The action of a probe or hook: exactly one member is set (validation enforces it).
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Handler {
    #[serde(default)]
    pub exec: Option<ExecAction>,
    #[serde(default)]
    pub http_get: Option<HttpGetAction>,
    #[serde(default)]
    pub tcp_socket: Option<TcpSocketAction>,
    #[serde(default)]
    pub grpc: Option<GrpcAction>,
    #[serde(default)]
    pub sleep: Option<SleepAction>,
}

fn d_period() -> i32 {
    10
}
fn d_one() -> i32 {
    1
}
fn d_failure() -> i32 {
    3
}

/// v1 Probe with the kubelet's defaults: initialDelaySeconds 0, periodSeconds 10,
/// timeoutSeconds 1, successThreshold 1, failureThreshold 3.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Probe {
    #[serde(flatten)]
    pub handler: Handler,
    #[serde(default)]
    pub initial_delay_seconds: i32,
    #[serde(default = "d_one")]
    pub timeout_seconds: i32,
    #[serde(default = "d_period")]
    pub period_seconds: i32,
    #[serde(default = "d_one")]
    pub success_threshold: i32,
    #[serde(default = "d_failure")]
    pub failure_threshold: i32,
    #[serde(default)]
    pub termination_grace_period_seconds: Option<i64>,
}

impl Probe {
    /// Values below the API minimum behave as the minimum (validation rejects them anyway).
    pub fn normalized(mut self) -> Probe {
        self.timeout_seconds = self.timeout_seconds.max(1);
        self.period_seconds = self.period_seconds.max(1);
        self.success_threshold = self.success_threshold.max(1);
        self.failure_threshold = self.failure_threshold.max(1);
        self.initial_delay_seconds = self.initial_delay_seconds.max(0);
        self
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Lifecycle {
    #[serde(default)]
    pub post_start: Option<Handler>,
    #[serde(default)]
    pub pre_stop: Option<Handler>,
}

fn parse<T: for<'de> Deserialize<'de>>(v: Option<&Value>) -> Option<T> {
    v.and_then(|v| serde_json::from_value(v.clone()).ok())
}

/// The container's probe of this kind, if it has a usable one.
pub fn probe_of(c: &Container, kind: ProbeKind) -> Option<Probe> {
    parse::<Probe>(c.extra.get(kind.field())).map(Probe::normalized)
}

pub fn lifecycle_of(c: &Container) -> Lifecycle {
    parse::<Lifecycle>(c.extra.get("lifecycle")).unwrap_or_default()
}

/// A probe or hook port that names no port (the kubelet's messages).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PortError {
    #[error("invalid port number: {0}")]
    Number(i64),
    #[error("couldn't find port: {name} in {container}")]
    Name { name: String, container: String },
}

/// Resolve a port: a number, or the name of one of the container's ports.
pub fn resolve_port(c: &Container, port: &IntOrString) -> Result<u16, PortError> {
    match port {
        IntOrString::Int(p) => u16::try_from(*p)
            .ok()
            .filter(|p| *p > 0)
            .ok_or(PortError::Number(i64::from(*p))),
        IntOrString::Str(s) => {
            if let Ok(n) = s.parse::<u16>() {
                return Ok(n);
            }
            c.ports
                .iter()
                .find(|p| p.name == *s)
                .and_then(|p| u16::try_from(p.container_port).ok())
                .ok_or_else(|| PortError::Name {
                    name: s.clone(),
                    container: c.name.clone(),
                })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ContainerPort;

    fn container(probe: &str) -> Container {
        let mut c = Container {
            name: "c".into(),
            ..Default::default()
        };
        c.ports.push(ContainerPort {
            name: "http".into(),
            container_port: 8080,
            ..Default::default()
        });
        c.extra.insert(
            "livenessProbe".into(),
            serde_json::from_str(probe).expect("json"),
        );
        c
    }

    #[test]
    fn kubelet_probe_defaults() {
        // initialDelaySeconds 0, periodSeconds 10, timeoutSeconds 1, successThreshold 1,
        // failureThreshold 3.
        let p = probe_of(
            &container(r#"{"exec":{"command":["true"]}}"#),
            ProbeKind::Liveness,
        )
        .expect("probe");
        assert_eq!(
            (
                p.initial_delay_seconds,
                p.period_seconds,
                p.timeout_seconds,
                p.success_threshold,
                p.failure_threshold
            ),
            (0, 10, 1, 1, 3)
        );
        assert_eq!(
            p.handler.exec.map(|e| e.command),
            Some(vec!["true".to_string()])
        );
        assert!(probe_of(&container("{}"), ProbeKind::Readiness).is_none());
    }

    #[test]
    fn named_ports_resolve_against_container_ports() {
        let c = container(r#"{"httpGet":{"port":"http","path":"/healthz"}}"#);
        let p = probe_of(&c, ProbeKind::Liveness).expect("probe");
        let h = p.handler.http_get.expect("httpGet");
        assert_eq!(resolve_port(&c, &h.port), Ok(8080));
        assert_eq!(resolve_port(&c, &IntOrString::Int(81)), Ok(81));
        assert!(resolve_port(&c, &IntOrString::Str("nope".into())).is_err());
        assert!(resolve_port(&c, &IntOrString::Int(0)).is_err());
    }
}
