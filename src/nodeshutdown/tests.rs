use std::sync::Mutex;

use super::*;

fn pod(name: &str, priority: Option<i32>, grace: Option<i64>) -> Arc<Pod> {
    let mut p = Pod::default();
    p.metadata.name = name.into();
    p.metadata.namespace = "default".into();
    p.metadata.uid = format!("uid-{name}");
    p.spec.priority = priority;
    p.spec.termination_grace_period_seconds = grace;
    Arc::new(p)
}

fn g(priority: i64, secs: i64) -> GracePeriodByPriority {
    GracePeriodByPriority {
        priority,
        shutdown_grace_period_seconds: secs,
    }
}

/// nodeshutdown_manager_linux.go `migrateConfig`: shutdownGracePeriod=30s with
/// shutdownGracePeriodCriticalPods=10s is 20 s for every pod, then 10 s for critical ones.
#[test]
fn two_periods_become_a_default_and_a_critical_group() {
    let groups = migrate_config(Duration::from_secs(30), Duration::from_secs(10));
    assert_eq!(groups, vec![g(0, 20), g(2_000_000_000, 10)]);
    assert_eq!(period_requested(&groups), Duration::from_secs(30));
    // Off when the period is zero, or when critical pods would get more than the whole.
    assert!(migrate_config(Duration::ZERO, Duration::ZERO).is_empty());
    assert!(migrate_config(Duration::from_secs(5), Duration::from_secs(6)).is_empty());
}

/// `groupByPriority`: a pod goes to the highest group at or below its priority; pods below
/// the lowest group go to the lowest, above the highest to the highest.
#[test]
fn pods_go_to_the_highest_group_at_or_below_their_priority() {
    let groups = vec![g(-10, 1), g(100, 2), g(1000, 3)];
    let pods = vec![
        pod("lowest", Some(-100), None),
        pod("none", None, None),
        pod("at-100", Some(100), None),
        pod("between", Some(999), None),
        pod("top", Some(5000), None),
    ];
    let grouped = group_by_priority(&groups, &pods);
    let names: Vec<Vec<&str>> = grouped
        .iter()
        .map(|(_, ps)| ps.iter().map(|p| p.metadata.name.as_str()).collect())
        .collect();
    assert_eq!(
        names,
        vec![
            vec!["lowest", "none"],
            vec!["at-100", "between"],
            vec!["top"]
        ]
    );
    // priorityClassName system-node-critical counts as 2000001000 (critical group).
    let mut critical = Pod::default();
    critical.spec.priority_class_name = "system-node-critical".into();
    let pods = vec![Arc::new(critical)];
    let grouped = group_by_priority(
        &migrate_config(Duration::from_secs(3), Duration::from_secs(1)),
        &pods,
    );
    assert_eq!(grouped[1].1.len(), 1);
}

/// The pod's terminationGracePeriodSeconds wins only when it is at most the group's.
#[test]
fn grace_is_capped_at_the_groups_period() {
    let group = g(0, 20);
    assert_eq!(grace_for(&pod("long", None, Some(30)), &group), 20);
    assert_eq!(grace_for(&pod("short", None, Some(5)), &group), 5);
    assert_eq!(grace_for(&pod("default", None, None), &group), 20);
}

#[test]
fn settings_that_contradict_each_other_are_refused() {
    let mut c = ShutdownConfig {
        grace_period: Duration::from_secs(10),
        grace_period_critical_pods: Duration::from_secs(20),
        ..Default::default()
    };
    assert!(
        c.validate()
            .unwrap_err()
            .contains("must be <= shutdownGracePeriod")
    );
    c.grace_period_critical_pods = Duration::ZERO;
    c.by_pod_priority = vec![g(0, 10)];
    assert!(c.validate().unwrap_err().contains("cannot both be set"));
    c.grace_period = Duration::ZERO;
    assert_eq!(c.validate(), Ok(()));
    assert_eq!(c.groups(), vec![g(0, 10)]);
}

/// A terminator that records the order and stops pods after a per-pod delay (or never).
struct Fake {
    pods: Vec<Arc<Pod>>,
    log: Mutex<Vec<(String, i64, Instant)>>,
    stop_after: fn(&str) -> Option<Duration>,
}

impl PodTerminator for Fake {
    fn active_pods(&self) -> Vec<Arc<Pod>> {
        self.pods.clone()
    }
    fn set_shutting_down(&self, _: bool) {}
    fn terminate(&self, pod: &Pod, grace_seconds: i64) {
        self.log
            .lock()
            .unwrap()
            .push((pod.metadata.name.clone(), grace_seconds, Instant::now()));
    }
    fn running(&self) -> std::collections::HashSet<String> {
        let log = self.log.lock().unwrap();
        self.pods
            .iter()
            .filter(|p| {
                let name = p.metadata.name.as_str();
                match log.iter().find(|(n, _, _)| n == name) {
                    Some((_, _, at)) => (self.stop_after)(name).is_none_or(|d| at.elapsed() < d),
                    None => true,
                }
            })
            .map(|p| p.metadata.uid.clone())
            .collect()
    }
}

/// `processShutdownEvent`: groups run lowest priority first; the next group starts as soon
/// as the previous one's pods stopped, or when its grace period is over if they did not.
#[test]
fn groups_are_killed_lowest_first_and_a_hung_group_waits_only_its_period() {
    let fake = Fake {
        pods: vec![
            pod("critical", Some(2_000_000_000), Some(30)),
            pod("hung", None, Some(30)),
            pod("quick", None, Some(1)),
        ],
        log: Mutex::new(vec![]),
        stop_after: |name| match name {
            "hung" => None,
            _ => Some(Duration::from_millis(50)),
        },
    };
    let groups = migrate_config(Duration::from_secs(3), Duration::from_secs(2));
    let started = Instant::now();
    kill_pods_by_priority(&fake, &groups, Duration::from_millis(20));
    let elapsed = started.elapsed();
    let log = fake.log.lock().unwrap();
    let order: Vec<(&str, i64)> = log.iter().map(|(n, g, _)| (n.as_str(), *g)).collect();
    assert_eq!(order, vec![("hung", 1), ("quick", 1), ("critical", 2)]);
    // The default group (1 s) held the critical one back for its full period (hung pod),
    // then the critical group took ~50 ms.
    let critical_at = log[2].2.duration_since(started);
    assert!(critical_at >= Duration::from_secs(1), "{critical_at:?}");
    assert!(elapsed < Duration::from_millis(2500), "{elapsed:?}");
}
