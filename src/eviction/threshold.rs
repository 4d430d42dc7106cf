//! Eviction signals and thresholds: parsing (flag and KubeletConfiguration forms), the kubelet's
//! defaults, "is this threshold met", soft-threshold grace periods and the node pressure
//! conditions with their transition period. Pure: observations come in as numbers.

use crate::api::helpers::NodeCondition;
use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, Instant};

use crate::api::quantity::parse_quantity_str;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ThresholdError {
    #[error("{field}: unsupported eviction signal {signal:?} (supported: {supported})")]
    UnknownSignal {
        field: String,
        signal: String,
        supported: String,
    },
    #[error("{field}: {signal}: {reason}")]
    InvalidValue {
        field: String,
        signal: String,
        reason: String,
    },
    #[error(
        "{field}: malformed statement {statement:?}: expected <signal><<quantity or percentage> such as memory.available<100Mi"
    )]
    Malformed { field: String, statement: String },
    #[error("{field}: duplicate eviction threshold for {signal}")]
    Duplicate { field: String, signal: String },
    #[error(
        "evictionSoft: {signal} has no grace period: soft thresholds need evictionSoftGracePeriod[{signal}]"
    )]
    MissingGracePeriod { signal: String },
}

/// The eviction signals the kubelet defines on Linux.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Signal {
    MemoryAvailable,
    NodeFsAvailable,
    NodeFsInodesFree,
    ImageFsAvailable,
    ImageFsInodesFree,
    PidAvailable,
}

pub const ALL_SIGNALS: [Signal; 6] = [
    Signal::MemoryAvailable,
    Signal::NodeFsAvailable,
    Signal::NodeFsInodesFree,
    Signal::ImageFsAvailable,
    Signal::ImageFsInodesFree,
    Signal::PidAvailable,
];

/// What a signal measures, for ranking and messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource {
    Memory,
    EphemeralStorage,
    Inodes,
    Pids,
}

impl Resource {
    pub fn as_str(self) -> &'static str {
        match self {
            Resource::Memory => "memory",
            Resource::EphemeralStorage => "ephemeral-storage",
            Resource::Inodes => "inodes",
            Resource::Pids => "pids",
        }
    }
}

impl Signal {
    pub fn as_str(self) -> &'static str {
        match self {
            Signal::MemoryAvailable => "memory.available",
            Signal::NodeFsAvailable => "nodefs.available",
            Signal::NodeFsInodesFree => "nodefs.inodesFree",
            Signal::ImageFsAvailable => "imagefs.available",
            Signal::ImageFsInodesFree => "imagefs.inodesFree",
            Signal::PidAvailable => "pid.available",
        }
    }

    pub fn parse(s: &str) -> Option<Signal> {
        ALL_SIGNALS.into_iter().find(|x| x.as_str() == s)
    }

    pub fn condition(self) -> NodeCondition {
        match self {
            Signal::MemoryAvailable => NodeCondition::MemoryPressure,
            Signal::PidAvailable => NodeCondition::PidPressure,
            _ => NodeCondition::DiskPressure,
        }
    }

    pub fn resource(self) -> Resource {
        match self {
            Signal::MemoryAvailable => Resource::Memory,
            Signal::NodeFsAvailable | Signal::ImageFsAvailable => Resource::EphemeralStorage,
            Signal::NodeFsInodesFree | Signal::ImageFsInodesFree => Resource::Inodes,
            Signal::PidAvailable => Resource::Pids,
        }
    }
}

impl fmt::Display for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A threshold value: an absolute quantity or a fraction of capacity.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value {
    Quantity(i64),
    /// 0.0..1.0
    Percentage(f64),
}

impl Value {
    /// The value in absolute units for a resource of `capacity`.
    pub fn resolve(self, capacity: i64) -> i64 {
        match self {
            Value::Quantity(q) => q,
            Value::Percentage(p) => (p * capacity as f64).round() as i64,
        }
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Quantity(q) => write!(f, "{q}"),
            Value::Percentage(p) => write!(f, "{}%", (p * 10000.0).round() / 100.0),
        }
    }
}

/// One eviction threshold: `signal < value`.
#[derive(Debug, Clone, PartialEq)]
pub struct Threshold {
    pub signal: Signal,
    pub value: Value,
    /// Zero for hard thresholds.
    pub grace_period: Duration,
    /// evictionMinimumReclaim: once met, the threshold stays met until `value + min_reclaim`
    /// is available again.
    pub min_reclaim: Option<Value>,
}

impl Threshold {
    pub fn is_hard(&self) -> bool {
        self.grace_period.is_zero()
    }
}

/// Parses one threshold value (`100Mi`, `10%`). `Ok(None)` for `0%` and `100%`, which the
/// kubelet treats as "no threshold" (that is how an operator disables a default).
pub fn parse_value(field: &str, signal: Signal, v: &str) -> Result<Option<Value>, ThresholdError> {
    let invalid = |reason: String| ThresholdError::InvalidValue {
        field: field.to_string(),
        signal: signal.to_string(),
        reason,
    };
    let v = v.trim();
    if let Some(p) = v.strip_suffix('%') {
        let p: f64 = p
            .trim()
            .parse()
            .map_err(|_| invalid(format!("invalid percentage {v:?}")))?;
        if !(0.0..=100.0).contains(&p) {
            return Err(invalid(format!(
                "percentage {v:?} must be between 0% and 100%"
            )));
        }
        if p == 0.0 || p == 100.0 {
            return Ok(None);
        }
        return Ok(Some(Value::Percentage(p / 100.0)));
    }
    let q = parse_quantity_str(v).map_err(|e| invalid(format!("invalid quantity {v:?}: {e}")))?;
    if q.is_negative() {
        return Err(invalid(format!("quantity {v:?} must not be negative")));
    }
    Ok(Some(Value::Quantity(q.value())))
}

/// The flag form `memory.available<100Mi,nodefs.available<10%` as a map signal -> value text.
pub fn parse_statements(field: &str, s: &str) -> Result<BTreeMap<String, String>, ThresholdError> {
    let mut out = BTreeMap::new();
    for st in s.split(',').map(str::trim).filter(|x| !x.is_empty()) {
        let Some((sig, val)) = st.split_once('<') else {
            return Err(ThresholdError::Malformed {
                field: field.to_string(),
                statement: st.to_string(),
            });
        };
        if out
            .insert(sig.trim().to_string(), val.trim().to_string())
            .is_some()
        {
            return Err(ThresholdError::Duplicate {
                field: field.to_string(),
                signal: sig.trim().to_string(),
            });
        }
    }
    Ok(out)
}

/// The flag form `memory.available=1m30s,nodefs.available=2m` (grace periods, minimum reclaim).
pub fn parse_pairs(field: &str, s: &str) -> Result<BTreeMap<String, String>, ThresholdError> {
    let mut out = BTreeMap::new();
    for st in s.split(',').map(str::trim).filter(|x| !x.is_empty()) {
        let Some((k, v)) = st.split_once('=') else {
            return Err(ThresholdError::Malformed {
                field: field.to_string(),
                statement: st.to_string(),
            });
        };
        out.insert(k.trim().to_string(), v.trim().to_string());
    }
    Ok(out)
}

fn signal_of(field: &str, name: &str) -> Result<Signal, ThresholdError> {
    Signal::parse(name).ok_or_else(|| ThresholdError::UnknownSignal {
        field: field.to_string(),
        signal: name.to_string(),
        supported: ALL_SIGNALS.map(|s| s.as_str()).join(", "),
    })
}

/// The kubelet's default evictionHard on Linux. Setting evictionHard at all replaces the
/// whole map (the kubelet does not merge defaults into a partial map).
pub fn default_hard() -> BTreeMap<String, String> {
    [
        ("memory.available", "100Mi"),
        ("nodefs.available", "10%"),
        ("nodefs.inodesFree", "5%"),
        ("imagefs.available", "15%"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// The raw eviction settings as they come from flags / the config file.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RawThresholds {
    pub hard: BTreeMap<String, String>,
    pub soft: BTreeMap<String, String>,
    pub soft_grace: BTreeMap<String, String>,
    pub min_reclaim: BTreeMap<String, String>,
}

/// Turns the raw maps into thresholds, with the kubelet's validation: known signals only,
/// valid values, every soft threshold has a grace period.
pub fn build(raw: &RawThresholds) -> Result<Vec<Threshold>, ThresholdError> {
    let mut reclaim = BTreeMap::new();
    for (k, v) in &raw.min_reclaim {
        let s = signal_of("evictionMinimumReclaim", k)?;
        if let Some(val) = parse_value("evictionMinimumReclaim", s, v)? {
            reclaim.insert(s, val);
        }
    }
    let mut graces = BTreeMap::new();
    for (k, v) in &raw.soft_grace {
        let s = signal_of("evictionSoftGracePeriod", k)?;
        let d =
            crate::timeutil::parse_go_duration(v).map_err(|e| ThresholdError::InvalidValue {
                field: "evictionSoftGracePeriod".into(),
                signal: k.clone(),
                reason: format!("invalid duration {v:?}: {e}"),
            })?;
        graces.insert(s, d);
    }
    let mut out = vec![];
    for (k, v) in &raw.hard {
        let s = signal_of("evictionHard", k)?;
        if let Some(value) = parse_value("evictionHard", s, v)? {
            out.push(Threshold {
                signal: s,
                value,
                grace_period: Duration::ZERO,
                min_reclaim: reclaim.get(&s).copied(),
            });
        }
    }
    for (k, v) in &raw.soft {
        let s = signal_of("evictionSoft", k)?;
        let Some(value) = parse_value("evictionSoft", s, v)? else {
            continue;
        };
        let grace = graces
            .get(&s)
            .copied()
            .filter(|g| !g.is_zero())
            .ok_or_else(|| ThresholdError::MissingGracePeriod {
                signal: s.to_string(),
            })?;
        out.push(Threshold {
            signal: s,
            value,
            grace_period: grace,
            min_reclaim: reclaim.get(&s).copied(),
        });
    }
    Ok(out)
}

/// One observed signal: how much is available out of what capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Observation {
    pub available: i64,
    pub capacity: i64,
}

pub type Observations = BTreeMap<Signal, Observation>;

/// The thresholds crossed by `obs`. With `enforce_min_reclaim`, a threshold counts as crossed
/// until `value + min_reclaim` is available (the kubelet applies this to thresholds that were
/// already met in the previous pass).
pub fn met<'a>(
    thresholds: &'a [Threshold],
    obs: &Observations,
    enforce_min_reclaim: bool,
) -> Vec<&'a Threshold> {
    thresholds
        .iter()
        .filter(|t| {
            let Some(o) = obs.get(&t.signal) else {
                return false;
            };
            let mut want = t.value.resolve(o.capacity);
            if enforce_min_reclaim {
                if let Some(r) = t.min_reclaim {
                    want = want.saturating_add(r.resolve(o.capacity));
                }
            }
            o.available < want
        })
        .collect()
}

/// Threshold bookkeeping across passes: when each threshold was first seen met (for soft grace
/// periods) and when each condition was last observed (for the transition period).
#[derive(Debug, Default)]
pub struct PressureState {
    first_met: BTreeMap<usize, Instant>,
    /// Thresholds met in the previous pass (min-reclaim applies to them).
    last_met: Vec<usize>,
    condition_seen: BTreeMap<NodeCondition, Instant>,
}

/// The outcome of one pass.
#[derive(Debug, Clone, PartialEq)]
pub struct PassResult {
    /// Thresholds met and past their grace period: eviction candidates, in config order.
    pub actionable: Vec<Threshold>,
    /// Node conditions currently true (including those held by the transition period).
    pub conditions: Vec<NodeCondition>,
}

impl PressureState {
    /// One pass at `now`: updates the bookkeeping and says what to act on.
    pub fn pass(
        &mut self,
        thresholds: &[Threshold],
        obs: &Observations,
        transition: Duration,
        now: Instant,
    ) -> PassResult {
        let met_idx: Vec<usize> = thresholds
            .iter()
            .enumerate()
            .filter(|(i, t)| {
                let enforce = self.last_met.contains(i);
                !met(std::slice::from_ref(*t), obs, enforce).is_empty()
            })
            .map(|(i, _)| i)
            .collect();
        self.first_met.retain(|i, _| met_idx.contains(i));
        for i in &met_idx {
            self.first_met.entry(*i).or_insert(now);
        }
        self.last_met = met_idx.clone();
        // A condition is observed as soon as a threshold for it is met, grace period or not
        // (the kubelet reports pressure before a soft threshold's grace period ends).
        for i in &met_idx {
            self.condition_seen
                .insert(thresholds[*i].signal.condition(), now);
        }
        self.condition_seen
            .retain(|_, seen| now.saturating_duration_since(*seen) < transition);
        let actionable = met_idx
            .iter()
            .filter(|i| {
                let t = &thresholds[**i];
                self.first_met
                    .get(i)
                    .is_some_and(|f| now.saturating_duration_since(*f) >= t.grace_period)
            })
            .map(|i| thresholds[*i].clone())
            .collect();
        PassResult {
            actionable,
            conditions: self.condition_seen.keys().copied().collect(),
        }
    }
}

/// The node allocatable for memory: capacity - systemReserved - kubeReserved - the hard
/// memory.available threshold (the kubelet's formula).
pub fn allocatable(capacity: i64, reserved: i64, thresholds: &[Threshold], signal: Signal) -> i64 {
    let hard = thresholds
        .iter()
        .filter(|t| t.signal == signal && t.is_hard())
        .map(|t| t.value.resolve(capacity))
        .max()
        .unwrap_or(0);
    (capacity - reserved - hard).max(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(hard: &[(&str, &str)]) -> RawThresholds {
        RawThresholds {
            hard: hard
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Default::default()
        }
    }

    /// Kubelet defaults (pkg/kubelet/apis/config/v1beta1/defaults_linux.go):
    /// memory.available<100Mi, nodefs.available<10%, nodefs.inodesFree<5%, imagefs.available<15%.
    #[test]
    fn default_hard_thresholds_are_the_kubelets() {
        let t = build(&RawThresholds {
            hard: default_hard(),
            ..Default::default()
        })
        .unwrap();
        let find = |s| t.iter().find(|t| t.signal == s).unwrap().value;
        assert_eq!(find(Signal::MemoryAvailable), Value::Quantity(100 << 20));
        assert_eq!(find(Signal::NodeFsAvailable), Value::Percentage(0.10));
        assert_eq!(find(Signal::NodeFsInodesFree), Value::Percentage(0.05));
        assert_eq!(find(Signal::ImageFsAvailable), Value::Percentage(0.15));
        assert_eq!(t.len(), 4);
        assert!(t.iter().all(Threshold::is_hard));
    }

    #[test]
    fn flag_statements_parse_and_reject_garbage() {
        let m = parse_statements(
            "--eviction-hard",
            "memory.available<1Gi, nodefs.available<5%",
        )
        .unwrap();
        assert_eq!(m["memory.available"], "1Gi");
        assert_eq!(m["nodefs.available"], "5%");
        assert!(matches!(
            parse_statements("--eviction-hard", "memory.available>1Gi"),
            Err(ThresholdError::Malformed { .. })
        ));
        assert!(matches!(
            parse_statements(
                "--eviction-hard",
                "memory.available<1Gi,memory.available<2Gi"
            ),
            Err(ThresholdError::Duplicate { .. })
        ));
        let g = parse_pairs("--eviction-soft-grace-period", "memory.available=1m30s").unwrap();
        assert_eq!(g["memory.available"], "1m30s");
    }

    #[test]
    fn invalid_thresholds_name_field_and_signal() {
        let e = build(&raw(&[("memory.free", "1Gi")])).unwrap_err();
        assert!(e.to_string().contains("evictionHard") && e.to_string().contains("memory.free"));
        let e = build(&raw(&[("memory.available", "150%")])).unwrap_err();
        assert!(e.to_string().contains("between 0% and 100%"), "{e}");
        let e = build(&raw(&[("memory.available", "-1Gi")])).unwrap_err();
        assert!(e.to_string().contains("negative"), "{e}");
        let e = build(&raw(&[("memory.available", "lots")])).unwrap_err();
        assert!(e.to_string().contains("invalid quantity"), "{e}");
    }

    /// The kubelet ignores 0% and 100% thresholds: that is how a default is switched off.
    #[test]
    fn zero_and_hundred_percent_disable_a_threshold() {
        let t = build(&raw(&[
            ("memory.available", "0%"),
            ("nodefs.available", "100%"),
        ]))
        .unwrap();
        assert!(t.is_empty());
    }

    /// Soft thresholds require a grace period (the kubelet fails validation otherwise).
    #[test]
    fn soft_thresholds_need_a_grace_period() {
        let mut r = RawThresholds::default();
        r.soft.insert("memory.available".into(), "1Gi".into());
        assert_eq!(
            build(&r).unwrap_err(),
            ThresholdError::MissingGracePeriod {
                signal: "memory.available".into()
            }
        );
        r.soft_grace
            .insert("memory.available".into(), "1m30s".into());
        let t = build(&r).unwrap();
        assert_eq!(t[0].grace_period, Duration::from_secs(90));
        assert!(!t[0].is_hard());
    }

    fn obs(sig: Signal, available: i64, capacity: i64) -> Observations {
        [(
            sig,
            Observation {
                available,
                capacity,
            },
        )]
        .into_iter()
        .collect()
    }

    #[test]
    fn met_compares_available_with_quantity_or_share_of_capacity() {
        let t = build(&raw(&[
            ("memory.available", "100Mi"),
            ("nodefs.available", "10%"),
        ]))
        .unwrap();
        assert!(met(&t, &obs(Signal::MemoryAvailable, 101 << 20, 1 << 30), false).is_empty());
        assert_eq!(
            met(&t, &obs(Signal::MemoryAvailable, 99 << 20, 1 << 30), false).len(),
            1
        );
        assert!(met(&t, &obs(Signal::NodeFsAvailable, 11, 100), false).is_empty());
        assert_eq!(
            met(&t, &obs(Signal::NodeFsAvailable, 9, 100), false).len(),
            1
        );
        // No observation, no verdict.
        assert!(met(&t, &Observations::new(), false).is_empty());
    }

    /// evictionMinimumReclaim: once met, a threshold holds until value + minReclaim is free.
    #[test]
    fn minimum_reclaim_holds_a_met_threshold() {
        let mut r = raw(&[("nodefs.available", "10%")]);
        r.min_reclaim.insert("nodefs.available".into(), "5%".into());
        let t = build(&r).unwrap();
        let mut st = PressureState::default();
        let now = Instant::now();
        let p = st.pass(
            &t,
            &obs(Signal::NodeFsAvailable, 9, 100),
            Duration::ZERO,
            now,
        );
        assert_eq!(p.actionable.len(), 1);
        // 12% free: above the threshold, but not above threshold + minimum reclaim.
        let p = st.pass(
            &t,
            &obs(Signal::NodeFsAvailable, 12, 100),
            Duration::ZERO,
            now,
        );
        assert_eq!(p.actionable.len(), 1);
        let p = st.pass(
            &t,
            &obs(Signal::NodeFsAvailable, 16, 100),
            Duration::ZERO,
            now,
        );
        assert!(p.actionable.is_empty());
        // Not met before: 12% is fine.
        let p = st.pass(
            &t,
            &obs(Signal::NodeFsAvailable, 12, 100),
            Duration::ZERO,
            now,
        );
        assert!(p.actionable.is_empty());
    }

    /// Soft thresholds act only after being met for their whole grace period; the pressure
    /// condition shows at once.
    #[test]
    fn soft_grace_period_and_pressure_transition_period() {
        let mut r = RawThresholds::default();
        r.soft.insert("memory.available".into(), "1Gi".into());
        r.soft_grace.insert("memory.available".into(), "30s".into());
        let t = build(&r).unwrap();
        let mut st = PressureState::default();
        let t0 = Instant::now();
        let low = obs(Signal::MemoryAvailable, 512 << 20, 4 << 30);
        let high = obs(Signal::MemoryAvailable, 2 << 30, 4 << 30);
        let trans = Duration::from_secs(300);
        let p = st.pass(&t, &low, trans, t0);
        assert!(p.actionable.is_empty());
        assert_eq!(p.conditions, vec![NodeCondition::MemoryPressure]);
        let p = st.pass(&t, &low, trans, t0 + Duration::from_secs(29));
        assert!(p.actionable.is_empty());
        let p = st.pass(&t, &low, trans, t0 + Duration::from_secs(30));
        assert_eq!(p.actionable.len(), 1);
        // Cleared: the condition stays for evictionPressureTransitionPeriod (5m default).
        let p = st.pass(&t, &high, trans, t0 + Duration::from_secs(31));
        assert!(p.actionable.is_empty());
        assert_eq!(p.conditions, vec![NodeCondition::MemoryPressure]);
        let p = st.pass(&t, &high, trans, t0 + Duration::from_secs(329));
        assert_eq!(p.conditions, vec![NodeCondition::MemoryPressure]);
        let p = st.pass(&t, &high, trans, t0 + Duration::from_secs(330));
        assert!(p.conditions.is_empty());
        // Met again: the grace period starts over.
        let p = st.pass(&t, &low, trans, t0 + Duration::from_secs(400));
        assert!(p.actionable.is_empty());
    }

    #[test]
    fn signals_map_to_conditions_and_resources() {
        assert_eq!(
            Signal::ImageFsInodesFree.condition(),
            NodeCondition::DiskPressure
        );
        assert_eq!(Signal::PidAvailable.condition().as_str(), "PIDPressure");
        assert_eq!(Signal::NodeFsInodesFree.resource(), Resource::Inodes);
        for s in ALL_SIGNALS {
            assert_eq!(Signal::parse(s.as_str()), Some(s));
        }
    }

    /// Allocatable = capacity - reserved - hard eviction threshold (node allocatable doc).
    #[test]
    fn allocatable_subtracts_reservations_and_the_hard_threshold() {
        let t = build(&RawThresholds {
            hard: default_hard(),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(
            allocatable(4 << 30, 512 << 20, &t, Signal::MemoryAvailable),
            (4 << 30) - (512 << 20) - (100 << 20)
        );
        let t = build(&raw(&[("memory.available", "10%")])).unwrap();
        assert_eq!(allocatable(1000, 0, &t, Signal::MemoryAvailable), 900);
    }
}
