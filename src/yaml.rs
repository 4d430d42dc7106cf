//! YAML exactly as the kubelet reads it, as a JSON value.
//!
//! The kubelet turns a manifest into JSON with `k8s.io/apimachinery/pkg/util/yaml.ToJSON`:
//! text whose first non-space character is `{` is JSON already; anything else goes through
//! `sigs.k8s.io/yaml.YAMLToJSON`, which decodes the first YAML document with go-yaml v2 (YAML
//! 1.1 resolution) into Go `interface{}` values, turns map keys into strings, and marshals the
//! result with `encoding/json`. The JSON is then decoded into the typed object, where `null` is
//! the zero value. This module reproduces each of those steps from their rules (facts, not
//! code):
//!
//! - **Scalars** (go-yaml v2 `resolve.go`): only plain, untagged scalars are resolved. Booleans
//!   are `y Y yes Yes YES true True TRUE on On ON` and `n N no No NO false False FALSE off Off
//!   OFF`; null is `` (empty) `~ null Null NULL`; integers are Go's `strconv.ParseInt(s, 0, 64)`
//!   after removing every `_` (so `0400` is octal 256, `0x1F` 31, `0o17` 15, `0b101` 5, `08`
//!   not an integer), then `ParseUint`; floats match `^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`
//!   (so `08` is the float 8) or start with `.` (`.5`, `.inf`, `.nan`); anything else, and
//!   every quoted or block scalar, is a string. Timestamps stay strings (v2 keeps them as the
//!   original text in `interface{}`). Explicit core tags (`!!str`, `!!int`, `!!float`,
//!   `!!bool`, `!!null`, `!!binary`) force a type or fail ("cannot decode !!str `x` as a !!int").
//! - **Merge keys** (`<<: *base`, `<<: [*a, *b]`): entries apply in document order and each
//!   assignment overwrites, so a key written after the merge wins and one written before it
//!   loses; in a list of maps the earlier map wins.
//! - **Anchors and aliases**, with go-yaml's "excessive aliasing" rule against alias bombs.
//! - **Only the first document** of a stream is read; the rest is ignored (not even parsed by
//!   go-yaml). [`Decoded::more_documents`] counts the non-empty ones after it so the caller can
//!   say so.
//! - **Keys** become strings: `true`/`false` for booleans (`on:` is the key `"true"`), decimal
//!   for integers, Go's `FormatFloat(f, 'g', -1, 32)` for floats; a null key is an error.
//! - **Numbers** are written as `encoding/json` writes a float64 (`1.0` becomes `1`, so it fits
//!   an integer field); NaN and infinities are an error ("json: unsupported value").
//! - **null** ([`go_zero_nulls`]): a struct field set to null is the field's zero value, i.e.
//!   as if absent; a null value in a string map (labels, annotations, nodeSelector, ConfigMap
//!   data, ...) is the empty string; a null list element is the zero value of its siblings'
//!   type.

use std::collections::{HashMap, HashSet};

use saphyr_parser::{Event, Parser, ScalarStyle, ScanError, Tag};
use serde_json::{Map, Number, Value};

/// Deepest nesting of collections accepted (real manifests nest a few dozen levels).
pub const MAX_DEPTH: usize = 200;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum YamlError {
    #[error("line {line} column {column}: {message}")]
    Syntax {
        line: usize,
        column: usize,
        message: String,
    },
    #[error("line {line}: cannot decode {found} `{value}` as a {tag}")]
    TagMismatch {
        line: usize,
        value: String,
        found: &'static str,
        tag: String,
    },
    #[error("line {line}: invalid !!binary value: {reason}")]
    Binary {
        line: usize,
        reason: crate::util::base64::Base64Error,
    },
    #[error("line {line}: map merge requires map or sequence of maps as the value")]
    MergeNotMap { line: usize },
    #[error("line {line}: invalid map key: {reason}")]
    InvalidKey { line: usize, reason: String },
    #[error("line {line}: anchor value contains itself")]
    RecursiveAlias { line: usize },
    #[error("document contains excessive aliasing")]
    ExcessiveAliasing,
    #[error("line {line}: nesting deeper than {MAX_DEPTH} levels")]
    TooDeep { line: usize },
    #[error("line {line}: json: unsupported value: {value} (NaN and infinities have no JSON form)")]
    UnsupportedNumber { line: usize, value: String },
}

/// The JSON form of a YAML stream's first document.
#[derive(Debug, Clone, PartialEq)]
pub struct Decoded {
    /// `Value::Null` for an empty stream or an empty first document.
    pub value: Value,
    /// Non-empty documents after the first one (ignored, as by the kubelet). A stream whose
    /// rest does not parse counts that rest as one.
    pub more_documents: usize,
}

/// The kubelet's `yaml.ToJSON` + JSON decode: JSON when the text starts with `{` (after
/// whitespace), else the first YAML document. Go's null rules are applied ([`go_zero_nulls`]).
pub fn to_json(text: &str) -> Result<Decoded, DecodeError> {
    let decoded = if text.trim_start().starts_with('{') {
        let value = serde_json::from_str(text).map_err(DecodeError::Json)?;
        Decoded {
            value,
            more_documents: 0,
        }
    } else {
        yaml_to_json(text).map_err(DecodeError::Yaml)?
    };
    Ok(Decoded {
        value: go_zero_nulls(decoded.value),
        more_documents: decoded.more_documents,
    })
}

#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("invalid JSON: {0}")]
    Json(serde_json::Error),
    #[error("invalid YAML: {0}")]
    Yaml(YamlError),
}

// ---- the node tree ----

#[derive(Debug)]
enum Node {
    Scalar {
        value: String,
        /// Plain (unquoted, not a block scalar) and untagged, or tagged with the
        /// non-specific `!`: go-yaml's `implicit`, the only scalars it resolves.
        implicit: bool,
        /// A core-schema tag suffix (`str`, `int`, ...) or `Some("")` for another tag.
        tag: Option<String>,
        line: usize,
    },
    Seq(Vec<usize>, usize),
    Map(Vec<(usize, usize)>, usize),
    Alias(usize, usize),
}

impl Node {
    fn line(&self) -> usize {
        match self {
            Node::Scalar { line, .. } => *line,
            Node::Seq(_, l) | Node::Map(_, l) | Node::Alias(_, l) => *l,
        }
    }
}

fn syntax(e: ScanError) -> YamlError {
    YamlError::Syntax {
        line: e.marker().line(),
        column: e.marker().col() + 1,
        message: e.info().to_string(),
    }
}

/// What a tag means to go-yaml: `None` untagged, `Some(suffix)` for a core-schema tag,
/// `Some("")` for any other (custom tags are kept as strings).
fn tag_kind(tag: Option<&Tag>) -> Option<String> {
    match tag {
        None => None,
        // The non-specific tag `!` (the parser reports it as handle "", suffix "!").
        Some(t)
            if (t.handle == "!" && t.suffix.is_empty())
                || (t.handle.is_empty() && t.suffix == "!") =>
        {
            None
        }
        Some(t) if t.is_yaml_core_schema() => Some(t.suffix.clone()),
        Some(_) => Some(String::new()),
    }
}

struct Builder {
    nodes: Vec<Node>,
    /// anchor id -> node
    anchors: HashMap<usize, usize>,
    /// Open collections: (node index, pending key for maps).
    stack: Vec<(usize, Option<usize>)>,
    /// Anchors of collections still open (an alias to one is recursive).
    open_anchors: HashSet<usize>,
    open_anchor_of: Vec<usize>,
}

impl Builder {
    fn new() -> Builder {
        Builder {
            nodes: Vec::new(),
            anchors: HashMap::new(),
            stack: Vec::new(),
            open_anchors: HashSet::new(),
            open_anchor_of: Vec::new(),
        }
    }

    /// Adds a finished node to its parent; returns it when it is the document's root.
    fn attach(&mut self, id: usize) -> Option<usize> {
        let Some((parent, pending)) = self.stack.last_mut() else {
            return Some(id);
        };
        match &mut self.nodes[*parent] {
            Node::Seq(items, _) => items.push(id),
            Node::Map(entries, _) => match pending.take() {
                None => *pending = Some(id),
                Some(k) => entries.push((k, id)),
            },
            _ => {}
        }
        None
    }
}

/// go-yaml v2 + sigs.k8s.io/yaml `YAMLToJSON`, without Go's null-to-zero step.
pub fn yaml_to_json(text: &str) -> Result<Decoded, YamlError> {
    let mut parser = Parser::new_from_str(text);
    let mut b = Builder::new();
    let mut root: Option<usize> = None;
    let mut in_doc = false;
    // First document.
    for ev in parser.by_ref() {
        let (ev, span) = ev.map_err(syntax)?;
        let line = span.start.line();
        match ev {
            Event::StreamStart | Event::Nothing => {}
            Event::StreamEnd => break,
            Event::DocumentStart(_) => {
                in_doc = true;
            }
            Event::DocumentEnd => {
                if in_doc {
                    break;
                }
            }
            Event::Alias(anchor) => {
                if b.open_anchors.contains(&anchor) {
                    return Err(YamlError::RecursiveAlias { line });
                }
                let Some(&target) = b.anchors.get(&anchor) else {
                    return Err(YamlError::Syntax {
                        line,
                        column: span.start.col() + 1,
                        message: "unknown anchor referenced".into(),
                    });
                };
                b.nodes.push(Node::Alias(target, line));
                let id = b.nodes.len() - 1;
                if let Some(r) = b.attach(id) {
                    root = Some(r);
                }
            }
            Event::Scalar(value, style, anchor, tag) => {
                // The non-specific `!` tag leaves a plain scalar to be resolved (tag None).
                let tag = tag_kind(tag.as_deref());
                let plain = matches!(style, ScalarStyle::Plain);
                b.nodes.push(Node::Scalar {
                    value: value.into_owned(),
                    implicit: plain && tag.is_none(),
                    tag,
                    line,
                });
                let id = b.nodes.len() - 1;
                if anchor != 0 {
                    b.anchors.insert(anchor, id);
                }
                if let Some(r) = b.attach(id) {
                    root = Some(r);
                }
            }
            Event::SequenceStart(anchor, _) | Event::MappingStart(anchor, _) => {
                if b.stack.len() >= MAX_DEPTH {
                    return Err(YamlError::TooDeep { line });
                }
                let node = if matches!(ev, Event::SequenceStart(..)) {
                    Node::Seq(Vec::new(), line)
                } else {
                    Node::Map(Vec::new(), line)
                };
                b.nodes.push(node);
                let id = b.nodes.len() - 1;
                if anchor != 0 {
                    b.anchors.insert(anchor, id);
                    b.open_anchors.insert(anchor);
                }
                b.open_anchor_of.push(anchor);
                b.stack.push((id, None));
            }
            Event::SequenceEnd | Event::MappingEnd => {
                let Some((id, _)) = b.stack.pop() else {
                    continue;
                };
                if let Some(a) = b.open_anchor_of.pop() {
                    b.open_anchors.remove(&a);
                }
                if let Some(r) = b.attach(id) {
                    root = Some(r);
                }
            }
        }
    }
    let value = match root {
        None => Value::Null,
        Some(r) => Converter::new(&b.nodes).convert(r, 0)?,
    };
    Ok(Decoded {
        value,
        more_documents: count_more_documents(&mut parser),
    })
}

/// Counts the documents after the first that hold something (a lone `---` at the end, or
/// between documents, is an empty document and does not count).
fn count_more_documents<'a>(parser: &mut Parser<'a, saphyr_parser::StrInput<'a>>) -> usize {
    let mut count = 0;
    let mut depth = 0usize;
    let mut content = false;
    for ev in parser.by_ref() {
        let Ok((ev, _)) = ev else {
            // The rest does not parse: the kubelet never reads it; report it as one more.
            return count + 1;
        };
        match ev {
            Event::DocumentStart(_) => {
                depth = 0;
                content = false;
            }
            Event::DocumentEnd => {
                if content {
                    count += 1;
                }
            }
            Event::Scalar(v, style, anchor, tag) => {
                if depth > 0
                    || !v.is_empty()
                    || !matches!(style, ScalarStyle::Plain)
                    || anchor != 0
                    || tag.is_some()
                {
                    content = true;
                }
            }
            Event::SequenceStart(..) | Event::MappingStart(..) => {
                depth += 1;
                content = true;
            }
            Event::SequenceEnd | Event::MappingEnd => depth = depth.saturating_sub(1),
            Event::Alias(_) => content = true,
            Event::StreamStart | Event::StreamEnd | Event::Nothing => {}
        }
    }
    count
}

// ---- conversion with go-yaml's decoding rules ----

/// A resolved scalar, as go-yaml v2 hands it to `interface{}`.
#[derive(Debug, Clone, PartialEq)]
enum Scalar {
    Null,
    Bool(bool),
    Int(i64),
    Uint(u64),
    Float(f64),
    Str(String),
}

impl Scalar {
    fn tag_name(&self) -> &'static str {
        match self {
            Scalar::Null => "!!null",
            Scalar::Bool(_) => "!!bool",
            Scalar::Int(_) | Scalar::Uint(_) => "!!int",
            Scalar::Float(_) => "!!float",
            Scalar::Str(_) => "!!str",
        }
    }
}

struct Converter<'n> {
    nodes: &'n [Node],
    decode_count: usize,
    alias_count: usize,
    alias_depth: usize,
    expanding: HashSet<usize>,
}

/// go-yaml v2's `allowedAliasRatio`: small documents may be 99 % alias expansion, very large
/// ones 10 %, linearly in between (400,000 to 4,000,000 decoded nodes).
fn allowed_alias_ratio(decode_count: usize) -> f64 {
    const LOW: f64 = 400_000.0;
    const HIGH: f64 = 4_000_000.0;
    let n = decode_count as f64;
    if n <= LOW {
        0.99
    } else if n >= HIGH {
        0.10
    } else {
        0.99 - 0.89 * ((n - LOW) / (HIGH - LOW))
    }
}

impl<'n> Converter<'n> {
    fn new(nodes: &'n [Node]) -> Self {
        Converter {
            nodes,
            decode_count: 0,
            alias_count: 0,
            alias_depth: 0,
            expanding: HashSet::new(),
        }
    }

    /// go-yaml v2's per-node accounting in `decoder.unmarshal`.
    fn count(&mut self) -> Result<(), YamlError> {
        self.decode_count += 1;
        if self.alias_depth > 0 {
            self.alias_count += 1;
        }
        if self.alias_count > 100
            && self.decode_count > 1000
            && self.alias_count as f64 / self.decode_count as f64
                > allowed_alias_ratio(self.decode_count)
        {
            return Err(YamlError::ExcessiveAliasing);
        }
        Ok(())
    }

    fn convert(&mut self, id: usize, depth: usize) -> Result<Value, YamlError> {
        self.count()?;
        let node = &self.nodes[id];
        if depth > MAX_DEPTH {
            return Err(YamlError::TooDeep { line: node.line() });
        }
        match node {
            Node::Scalar { line, .. } => {
                let line = *line;
                scalar_json(self.resolve(id)?, line)
            }
            Node::Seq(items, _) => {
                let mut out = Vec::with_capacity(items.len());
                for &i in items {
                    out.push(self.convert(i, depth + 1)?);
                }
                Ok(Value::Array(out))
            }
            Node::Map(..) => {
                let mut out = Map::new();
                self.fill_map(id, &mut out, depth)?;
                Ok(Value::Object(out))
            }
            Node::Alias(target, line) => {
                let (target, line) = (*target, *line);
                if !self.expanding.insert(id) {
                    return Err(YamlError::RecursiveAlias { line });
                }
                self.alias_depth += 1;
                let v = self.convert(target, depth + 1);
                self.alias_depth -= 1;
                self.expanding.remove(&id);
                v
            }
        }
    }

    /// The mapping's entries in document order into `out`, each assignment overwriting.
    fn fill_map(
        &mut self,
        id: usize,
        out: &mut Map<String, Value>,
        depth: usize,
    ) -> Result<(), YamlError> {
        let Node::Map(entries, _) = &self.nodes[id] else {
            return Ok(());
        };
        for &(k, v) in entries {
            if self.is_merge(k) {
                self.merge(v, out, depth)?;
                continue;
            }
            self.count()?;
            let key = self.key_string(k)?;
            let value = self.convert(v, depth + 1)?;
            out.insert(key, value);
        }
        Ok(())
    }

    fn is_merge(&self, id: usize) -> bool {
        matches!(&self.nodes[id], Node::Scalar { value, implicit, tag, .. }
            if value == "<<" && (*implicit || tag.as_deref() == Some("merge")))
    }

    fn merge(
        &mut self,
        id: usize,
        out: &mut Map<String, Value>,
        depth: usize,
    ) -> Result<(), YamlError> {
        let line = self.nodes[id].line();
        match &self.nodes[id] {
            Node::Map(..) => self.fill_map(id, out, depth + 1),
            Node::Alias(target, _) => {
                let target = *target;
                if !matches!(self.nodes[target], Node::Map(..)) {
                    return Err(YamlError::MergeNotMap { line });
                }
                self.count()?;
                self.alias_depth += 1;
                let r = self.fill_map(target, out, depth + 1);
                self.alias_depth -= 1;
                r
            }
            Node::Seq(items, _) => {
                let items = items.clone();
                // Backwards: earlier maps take precedence.
                for &i in items.iter().rev() {
                    let target = match &self.nodes[i] {
                        Node::Map(..) => i,
                        Node::Alias(t, _) if matches!(self.nodes[*t], Node::Map(..)) => *t,
                        _ => return Err(YamlError::MergeNotMap { line }),
                    };
                    let aliased = target != i;
                    if aliased {
                        self.alias_depth += 1;
                    }
                    let r = self.fill_map(target, out, depth + 1);
                    if aliased {
                        self.alias_depth -= 1;
                    }
                    r?;
                }
                Ok(())
            }
            Node::Scalar { .. } => Err(YamlError::MergeNotMap { line }),
        }
    }

    /// A map key as sigs.k8s.io/yaml writes it into JSON.
    fn key_string(&mut self, id: usize) -> Result<String, YamlError> {
        let mut id = id;
        if let Node::Alias(t, _) = &self.nodes[id] {
            id = *t;
        }
        let line = self.nodes[id].line();
        match &self.nodes[id] {
            Node::Scalar { .. } => match self.resolve(id)? {
                Scalar::Str(s) => Ok(s),
                Scalar::Int(i) => Ok(i.to_string()),
                Scalar::Uint(u) => Ok(u.to_string()),
                Scalar::Bool(b) => Ok(b.to_string()),
                Scalar::Float(f) => Ok(go_format_float32_g(f)),
                Scalar::Null => Err(YamlError::InvalidKey {
                    line,
                    reason: "a null key has no JSON form".into(),
                }),
            },
            _ => Err(YamlError::InvalidKey {
                line,
                reason: "a list or map cannot be a key".into(),
            }),
        }
    }

    fn resolve(&self, id: usize) -> Result<Scalar, YamlError> {
        let Node::Scalar {
            value,
            implicit,
            tag,
            line,
        } = &self.nodes[id]
        else {
            return Ok(Scalar::Null);
        };
        resolve_scalar(value, *implicit, tag.as_deref(), *line)
    }
}

/// go-yaml v2's `decoder.scalar` + `resolve` for a value decoded into `interface{}`.
fn resolve_scalar(
    value: &str,
    implicit: bool,
    tag: Option<&str>,
    line: usize,
) -> Result<Scalar, YamlError> {
    match tag {
        // Quoted and block scalars without a tag are strings.
        None if !implicit => Ok(Scalar::Str(value.to_string())),
        None => Ok(resolve_implicit(value)),
        Some("str") => Ok(Scalar::Str(value.to_string())),
        Some("binary") => crate::util::base64::decode(value)
            .map(|bytes| Scalar::Str(String::from_utf8_lossy(&bytes).into_owned()))
            .map_err(|reason| YamlError::Binary { line, reason }),
        Some(t @ ("bool" | "int" | "float" | "null" | "timestamp")) => {
            let r = resolve_implicit(value);
            let ok = match (t, &r) {
                ("bool", Scalar::Bool(_)) | ("null", Scalar::Null) => true,
                ("int", Scalar::Int(_) | Scalar::Uint(_)) => true,
                ("float", Scalar::Float(_)) => true,
                // Timestamps stay strings in interface{}.
                ("timestamp", Scalar::Str(s)) => looks_like_timestamp(s),
                _ => false,
            };
            if ok {
                return Ok(r);
            }
            // `!!float 1` is the float 1.
            match (t, &r) {
                ("float", Scalar::Int(i)) => Ok(Scalar::Float(*i as f64)),
                ("float", Scalar::Uint(u)) => Ok(Scalar::Float(*u as f64)),
                _ => Err(YamlError::TagMismatch {
                    line,
                    value: value.to_string(),
                    found: r.tag_name(),
                    tag: format!("!!{t}"),
                }),
            }
        }
        // !!merge outside a key, !!seq/!!map on a scalar, custom tags: the text as is.
        Some(_) => Ok(Scalar::Str(value.to_string())),
    }
}

/// go-yaml v2 `resolve` for a plain untagged scalar (see the module docs).
fn resolve_implicit(s: &str) -> Scalar {
    match s {
        "y" | "Y" | "yes" | "Yes" | "YES" | "true" | "True" | "TRUE" | "on" | "On" | "ON" => {
            return Scalar::Bool(true);
        }
        "n" | "N" | "no" | "No" | "NO" | "false" | "False" | "FALSE" | "off" | "Off" | "OFF" => {
            return Scalar::Bool(false);
        }
        "" | "~" | "null" | "Null" | "NULL" => return Scalar::Null,
        ".nan" | ".NaN" | ".NAN" => return Scalar::Float(f64::NAN),
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => {
            return Scalar::Float(f64::INFINITY);
        }
        "-.inf" | "-.Inf" | "-.INF" => return Scalar::Float(f64::NEG_INFINITY),
        _ => {}
    }
    let first = s.as_bytes()[0];
    match first {
        b'.' => match go_parse_float(s) {
            Some(f) => Scalar::Float(f),
            None => Scalar::Str(s.to_string()),
        },
        b'0'..=b'9' | b'+' | b'-' => {
            if looks_like_timestamp(s) {
                return Scalar::Str(s.to_string());
            }
            let plain: String = s.chars().filter(|&c| c != '_').collect();
            if let Some(i) = go_parse_int(&plain) {
                return Scalar::Int(i);
            }
            if let Some(u) = go_parse_uint(&plain) {
                return Scalar::Uint(u);
            }
            if yaml_style_float(&plain) {
                if let Some(f) = go_parse_float(&plain) {
                    return Scalar::Float(f);
                }
            }
            Scalar::Str(s.to_string())
        }
        _ => Scalar::Str(s.to_string()),
    }
}

/// Digits and base of Go's base-0 integer syntax (`0x`, `0o`, `0b`, leading-`0` octal), sign
/// already removed.
fn go_base_digits(s: &str) -> Option<(&str, u32)> {
    let b = s.as_bytes();
    let (digits, base) = if b.len() >= 2 && b[0] == b'0' && matches!(b[1], b'x' | b'X') {
        (&s[2..], 16)
    } else if b.len() >= 2 && b[0] == b'0' && matches!(b[1], b'o' | b'O') {
        (&s[2..], 8)
    } else if b.len() >= 2 && b[0] == b'0' && matches!(b[1], b'b' | b'B') {
        (&s[2..], 2)
    } else if b.len() >= 2 && b[0] == b'0' {
        (&s[1..], 8)
    } else {
        (s, 10)
    };
    if digits.is_empty() || !digits.bytes().all(|c| (c as char).is_digit(base)) {
        return None;
    }
    Some((digits, base))
}

/// Go's `strconv.ParseInt(s, 0, 64)`.
fn go_parse_int(s: &str) -> Option<i64> {
    let (neg, rest) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let (digits, base) = go_base_digits(rest)?;
    let mag = u64::from_str_radix(digits, base).ok()?;
    if neg {
        if mag <= i64::MAX as u64 + 1 {
            Some((mag as i64).wrapping_neg())
        } else {
            None
        }
    } else {
        i64::try_from(mag).ok()
    }
}

/// Go's `strconv.ParseUint(s, 0, 64)` (no sign).
fn go_parse_uint(s: &str) -> Option<u64> {
    let (digits, base) = go_base_digits(s)?;
    u64::from_str_radix(digits, base).ok()
}

/// go-yaml v2's `yamlStyleFloat`: `^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`.
fn yaml_style_float(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
        i += 1;
    }
    let digits = |i: &mut usize| {
        let start = *i;
        while *i < b.len() && b[*i].is_ascii_digit() {
            *i += 1;
        }
        *i - start
    };
    if i < b.len() && b[i] == b'.' {
        i += 1;
        if digits(&mut i) == 0 {
            return false;
        }
    } else {
        if digits(&mut i) == 0 {
            return false;
        }
        if i < b.len() && b[i] == b'.' {
            i += 1;
            digits(&mut i);
        }
    }
    if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        i += 1;
        if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
            i += 1;
        }
        if digits(&mut i) == 0 {
            return false;
        }
    }
    i == b.len()
}

/// Go's `strconv.ParseFloat(s, 64)` for the decimal forms go-yaml hands it: out of range
/// (±Inf) is an error there, so `None` here; Go's `inf`/`nan` spellings never reach it.
fn go_parse_float(s: &str) -> Option<f64> {
    if !s
        .bytes()
        .all(|c| c.is_ascii_digit() || matches!(c, b'.' | b'e' | b'E' | b'+' | b'-'))
    {
        return None;
    }
    let f: f64 = s.parse().ok()?;
    if f.is_finite() { Some(f) } else { None }
}

/// The quick check go-yaml v2's `parseTimestamp` starts with, plus its formats' shape:
/// `YYYY-M-D`, optionally followed by a time (`T`, `t` or space). Such values stay strings.
fn looks_like_timestamp(s: &str) -> bool {
    let b = s.as_bytes();
    if b.len() < 8 || !b[..4].iter().all(u8::is_ascii_digit) || b[4] != b'-' {
        return false;
    }
    let rest = &s[5..];
    let date_end = rest.find(['T', 't', ' ']).unwrap_or(rest.len());
    let date = &rest[..date_end];
    let mut parts = date.split('-');
    let ok_num = |p: Option<&str>, max: u32| {
        p.is_some_and(|p| {
            !p.is_empty()
                && p.len() <= 2
                && p.bytes().all(|c| c.is_ascii_digit())
                && p.parse::<u32>().is_ok_and(|n| (1..=max).contains(&n))
        })
    };
    ok_num(parts.next(), 12) && ok_num(parts.next(), 31) && parts.next().is_none()
}

/// A resolved scalar as `encoding/json` marshals it.
fn scalar_json(s: Scalar, line: usize) -> Result<Value, YamlError> {
    Ok(match s {
        Scalar::Null => Value::Null,
        Scalar::Bool(b) => Value::Bool(b),
        Scalar::Int(i) => Value::Number(i.into()),
        Scalar::Uint(u) => Value::Number(u.into()),
        Scalar::Str(s) => Value::String(s),
        Scalar::Float(f) => {
            if !f.is_finite() {
                return Err(YamlError::UnsupportedNumber {
                    line,
                    value: if f.is_nan() {
                        "NaN".into()
                    } else if f > 0.0 {
                        "+Inf".into()
                    } else {
                        "-Inf".into()
                    },
                });
            }
            go_json_float(f)
        }
    })
}

/// `encoding/json` writes a float64 without an exponent below 1e21 (and from 1e-6), with the
/// fewest digits that round-trip: an integral value is an integer literal, which Go then
/// decodes into an integer field. Mirror that: integral floats that fit become integers.
fn go_json_float(f: f64) -> Value {
    let abs = f.abs();
    if f.fract() == 0.0 && abs < 1e21 {
        if f >= 0.0 && f <= u64::MAX as f64 && f < 18_446_744_073_709_551_616.0 {
            return Value::Number((f as u64).into());
        }
        if f < 0.0 && f >= i64::MIN as f64 {
            return Value::Number((f as i64).into());
        }
    }
    Number::from_f64(f)
        .map(Value::Number)
        .unwrap_or(Value::Null)
}

/// Go's `strconv.FormatFloat(f, 'g', -1, 32)` with go-yaml's `.inf`/`-.inf`/`.nan` spelling
/// (how sigs.k8s.io/yaml turns a float key into a string).
pub fn go_format_float32_g(f: f64) -> String {
    if f.is_nan() {
        return ".nan".into();
    }
    if f.is_infinite() {
        return if f > 0.0 {
            ".inf".into()
        } else {
            "-.inf".into()
        };
    }
    let f32v = f as f32;
    if f32v.is_infinite() {
        return if f32v > 0.0 {
            ".inf".into()
        } else {
            "-.inf".into()
        };
    }
    if f32v == 0.0 {
        return if f32v.is_sign_negative() {
            "-0".into()
        } else {
            "0".into()
        };
    }
    // Shortest round-trip digits of the float32, from Rust's scientific form "d.ddde±x".
    let sci = format!("{f32v:e}");
    let (mant, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let neg = mant.starts_with('-');
    let digits: String = mant.chars().filter(|c| c.is_ascii_digit()).collect();
    let sign = if neg { "-" } else { "" };
    // %e when exp < -4 || exp >= 6 (shortest 'g' uses precision 6 for the decision).
    if !(-4..6).contains(&exp) {
        let (first, rest) = digits.split_at(1);
        let frac = if rest.is_empty() {
            String::new()
        } else {
            format!(".{rest}")
        };
        let esign = if exp < 0 { '-' } else { '+' };
        format!("{sign}{first}{frac}e{esign}{:02}", exp.abs())
    } else if exp < 0 {
        format!("{sign}0.{}{digits}", "0".repeat((-exp - 1) as usize))
    } else {
        let int_len = exp as usize + 1;
        if digits.len() <= int_len {
            format!("{sign}{digits}{}", "0".repeat(int_len - digits.len()))
        } else {
            format!("{sign}{}.{}", &digits[..int_len], &digits[int_len..])
        }
    }
}

// ---- Go's null rules ----

/// Map-valued fields of the v1 objects nanolet reads whose values are strings (or
/// quantities): a null value there is Go's zero value of the element, not an absent key.
const STRING_MAPS: &[&str] = &[
    "labels",
    "annotations",
    "nodeSelector",
    "data",
    "stringData",
    "binaryData",
    "volumeAttributes",
    "options",
    "parameters",
];
/// Quantity-valued maps: a null quantity is Go's zero `Quantity`, written "0".
const QUANTITY_MAPS: &[&str] = &["limits", "requests", "overhead", "capacity", "allocatable"];

/// Applies Go's JSON decoding of `null` (see the module docs) to a decoded manifest.
pub fn go_zero_nulls(v: Value) -> Value {
    zero_nulls(v, None)
}

fn zero_nulls(v: Value, key: Option<&str>) -> Value {
    match v {
        Value::Object(map) => {
            let string_map = key.is_some_and(|k| STRING_MAPS.contains(&k));
            let quantity_map = key.is_some_and(|k| QUANTITY_MAPS.contains(&k));
            let mut out = Map::new();
            for (k, val) in map {
                match val {
                    Value::Null if string_map => {
                        out.insert(k, Value::String(String::new()));
                    }
                    Value::Null if quantity_map => {
                        out.insert(k, Value::String("0".into()));
                    }
                    // A struct field set to null: its zero value, i.e. as if absent.
                    Value::Null => {}
                    other => {
                        let z = zero_nulls(other, Some(&k));
                        out.insert(k, z);
                    }
                }
            }
            Value::Object(out)
        }
        Value::Array(items) => {
            let zero = items.iter().find_map(|i| match i {
                Value::String(_) => Some(Value::String(String::new())),
                Value::Object(_) => Some(Value::Object(Map::new())),
                Value::Number(_) => Some(Value::Number(0.into())),
                Value::Bool(_) => Some(Value::Bool(false)),
                _ => None,
            });
            Value::Array(
                items
                    .into_iter()
                    .map(|i| match (i, &zero) {
                        (Value::Null, Some(z)) => z.clone(),
                        (i, _) => zero_nulls(i, None),
                    })
                    .collect(),
            )
        }
        other => other,
    }
}

// ---- writing YAML that a YAML 1.1 reader reads back unchanged ----

/// Would go-yaml v2 (or any YAML 1.1 reader) read this plain scalar as something other than
/// the string itself? Then it must be quoted.
fn needs_quotes(s: &str) -> bool {
    if s.is_empty() || s != s.trim() {
        return true;
    }
    if !matches!(resolve_implicit(s), Scalar::Str(_)) || looks_like_timestamp(s) {
        return true;
    }
    // YAML 1.1 also has base-60 numbers (`1:20`) and `=`; go-yaml quotes them on output.
    if s == "="
        || (s.contains(':')
            && s.split(':').all(|p| {
                !p.is_empty()
                    && p.bytes()
                        .all(|c| c.is_ascii_digit() || c == b'.' || c == b'_')
            }))
    {
        return true;
    }
    let first = s.chars().next().unwrap_or(' ');
    if "-?:,[]{}#&*!|>'\"%@`".contains(first) || s == "<<" {
        return true;
    }
    s.contains(": ")
        || s.contains(" #")
        || s.ends_with(':')
        || s.chars().any(|c| {
            c.is_control() || c == '\u{FEFF}' || c == '\u{85}' || c == '\u{2028}' || c == '\u{2029}'
        })
}

fn quote(s: &str) -> String {
    // A JSON string is a valid YAML double-quoted scalar.
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

fn scalar_yaml(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => {
            if needs_quotes(s) {
                quote(s)
            } else {
                s.clone()
            }
        }
        Value::Array(a) if a.is_empty() => "[]".into(),
        Value::Object(o) if o.is_empty() => "{}".into(),
        _ => String::new(),
    }
}

fn is_scalar(v: &Value) -> bool {
    match v {
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => true,
    }
}

/// Block-style YAML for a JSON value, keys in the map's order, every string that a YAML 1.1
/// reader would misread (`yes`, `on`, `0400`, `1e3`, `~`, `2024-01-02`, ...) double-quoted.
pub fn to_yaml_string(v: &Value) -> String {
    let mut out = String::new();
    if is_scalar(v) {
        out.push_str(&scalar_yaml(v));
        out.push('\n');
    } else {
        write_block(v, 0, &mut out);
    }
    out
}

fn write_block(v: &Value, indent: usize, out: &mut String) {
    let pad = " ".repeat(indent);
    match v {
        Value::Object(map) => {
            for (k, val) in map {
                let key = if needs_quotes(k) { quote(k) } else { k.clone() };
                out.push_str(&pad);
                out.push_str(&key);
                out.push(':');
                if is_scalar(val) {
                    out.push(' ');
                    out.push_str(&scalar_yaml(val));
                    out.push('\n');
                } else {
                    out.push('\n');
                    // Lists under a key at the key's indentation, as kubectl writes them.
                    let child = if val.is_array() { indent } else { indent + 2 };
                    write_block(val, child, out);
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                out.push_str(&pad);
                out.push('-');
                if is_scalar(item) {
                    out.push(' ');
                    out.push_str(&scalar_yaml(item));
                    out.push('\n');
                } else {
                    // The item's first line goes after "- ", the rest indented by 2.
                    let mut inner = String::new();
                    write_block(item, indent + 2, &mut inner);
                    let trimmed = inner.trim_start_matches(' ');
                    out.push(' ');
                    out.push_str(trimmed);
                }
            }
        }
        scalar => {
            out.push_str(&pad);
            out.push_str(&scalar_yaml(scalar));
            out.push('\n');
        }
    }
}

#[cfg(test)]
mod tests;
