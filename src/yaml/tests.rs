//! The differential corpus: each input with the value the kubelet's decoder produces for it,
//! derived from the rules of go-yaml v2 (`resolve.go`: `resolveMapList`, `yamlStyleFloat`,
//! `strconv.ParseInt(plain, 0, 64)` after removing `_`; `decode.go`: `merge`, aliases,
//! `allowedAliasRatio`), sigs.k8s.io/yaml (`convertToJSONableObject`: key strings,
//! `FormatFloat(f, 'g', -1, 32)`) and `encoding/json` (float64 output, null = zero value).

use serde_json::{Value, json};

use super::*;

fn j(yaml: &str) -> Value {
    match to_json(yaml) {
        Ok(d) => d.value,
        Err(e) => panic!("{yaml:?}: {e}"),
    }
}

/// `key: <scalar>` -> the JSON value of `key`.
fn scalar(s: &str) -> Value {
    let v = yaml_to_json(&format!("k: {s}\n")).unwrap_or_else(|e| panic!("{s:?}: {e}"));
    v.value["k"].clone()
}

#[test]
fn yaml_1_1_booleans_are_go_yaml_v2_resolve_map_list() {
    // resolveMapList: y Y yes Yes YES true True TRUE on On ON / n N no No NO false ... off ...
    for t in [
        "y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON",
    ] {
        assert_eq!(scalar(t), json!(true), "{t}");
    }
    for f in [
        "n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF",
    ] {
        assert_eq!(scalar(f), json!(false), "{f}");
    }
    // Not in the table: strings.
    for s in ["tRUE", "yES", "oN", "Nope", "yess"] {
        assert_eq!(scalar(s), json!(s), "{s}");
    }
    // Quoted: always strings (only plain scalars are resolved).
    assert_eq!(scalar("\"yes\""), json!("yes"));
    assert_eq!(scalar("'on'"), json!("on"));
}

#[test]
fn nulls_are_empty_tilde_and_null_spellings() {
    for n in ["", "~", "null", "Null", "NULL"] {
        assert_eq!(scalar(n), Value::Null, "{n:?}");
    }
    assert_eq!(scalar("nULL"), json!("nULL"));
    assert_eq!(scalar("'~'"), json!("~"));
}

#[test]
fn integers_are_go_parse_int_base_0_after_removing_underscores() {
    let cases: &[(&str, Value)] = &[
        ("0400", json!(256)), // leading 0: octal (defaultMode: 0400)
        ("0644", json!(420)),
        ("0755", json!(493)),
        ("0o17", json!(15)), // Go 1.13 0o prefix
        ("0O17", json!(15)),
        ("0x1F", json!(31)),
        ("0X1f", json!(31)),
        ("0b101", json!(5)),
        ("-0x10", json!(-16)),
        ("+42", json!(42)),
        ("1_000", json!(1000)), // underscores removed first
        ("0x_ff", json!(255)),
        ("0", json!(0)),
        ("-0", json!(0)),
        ("9223372036854775807", json!(9223372036854775807i64)),
        ("-9223372036854775808", json!(-9223372036854775808i64)),
        ("18446744073709551615", json!(18446744073709551615u64)), // ParseUint
    ];
    for (s, want) in cases {
        assert_eq!(&scalar(s), want, "{s}");
    }
}

#[test]
fn not_integers_fall_to_yaml_style_float_or_string() {
    // `08` is not octal: ParseInt fails, yamlStyleFloat matches, ParseFloat gives 8.
    assert_eq!(scalar("08"), json!(8));
    assert_eq!(scalar("09.5"), json!(9.5));
    assert_eq!(scalar("1e3"), json!(1000)); // float64 1000 marshals as 1000
    assert_eq!(scalar("1.0"), json!(1));
    assert_eq!(scalar("1.5"), json!(1.5));
    assert_eq!(scalar("-2.5e-3"), json!(-0.0025));
    assert_eq!(scalar(".5"), json!(0.5));
    assert_eq!(scalar("1."), json!(1));
    assert_eq!(
        scalar("+18446744073709551616"),
        json!(18446744073709551616.0f64)
    );
    // Not numbers: strings.
    for s in [
        "0x", "0b2", "1_0x", "1e", "1e3.5", "0x1p-2", "1,000", "12:30", "3.4.5", "-x", ".", "._5",
    ] {
        assert_eq!(scalar(s), json!(s), "{s}");
    }
    // Versions and images stay strings.
    assert_eq!(scalar("v1.2"), json!("v1.2"));
    assert_eq!(scalar("1.2.3"), json!("1.2.3"));
}

#[test]
fn special_floats_are_an_encoding_json_error() {
    for s in [".nan", ".inf", "-.inf", "+.INF", "1e400"] {
        let r = yaml_to_json(&format!("k: {s}\n"));
        if s == "1e400" {
            // Out of range: ParseFloat fails, so it is the string "1e400".
            assert_eq!(r.unwrap().value["k"], json!("1e400"));
        } else {
            assert!(
                matches!(r, Err(YamlError::UnsupportedNumber { .. })),
                "{s}: {r:?}"
            );
        }
    }
}

#[test]
fn timestamps_stay_strings() {
    for s in [
        "2024-01-02",
        "2001-12-14t21:59:43.10-05:00",
        "2001-12-14 21:59:43.10",
    ] {
        assert_eq!(scalar(s), json!(s), "{s}");
    }
}

#[test]
fn explicit_tags_force_or_fail() {
    assert_eq!(scalar("!!str 0400"), json!("0400"));
    assert_eq!(scalar("!!str yes"), json!("yes"));
    assert_eq!(scalar("!!int \"0400\""), json!(256));
    assert_eq!(scalar("!!float 1"), json!(1));
    assert_eq!(scalar("!!bool \"on\""), json!(true));
    assert_eq!(scalar("!!binary aGVsbG8="), json!("hello"));
    assert_eq!(scalar("!custom 12"), json!("12"));
    assert_eq!(scalar("! 12"), json!(12)); // the non-specific tag: resolved as plain
    let e = yaml_to_json("k: !!int abc\n").unwrap_err();
    assert_eq!(
        e.to_string(),
        "line 1: cannot decode !!str `abc` as a !!int"
    );
    assert!(yaml_to_json("k: !!bool 1\n").is_err());
}

#[test]
fn block_scalars_are_strings() {
    assert_eq!(j("k: |\n  yes\n"), json!({"k": "yes\n"}));
    assert_eq!(j("k: >-\n  0400\n"), json!({"k": "0400"}));
}

#[test]
fn keys_become_strings_as_sigs_k8s_io_yaml_writes_them() {
    let v = j("m:\n  on: a\n  no: b\n  1: c\n  0x10: d\n  1.5: e\n  1000000.0: f\n  ~x: g\n");
    assert_eq!(
        v["m"],
        json!({"true": "a", "false": "b", "1": "c", "16": "d", "1.5": "e", "1e+06": "f", "~x": "g"})
    );
    assert!(matches!(
        yaml_to_json("~: a\n"),
        Err(YamlError::InvalidKey { .. })
    ));
    assert!(matches!(
        yaml_to_json("? [a]\n: b\n"),
        Err(YamlError::InvalidKey { .. })
    ));
}

#[test]
fn float32_g_format_matches_go() {
    for (f, want) in [
        (1.5, "1.5"),
        (0.1, "0.1"),
        (100.0, "100"),
        (123456.0, "123456"),
        (1234567.0, "1.234567e+06"),
        (0.0001, "0.0001"),
        (0.00001, "1e-05"),
        (-2.5, "-2.5"),
        (3.0e38, "3e+38"),
    ] {
        assert_eq!(go_format_float32_g(f), want, "{f}");
    }
}

#[test]
fn merge_keys_apply_in_document_order() {
    let y = "base: &b\n  image: busybox\n  name: x\nc:\n  <<: *b\n  name: app\n";
    assert_eq!(j(y)["c"], json!({"image": "busybox", "name": "app"}));
    // A key written before the merge is overwritten by it (go-yaml v2's map decoding).
    let y = "base: &b\n  name: x\nc:\n  name: app\n  <<: *b\n";
    assert_eq!(j(y)["c"], json!({"name": "x"}));
    // A list of maps: the earlier one wins.
    let y = "a: &a {x: 1}\nb: &b {x: 2, z: 2}\nc:\n  <<: [*a, *b]\n";
    assert_eq!(j(y)["c"], json!({"x": 1, "z": 2}));
    // An inline map. (The key `y` is the boolean true in YAML 1.1, so its JSON key is "true".)
    assert_eq!(
        j("c:\n  <<: {x: 1}\n  y: 2\n")["c"],
        json!({"x": 1, "true": 2})
    );
    // A quoted "<<" is an ordinary key.
    assert_eq!(j("c:\n  '<<': {x: 1}\n")["c"], json!({"<<": {"x": 1}}));
    assert!(matches!(
        yaml_to_json("a: &a 1\nc:\n  <<: *a\n"),
        Err(YamlError::MergeNotMap { .. })
    ));
}

#[test]
fn anchors_and_aliases_copy_values() {
    let y = "env: &e\n- name: A\n  value: \"1\"\nother: *e\nmode: &m 0400\nm2: *m\n";
    let v = j(y);
    assert_eq!(v["other"], v["env"]);
    assert_eq!(v["m2"], json!(256));
}

#[test]
fn alias_bombs_are_excessive_aliasing() {
    // The billion laughs: each level doubles 10 times.
    let mut y = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..9 {
        let prev = format!("*a{}", i - 1);
        let items = [prev.as_str(); 10].join(", ");
        y.push_str(&format!("a{i}: &a{i} [{items}]\n"));
    }
    assert_eq!(yaml_to_json(&y).unwrap_err(), YamlError::ExcessiveAliasing);
    // Moderate reuse is fine.
    assert!(yaml_to_json("a: &a [1, 2]\nb: [*a, *a, *a]\n").is_ok());
}

#[test]
fn recursion_and_depth_are_bounded() {
    assert!(yaml_to_json("a: &a [*a]\n").is_err());
    let deep = format!(
        "{}1{}",
        "[".repeat(MAX_DEPTH + 5),
        "]".repeat(MAX_DEPTH + 5)
    );
    assert!(matches!(
        yaml_to_json(&deep),
        Err(YamlError::TooDeep { .. })
    ));
}

#[test]
fn only_the_first_document_is_read() {
    let d = yaml_to_json("a: 1\n---\nb: 2\n---\nc: 3\n").unwrap();
    assert_eq!(d.value, json!({"a": 1}));
    assert_eq!(d.more_documents, 2);
    // A lone trailing `---`, and a leading one, are no further documents.
    let d = yaml_to_json("---\na: 1\n---\n").unwrap();
    assert_eq!((d.value, d.more_documents), (json!({"a": 1}), 0));
    let d = yaml_to_json("a: 1\n...\n").unwrap();
    assert_eq!((d.value, d.more_documents), (json!({"a": 1}), 0));
    // An empty first document is null, whatever follows (the kubelet then has no kind).
    let d = yaml_to_json("---\n---\na: 1\n").unwrap();
    assert_eq!((d.value, d.more_documents), (Value::Null, 1));
    // A syntax error in a later document is never seen by go-yaml.
    let d = yaml_to_json("a: 1\n---\n[unclosed\n").unwrap();
    assert_eq!((d.value, d.more_documents), (json!({"a": 1}), 1));
    assert_eq!(
        yaml_to_json("# only a comment\n").unwrap().value,
        Value::Null
    );
}

#[test]
fn a_byte_order_mark_is_skipped() {
    assert_eq!(j("\u{FEFF}a: 1\n"), json!({"a": 1}));
    assert_eq!(j("\u{FEFF}{\"a\": 1}"), json!({"a": 1}));
}

#[test]
fn json_text_is_decoded_as_json() {
    // ToJSON: a leading `{` means JSON, passed through (so 0400 would be a JSON syntax error).
    assert_eq!(
        j("  {\"a\": \"yes\", \"b\": 1}"),
        json!({"a": "yes", "b": 1})
    );
    assert!(to_json("{\"a\": 0400}").is_err());
}

#[test]
fn nulls_are_go_zero_values() {
    let y = "metadata:\n  name: x\n  labels:\n  annotations: ~\nspec:\n  containers:\n  - name: c\n    args: ~\n    env: null\n    command: [sh, null]\n  volumes: null\n  nodeSelector: {a: }\n";
    let v = j(y);
    // Struct fields set to null are absent.
    assert_eq!(v["metadata"], json!({"name": "x"}));
    assert_eq!(
        v["spec"]["containers"][0],
        json!({"name": "c", "command": ["sh", ""]})
    );
    assert!(v["spec"].get("volumes").is_none());
    // A null value in a string map is the empty string.
    assert_eq!(v["spec"]["nodeSelector"], json!({"a": ""}));
    // JSON null too.
    let v = j(
        "{\"metadata\": {\"name\": \"x\", \"labels\": null}, \"spec\": {\"resources\": {\"limits\": {\"cpu\": null}}}}",
    );
    assert_eq!(
        v,
        json!({"metadata": {"name": "x"}, "spec": {"resources": {"limits": {"cpu": "0"}}}})
    );
}

#[test]
fn syntax_errors_name_the_line() {
    let e = yaml_to_json("a: 1\nb: [1, 2\n").unwrap_err();
    assert!(matches!(e, YamlError::Syntax { line: 2..=3, .. }), "{e}");
    let e = yaml_to_json("a: *nope\n").unwrap_err();
    assert!(e.to_string().contains("anchor"), "{e}");
}

#[test]
fn written_yaml_reads_back_the_same_under_yaml_1_1() {
    let v = json!({
        "strings": ["yes", "no", "on", "off", "y", "n", "~", "null", "", "0400", "0x1F", "1e3",
                    "08", "1_000", ".5", ".inf", "2024-01-02", "12:30", "<<", "- a", "a: b",
                    "#x", "x #y", " lead", "trail ", "multi\nline", "tab\there", "plain", "v1.2", "1.2.3"],
        "numbers": [0, -1, 256, 1.5],
        "bools": [true, false],
        "nested": {"on": {"list": [{"a": 1, "b": [1, [2, 3]]}, []], "empty": {}}},
        "null": null
    });
    let text = to_yaml_string(&v);
    assert_eq!(yaml_to_json(&text).unwrap().value, v, "{text}");
    // The strings a YAML 1.1 reader would misread are quoted; ordinary ones are not.
    assert!(
        text.contains("- \"yes\"") && text.contains("- \"0400\"") && text.contains("- plain"),
        "{text}"
    );
}
