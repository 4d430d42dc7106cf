use super::*;
use serde_json::json;

fn write(dir: &Path, file: &str, text: &str) {
    std::fs::write(dir.join(file), text).expect("write");
}

fn pod_with(extra: Value) -> Pod {
    let mut v = json!({"metadata": {"name": "p", "namespace": "default", "uid": "u"},
                        "spec": {"containers": [{"name": "c", "image": "i"}]}});
    if let (Some(spec), Some(more)) = (v["spec"].as_object_mut(), extra.as_object()) {
        for (k, x) in more {
            spec.insert(k.clone(), x.clone());
        }
    }
    serde_json::from_value(v).expect("pod")
}

/// ValidateRuntimeClass (pkg/apis/node/validation): the handler is a required DNS label, the
/// name a DNS subdomain, overhead quantities are >= 0; errors name the file and field path.
#[test]
fn invalid_runtime_classes_are_refused_with_file_field_and_reason() {
    let ok = json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                    "metadata": {"name": "kata"}, "handler": "kata-qemu",
                    "overhead": {"podFixed": {"cpu": "250m", "memory": "120Mi"}},
                    "scheduling": {"nodeSelector": {"kata": "yes"}}});
    let rc = parse(&ok, "rc.yaml").expect("valid");
    assert_eq!(rc.handler, "kata-qemu");
    assert_eq!(rc.overhead["cpu"], json!("250m"));
    assert_eq!(rc.node_selector["kata"], "yes");
    let field_of = |mut v: Value, path: &[&str], x: Value| {
        let mut cur = &mut v;
        for p in &path[..path.len() - 1] {
            cur = &mut cur[*p];
        }
        cur[path[path.len() - 1]] = x;
        match parse(&v, "rc.yaml") {
            Err(RuntimeClassError::Invalid {
                file,
                field,
                reason,
            }) => {
                assert_eq!(file, "rc.yaml");
                (field, reason)
            }
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(
        field_of(ok.clone(), &["handler"], Value::Null),
        ("handler".into(), "Required value".into())
    );
    let (f, r) = field_of(ok.clone(), &["handler"], json!("Kata_QEMU"));
    assert_eq!(f, "handler");
    assert!(r.contains("RFC 1123 label"), "{r}");
    let (f, r) = field_of(ok.clone(), &["overhead", "podFixed", "cpu"], json!("-1"));
    assert_eq!(f, "overhead.podFixed[cpu]");
    assert!(r.contains("greater than or equal to 0"), "{r}");
    let (f, _) = field_of(
        ok.clone(),
        &["overhead", "podFixed", "memory"],
        json!("lots"),
    );
    assert_eq!(f, "overhead.podFixed[memory]");
    let (f, _) = field_of(ok.clone(), &["metadata", "name"], json!("Kata"));
    assert_eq!(f, "metadata.name");
    let (f, _) = field_of(ok.clone(), &["apiVersion"], json!("node.k8s.io/v1beta1"));
    assert_eq!(f, "apiVersion");
    let (f, _) = field_of(ok, &["scheduling", "nodeSelector", "kata"], json!(1));
    assert_eq!(f, "scheduling.nodeSelector[kata]");
}

/// The kubelet's LookupRuntimeHandler: no class is the default handler (""); an unknown class
/// is the API's NotFound (`runtimeclass.node.k8s.io "x" not found`), never the default; a local
/// file wins over the API's object of the same name; invalid files are skipped.
#[test]
fn lookup_reads_the_directory_then_the_api_and_unknown_classes_are_not_found() {
    let d = tempfile::tempdir().expect("tmp");
    let dir = d.path().join("rc");
    std::fs::create_dir_all(&dir).expect("mkdir");
    write(
        &dir,
        "gvisor.yaml",
        "apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata:\n  name: gvisor\nhandler: runsc\n",
    );
    write(
        &dir,
        "broken.yaml",
        "apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata:\n  name: broken\n",
    );
    write(
        &dir,
        ".hidden.yaml",
        "apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata:\n  name: hidden\nhandler: h\n",
    );
    let classes = RuntimeClasses::new(Some(dir.clone()), false);
    assert_eq!(
        classes.lookup_handler(&pod_with(json!({}))).ok(),
        Some(String::new())
    );
    let gvisor = pod_with(json!({"runtimeClassName": "gvisor"}));
    assert_eq!(classes.lookup_handler(&gvisor).ok(), Some("runsc".into()));
    for missing in ["kata", "broken", "hidden"] {
        let e = classes
            .lookup_handler(&pod_with(json!({"runtimeClassName": missing})))
            .expect_err(missing);
        assert_eq!(
            e.to_string(),
            format!("runtimeclass.node.k8s.io \"{missing}\" not found")
        );
    }
    // Joined: the API's classes, watched (ADDED / MODIFIED / DELETED); the local file wins.
    let list = json!({"items": [
        {"metadata": {"name": "kata"}, "handler": "kata"},
        {"metadata": {"name": "gvisor"}, "handler": "gvisor-from-api"},
        {"metadata": {"name": "bad"}, "handler": "NOT A LABEL"}]});
    classes.set_api(reflect::from_list(&list));
    let kata = pod_with(json!({"runtimeClassName": "kata"}));
    assert_eq!(classes.lookup_handler(&kata).ok(), Some("kata".into()));
    assert_eq!(classes.lookup_handler(&gvisor).ok(), Some("runsc".into()));
    assert!(
        classes.get("bad").is_err(),
        "invalid API objects are skipped"
    );
    reflect::apply(
        &classes,
        "MODIFIED",
        &json!({"metadata": {"name": "kata"}, "handler": "kata-fc"}),
    );
    assert_eq!(classes.lookup_handler(&kata).ok(), Some("kata-fc".into()));
    reflect::apply(
        &classes,
        "DELETED",
        &json!({"metadata": {"name": "kata"}, "handler": "kata-fc"}),
    );
    assert!(matches!(
        classes.lookup_handler(&kata),
        Err(RuntimeClassError::NotFound { .. })
    ));
}

/// Issue 9's rule for every directory that shapes pods: one others can write is not read.
#[test]
fn a_directory_others_can_write_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let d = tempfile::tempdir().expect("tmp");
    let dir = d.path().join("rc");
    std::fs::create_dir_all(&dir).expect("mkdir");
    write(
        &dir,
        "k.yaml",
        "apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata:\n  name: k\nhandler: k\n",
    );
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let classes = RuntimeClasses::new(Some(dir.clone()), false);
    match classes.get("k") {
        Err(RuntimeClassError::Insecure(reason)) => {
            assert!(reason.contains("world-writable"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
    assert!(RuntimeClasses::new(Some(dir), true).get("k").is_ok());
}

/// A handler the runtime does not report (CRI Status runtime_handlers, containerd 2) is
/// refused; a runtime reporting none (containerd 1.6/1.7) is left to refuse it itself.
#[test]
fn handlers_the_runtime_does_not_report_are_refused() {
    let h = |n: &str| crate::cri::RuntimeHandler {
        name: n.into(),
        ..Default::default()
    };
    let reported = [h(""), h("runc")];
    assert!(check_handler("runc", "runc", &reported).is_ok());
    let e = check_handler("kata", "kata", &reported).expect_err("kata");
    assert_eq!(
        e.to_string(),
        "RuntimeClass \"kata\": the runtime has no handler \"kata\" (CRI status reports: \"\", \"runc\")"
    );
    assert!(check_handler("kata", "kata", &[]).is_ok());
}

/// The RuntimeClass admission plugin: setOverhead copies overhead.podFixed into a pod without
/// one; validateOverhead rejects a pod whose own overhead differs ("pod rejected: Pod's
/// Overhead doesn't match RuntimeClass's defined Overhead"); equal quantities pass.
#[test]
fn overhead_is_set_from_the_class_and_a_different_one_is_refused() {
    let rc = RuntimeClass {
        name: "kata".into(),
        handler: "kata".into(),
        overhead: [
            ("cpu".to_string(), json!("250m")),
            ("memory".to_string(), json!("128Mi")),
        ]
        .into_iter()
        .collect(),
        ..Default::default()
    };
    let plain = pod_with(json!({"runtimeClassName": "kata"}));
    let set = with_overhead(&plain, &rc).expect("ok").expect("changed");
    assert_eq!(
        set.spec.extra["overhead"],
        json!({"cpu": "250m", "memory": "128Mi"})
    );
    assert_eq!(crate::api::helpers::pod_overhead(&set), (250, 128 << 20));
    let same = pod_with(
        json!({"runtimeClassName": "kata", "overhead": {"cpu": "0.25", "memory": "128Mi"}}),
    );
    assert_eq!(with_overhead(&same, &rc), Ok(None));
    let other = pod_with(json!({"runtimeClassName": "kata", "overhead": {"cpu": "1"}}));
    assert_eq!(
        with_overhead(&other, &rc),
        Err("pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead".into())
    );
    let none = RuntimeClass::default();
    assert_eq!(with_overhead(&plain, &none), Ok(None));
    assert!(with_overhead(&other, &none).is_err());
}
