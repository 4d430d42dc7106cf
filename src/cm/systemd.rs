//! The systemd cgroup driver's cgroups, as the kubelet's cgroup manager makes them with
//! `--cgroup-driver=systemd` (pkg/kubelet/cm/cgroup_manager_linux.go over libcontainer's
//! systemd manager): every cgroup is a slice, created as a transient unit through systemd's
//! D-Bus API and then given its values.
//!
//! - `Create`: `StartTransientUnit(name, "replace", props, [])` with `Description`
//!   (`libcontainer container <name>`), `Wants=<parent slice>`, the accounting switches and
//!   `DefaultDependencies=no`; a unit that exists already is fine (`UnitExists` ignored, as
//!   for every slice the kubelet ensures); the job is awaited (`JobRemoved`, result `done`).
//!   Then `Set`.
//! - `Set` / `Update`: `SetUnitProperties(name, true, props)` with the values: on cgroup v1
//!   `CPUShares`, `MemoryLimit`; on v2 `CPUWeight` (from the shares), `MemoryMax`; on both
//!   `CPUQuotaPeriodUSec` (systemd >= 242) and `CPUQuotaPerSecUSec` (the quota per second,
//!   rounded up to 10 ms, or infinity), `TasksMax`.
//! - The connection: the system bus, else (root) systemd's private socket
//!   `/run/systemd/private` without `Hello`, as go-systemd's `NewWithContext`.
//!
//! The slices: `kubepods.slice` (node allocatable), `kubepods-burstable.slice` and
//! `kubepods-besteffort.slice` (the QoS tiers), `kubepods[-<qos>]-pod<uid>.slice` (pod totals,
//! `podPidsLimit`), the reserved cgroups (`system.slice`). systemd writes the cgroup files.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tracing::{debug, info};

use crate::nodeshutdown::dbus::{Call, Connection, DbusError, Value};

const SYSTEMD: &str = "org.freedesktop.systemd1";
const SYSTEMD_PATH: &str = "/org/freedesktop/systemd1";
const MANAGER: &str = "org.freedesktop.systemd1.Manager";
/// systemd's private socket (root only), used when there is no system bus.
pub const PRIVATE_SOCKET: &str = "unix:path=/run/systemd/private";
/// How long a call may take (libdbus's default) and how long a job may (libcontainer's 30 s).
const CALL_TIMEOUT: Duration = Duration::from_secs(25);
const JOB_TIMEOUT: Duration = Duration::from_secs(30);
/// The kernel's default CFS period (µs), libcontainer's `defCPUQuotaPeriod`.
const DEFAULT_PERIOD: u64 = 100_000;

/// What can go wrong making a slice.
#[derive(Debug, thiserror::Error)]
pub enum SystemdError {
    #[error("connecting to systemd (system bus: {bus}; private socket: {private})")]
    Connect {
        bus: Box<DbusError>,
        private: Box<DbusError>,
    },
    #[error("{unit}: {source}")]
    Call { unit: String, source: DbusError },
    #[error("{unit}: the job ended {result:?}")]
    Job { unit: String, result: String },
    #[error("{unit}: no JobRemoved for {job} within {JOB_TIMEOUT:?}")]
    JobTimeout { unit: String, job: String },
}

/// A slice's values (libcontainer's `Resources` as the kubelet fills them); `None` = unset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SliceResources {
    pub cpu_shares: Option<u64>,
    /// CFS quota (µs per period, -1 = unlimited) and period (µs).
    pub cpu_quota: Option<(i64, u64)>,
    pub memory: Option<i64>,
    /// `TasksMax` (-1 = infinity).
    pub pids: Option<i64>,
}

/// The unit properties of `r` (libcontainer's `genV1ResourcesProperties` /
/// `genV2ResourcesProperties` for the fields the kubelet sets).
pub fn resource_properties(r: &SliceResources, v2: bool, version: u32) -> Vec<(String, Value)> {
    let mut props = vec![];
    let mut prop = |name: &str, v: Value| props.push((name.to_string(), v));
    if let Some(m) = r.memory.filter(|m| *m != 0) {
        prop(
            if v2 { "MemoryMax" } else { "MemoryLimit" },
            Value::U64(m as u64),
        );
    }
    if let Some(s) = r.cpu_shares.filter(|s| *s != 0) {
        if v2 {
            prop("CPUWeight", Value::U64(super::shares_to_weight(s)));
        } else {
            prop("CPUShares", Value::U64(s));
        }
    }
    if let Some((quota, period)) = r.cpu_quota {
        // addCpuQuota: the period from systemd 242; the quota per second of CPU time,
        // rounded up to whole percent (systemd keeps CPUQuota as a percentage).
        if period != 0 && version >= 242 {
            prop("CPUQuotaPeriodUSec", Value::U64(period));
        }
        if quota != 0 || period != 0 {
            let mut per_sec = u64::MAX;
            if quota > 0 {
                let period = if period == 0 { DEFAULT_PERIOD } else { period };
                per_sec = (quota as u64).saturating_mul(1_000_000) / period;
                if per_sec % 10_000 != 0 {
                    per_sec = (per_sec / 10_000 + 1) * 10_000;
                }
            }
            prop("CPUQuotaPerSecUSec", Value::U64(per_sec));
        }
    }
    if let Some(p) = r.pids.filter(|p| *p > 0 || *p == -1) {
        prop("TasksMax", Value::U64(p as u64));
    }
    props
}

/// The properties of `StartTransientUnit` for a slice (libcontainer's `Apply(-1)`).
pub fn start_properties(unit: &str, v2: bool) -> Vec<(String, Value)> {
    let b = |v| Value::Bool(v);
    vec![
        (
            "Description".into(),
            Value::Str(format!("libcontainer container {unit}")),
        ),
        (
            "Wants".into(),
            Value::Array(vec![Value::Str(parent_slice(unit))]),
        ),
        ("MemoryAccounting".into(), b(true)),
        ("CPUAccounting".into(), b(true)),
        (
            if v2 {
                "IOAccounting"
            } else {
                "BlockIOAccounting"
            }
            .into(),
            b(true),
        ),
        ("TasksAccounting".into(), b(true)),
        ("DefaultDependencies".into(), b(false)),
    ]
}

/// The parent of a slice: `a-b-c.slice` -> `a-b.slice`, `a.slice` -> `-.slice`.
pub fn parent_slice(unit: &str) -> String {
    match unit.trim_end_matches(".slice").rsplit_once('-') {
        Some((parent, _)) if !parent.is_empty() => format!("{parent}.slice"),
        _ => "-.slice".into(),
    }
}

/// The slice unit of a cgroup name in either driver's form (the kubelet's `ToSystemd` of the
/// name `ParseCgroupfsToCgroupName` / `ParseSystemdToCgroupName` gives): the last component
/// when it is a slice (`/kubepods.slice/kubepods-burstable.slice` -> `kubepods-burstable.slice`),
/// else the components joined with `-`, each `-` escaped to `_` (`/kube/reserved` ->
/// `kube-reserved.slice`).
pub fn slice_unit(cgroup: &str) -> String {
    let parts: Vec<&str> = cgroup.split('/').filter(|p| !p.is_empty()).collect();
    match parts.last() {
        None => "-.slice".into(),
        Some(last) if last.ends_with(".slice") => (*last).to_string(),
        Some(_) => {
            let escaped: Vec<String> = parts.iter().map(|p| p.replace('-', "_")).collect();
            format!("{}.slice", escaped.join("-"))
        }
    }
}

fn props_value(props: Vec<(String, Value)>) -> Value {
    Value::Array(
        props
            .into_iter()
            .map(|(k, v)| Value::Struct(vec![Value::Str(k), Value::Variant(Box::new(v))]))
            .collect(),
    )
}

/// One connection to systemd, opened on first use and again after a failure.
pub struct Manager {
    conn: Mutex<Option<(Connection, u32)>>,
    /// cgroup v2 (unified): `CPUWeight`/`MemoryMax` instead of `CPUShares`/`MemoryLimit`.
    v2: bool,
    /// The cgroup mount, where the values are written again after systemd's.
    root: PathBuf,
    bus_address: String,
    private_address: String,
}

impl std::fmt::Debug for Manager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Manager")
            .field("v2", &self.v2)
            .field("bus_address", &self.bus_address)
            .finish_non_exhaustive()
    }
}

impl Manager {
    /// On the system bus (`$DBUS_SYSTEM_BUS_ADDRESS` or the well-known socket), else the
    /// private socket; cgroup v1 or v2 from the cgroup mount `root`.
    pub fn new(root: &Path) -> Manager {
        Manager {
            conn: Mutex::new(None),
            v2: root.join("cgroup.controllers").exists(),
            root: root.to_path_buf(),
            bus_address: crate::nodeshutdown::dbus::system_bus_address(),
            private_address: PRIVATE_SOCKET.into(),
        }
    }

    fn connect(&self) -> Result<(Connection, u32), SystemdError> {
        let mut conn = match Connection::connect(&self.bus_address) {
            Ok(c) => c,
            Err(bus) => Connection::connect_direct(&self.private_address).map_err(|private| {
                SystemdError::Connect {
                    bus: Box::new(bus),
                    private: Box::new(private),
                }
            })?,
        };
        let version = conn
            .call(
                &systemd_call(
                    "org.freedesktop.DBus.Properties",
                    "Get",
                    &[Value::Str(MANAGER.into()), Value::Str("Version".into())],
                ),
                CALL_TIMEOUT,
            )
            .ok()
            .and_then(|m| match m.body.first() {
                Some(Value::Variant(v)) => match v.as_ref() {
                    Value::Str(s) => version_number(s),
                    _ => None,
                },
                _ => None,
            })
            .unwrap_or(0);
        // The job signals: Subscribe, and on a bus the match rule for them.
        let _ = conn.call(
            &Call {
                destination: Some(SYSTEMD),
                path: SYSTEMD_PATH,
                interface: MANAGER,
                member: "Subscribe",
                args: &[],
            },
            CALL_TIMEOUT,
        );
        if !conn.unique_name.is_empty() {
            let _ = conn.call(
                &Call {
                    destination: Some("org.freedesktop.DBus"),
                    path: "/org/freedesktop/DBus",
                    interface: "org.freedesktop.DBus",
                    member: "AddMatch",
                    args: &[Value::Str(format!(
                        "type='signal',sender='{SYSTEMD}',interface='{MANAGER}',member='JobRemoved'"
                    ))],
                },
                CALL_TIMEOUT,
            );
        }
        info!(
            version,
            v2 = self.v2,
            "connected to systemd for the cgroup slices"
        );
        Ok((conn, version))
    }

    /// The kubelet's `Create` (and `Update`: a slice that exists keeps its unit and gets the
    /// values): the slice as a transient unit, then `SetUnitProperties`.
    pub fn ensure(&self, unit: &str, r: &SliceResources) -> Result<(), SystemdError> {
        self.with(unit, |conn, version| {
            start(conn, unit, self.v2)?;
            set(conn, unit, &resource_properties(r, self.v2, version))
        })?;
        // libcontainer's Set writes the files too after SetUnitProperties: the exact CFS
        // quota where systemd rounded it up to 10 ms per second.
        slice_files(&self.root, unit, r);
        Ok(())
    }

    /// The kubelet's `Destroy` of a pod's slice: `StopUnit(name, "replace")`, then
    /// `ResetFailedUnit`; a unit systemd does not know is gone already.
    pub fn stop(&self, unit: &str) -> Result<(), SystemdError> {
        self.with(unit, |conn, _| {
            let args = [Value::Str(unit.into()), Value::Str("replace".into())];
            let stop = conn.call(&systemd_call(MANAGER, "StopUnit", &args), CALL_TIMEOUT);
            match stop {
                Ok(reply) => {
                    if let Some(Value::Path(job)) = reply.body.first() {
                        wait_job(conn, unit, job)?;
                    }
                }
                Err(DbusError::Remote { name, .. })
                    if name == "org.freedesktop.systemd1.NoSuchUnit" =>
                {
                    return Ok(());
                }
                Err(source) => {
                    return Err(SystemdError::Call {
                        unit: unit.into(),
                        source,
                    });
                }
            }
            let _ = conn.call(
                &systemd_call(MANAGER, "ResetFailedUnit", &args[..1]),
                CALL_TIMEOUT,
            );
            Ok(())
        })
    }

    /// Runs `f` on the connection; after a connection failure once more on a new one.
    fn with<T>(
        &self,
        unit: &str,
        f: impl Fn(&mut Connection, u32) -> Result<T, SystemdError>,
    ) -> Result<T, SystemdError> {
        let mut guard = match self.conn.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        for attempt in 0..2 {
            if guard.is_none() {
                *guard = Some(self.connect()?);
            }
            let Some((conn, version)) = guard.as_mut() else {
                continue;
            };
            match f(conn, *version) {
                Err(SystemdError::Call {
                    source: DbusError::Io(_) | DbusError::Closed,
                    ..
                }) if attempt == 0 => {
                    debug!(unit, "systemd connection lost; reconnecting");
                    *guard = None;
                }
                other => return other,
            }
        }
        Err(SystemdError::Call {
            unit: unit.into(),
            source: DbusError::Closed,
        })
    }
}

/// Writes `r` into the slice's cgroup files under `root` (v1: each controller's hierarchy; v2:
/// the unified tree), as libcontainer's fs managers do after `SetUnitProperties`.
pub fn slice_files(root: &Path, unit: &str, r: &SliceResources) -> Vec<PathBuf> {
    let v2 = root.join("cgroup.controllers").exists();
    let mut files: Vec<(&str, &str, String)> = vec![];
    if let Some(s) = r.cpu_shares {
        let cpu = if v2 { super::shares_to_weight(s) } else { s };
        files.push(("cpu.shares", "cpu.weight", cpu.to_string()));
    }
    if let Some((quota, period)) = r.cpu_quota {
        if v2 {
            let q = if quota > 0 {
                quota.to_string()
            } else {
                "max".into()
            };
            files.push(("", "cpu.max", format!("{q} {period}")));
        } else {
            files.push(("cpu.cfs_period_us", "", period.to_string()));
            files.push(("cpu.cfs_quota_us", "", quota.to_string()));
        }
    }
    if let Some(m) = r.memory.filter(|m| *m != 0) {
        files.push(("memory.limit_in_bytes", "memory.max", m.to_string()));
    }
    if let Some(p) = r.pids.filter(|p| *p > 0 || *p == -1) {
        let v = if p == -1 { "max".into() } else { p.to_string() };
        files.push(("pids.max", "pids.max", v));
    }
    let rel = super::systemd_slice_path(unit);
    super::write_cgroup(root, &rel.to_string_lossy(), &files)
}

/// A call to systemd's manager object.
fn systemd_call<'a>(interface: &'a str, member: &'a str, args: &'a [Value]) -> Call<'a> {
    Call {
        destination: Some(SYSTEMD),
        path: SYSTEMD_PATH,
        interface,
        member,
        args,
    }
}

/// `StartTransientUnit` for a slice; `UnitExists` is success (the kubelet ensures slices).
fn start(conn: &mut Connection, unit: &str, v2: bool) -> Result<(), SystemdError> {
    let reply = conn.call(
        &Call {
            destination: Some(SYSTEMD),
            path: SYSTEMD_PATH,
            interface: MANAGER,
            member: "StartTransientUnit",
            args: &[
                Value::Str(unit.into()),
                Value::Str("replace".into()),
                props_value(start_properties(unit, v2)),
                Value::EmptyArray("(sa(sv))".into()),
            ],
        },
        CALL_TIMEOUT,
    );
    let job = match reply {
        Ok(m) => match m.body.into_iter().next() {
            Some(Value::Path(job)) => job,
            _ => return Ok(()),
        },
        Err(DbusError::Remote { name, .. }) if name == "org.freedesktop.systemd1.UnitExists" => {
            return Ok(());
        }
        Err(source) => {
            return Err(SystemdError::Call {
                unit: unit.into(),
                source,
            });
        }
    };
    wait_job(conn, unit, &job)?;
    debug!(unit, "created the slice");
    Ok(())
}

/// Waits for systemd's `JobRemoved(u id, o job, s unit, s result)` of `job`; `done` is success.
fn wait_job(conn: &mut Connection, unit: &str, job: &str) -> Result<(), SystemdError> {
    let deadline = Instant::now() + JOB_TIMEOUT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(SystemdError::JobTimeout {
                unit: unit.into(),
                job: job.into(),
            });
        }
        let signal = conn
            .next_signal(left)
            .map_err(|source| SystemdError::Call {
                unit: unit.into(),
                source,
            })?;
        let Some(m) = signal else { continue };
        if m.member != "JobRemoved" {
            continue;
        }
        if let (Some(Value::Path(p)), Some(Value::Str(result))) = (m.body.get(1), m.body.get(3)) {
            if p == job {
                if result == "done" {
                    return Ok(());
                }
                return Err(SystemdError::Job {
                    unit: unit.into(),
                    result: result.clone(),
                });
            }
        }
    }
}

/// `SetUnitProperties(name, runtime=true, props)`.
fn set(conn: &mut Connection, unit: &str, props: &[(String, Value)]) -> Result<(), SystemdError> {
    if props.is_empty() {
        return Ok(());
    }
    conn.call(
        &Call {
            destination: Some(SYSTEMD),
            path: SYSTEMD_PATH,
            interface: MANAGER,
            member: "SetUnitProperties",
            args: &[
                Value::Str(unit.into()),
                Value::Bool(true),
                props_value(props.to_vec()),
            ],
        },
        CALL_TIMEOUT,
    )
    .map_err(|source| SystemdError::Call {
        unit: unit.into(),
        source,
    })?;
    Ok(())
}

/// The number at the start of systemd's `Version` (`252.38-1~deb12u1` -> 252, `v245` -> 245).
fn version_number(s: &str) -> Option<u32> {
    let digits: String = s
        .trim_start_matches(['"', 'v'])
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// libcontainer's property names and conversions: v1 CPUShares/MemoryLimit, v2
    /// CPUWeight/MemoryMax; the quota per second rounded up to 10 ms; the period only from
    /// systemd 242; TasksMax -1 = infinity.
    #[test]
    fn properties_are_libcontainers() {
        let r = SliceResources {
            cpu_shares: Some(1024),
            cpu_quota: Some((12_345, 100_000)),
            memory: Some(64 << 20),
            pids: Some(100),
        };
        let names = |p: &[(String, Value)]| p.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>();
        let v1 = resource_properties(&r, false, 252);
        assert_eq!(
            names(&v1),
            [
                "MemoryLimit",
                "CPUShares",
                "CPUQuotaPeriodUSec",
                "CPUQuotaPerSecUSec",
                "TasksMax"
            ]
        );
        assert_eq!(v1[3].1, Value::U64(130_000), "123450 µs/s rounded up");
        let v2 = resource_properties(&r, true, 241);
        assert_eq!(
            names(&v2),
            ["MemoryMax", "CPUWeight", "CPUQuotaPerSecUSec", "TasksMax"]
        );
        assert_eq!(v2[1].1, Value::U64(39));
        let unlimited = SliceResources {
            cpu_quota: Some((-1, 100_000)),
            pids: Some(-1),
            ..Default::default()
        };
        let p = resource_properties(&unlimited, false, 252);
        assert_eq!(p[1], ("CPUQuotaPerSecUSec".into(), Value::U64(u64::MAX)));
        assert_eq!(p[2], ("TasksMax".into(), Value::U64(u64::MAX)));
        assert!(resource_properties(&SliceResources::default(), false, 252).is_empty());
        assert_eq!(version_number("252.38-1~deb12u1"), Some(252));
        assert_eq!(version_number("\"v245.4-1.fc32\""), Some(245));
    }

    /// After SetUnitProperties the files get the exact values (libcontainer's fs Set): the
    /// CFS quota systemd rounded, on v1 in each hierarchy, on v2 as cpu.max.
    #[test]
    fn slice_files_carry_the_exact_values_on_v1_and_v2() {
        let r = SliceResources {
            cpu_shares: Some(1024),
            cpu_quota: Some((50_500, 100_000)),
            memory: Some(64 << 20),
            pids: Some(64),
        };
        let unit = "kubepods-burstable-pod1_2.slice";
        let dir = "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1_2.slice";
        let read = |root: &Path, p: &str| std::fs::read_to_string(root.join(p)).unwrap();
        let v1 = tempfile::tempdir().unwrap();
        for c in ["cpu", "memory", "pids"] {
            std::fs::create_dir_all(v1.path().join(c)).unwrap();
        }
        slice_files(v1.path(), unit, &r);
        assert_eq!(
            read(v1.path(), &format!("cpu/{dir}/cpu.cfs_quota_us")),
            "50500"
        );
        assert_eq!(read(v1.path(), &format!("cpu/{dir}/cpu.shares")), "1024");
        assert_eq!(read(v1.path(), &format!("pids/{dir}/pids.max")), "64");
        let v2 = tempfile::tempdir().unwrap();
        std::fs::write(v2.path().join("cgroup.controllers"), "cpu memory pids").unwrap();
        slice_files(v2.path(), unit, &r);
        assert_eq!(read(v2.path(), &format!("{dir}/cpu.max")), "50500 100000");
        assert_eq!(read(v2.path(), &format!("{dir}/cpu.weight")), "39");
        assert_eq!(
            read(v2.path(), &format!("{dir}/memory.max")),
            (64u64 << 20).to_string()
        );
    }

    #[test]
    fn slice_names_and_parents() {
        assert_eq!(
            parent_slice("kubepods-burstable-pod1_2.slice"),
            "kubepods-burstable.slice"
        );
        assert_eq!(parent_slice("kubepods.slice"), "-.slice");
        assert_eq!(
            slice_unit("/kubepods.slice/kubepods-besteffort.slice"),
            "kubepods-besteffort.slice"
        );
        assert_eq!(slice_unit("/system.slice"), "system.slice");
        assert_eq!(slice_unit("/kube-x/reserved"), "kube_x-reserved.slice");
        let p = start_properties("kubepods.slice", false);
        assert_eq!(p[1].1, Value::Array(vec![Value::Str("-.slice".into())]));
        assert_eq!(p[4], ("BlockIOAccounting".into(), Value::Bool(true)));
    }
}
