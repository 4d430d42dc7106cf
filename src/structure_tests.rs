//! The crate's shape, checked: no import cycle between top-level modules.
//!
//! Approach: a small test that reads `crate::` edges (no external tool). It reads every `.rs` file
//! under `src/` (found via `CARGO_MANIFEST_DIR`), maps it to its top-level module (`src/foo.rs`
//! and `src/foo/**` are `foo`; `lib.rs` and `main.rs` are the roots and left out), and takes an
//! edge `foo -> bar` from every `crate::bar` path in code: `use` lines, grouped uses
//! (`use crate::{bar::X, baz}`), and inline paths (`crate::bar::f()`). Comments, string and char
//! literals are blanked out first, so prose and messages that mention `crate::x` do not count.
//! It then computes strongly connected components (Tarjan); any component of two or more
//! modules is a cycle, and the test fails listing it with one example `file:line` per edge,
//! together with the dependency order (a topological order of the module DAG, lowest first).
//!
//! Test code does not count: items under `#[cfg(test)]` (usually `mod tests { .. }`, or
//! `mod tests;` in its own file) are skipped. Test modules may reach across the crate to build
//! fixtures (a sync test using the fake runtime and the prober, say) without shaping the design:
//! they are not compiled into the library, so they cannot make one module's build or meaning
//! depend on another's. Code under `cfg(any(test, ..))` or a feature does count.
//!
//! Limits, kept on purpose: `super::super::..` paths that climb out of a top-level module and
//! paths through a `use crate as ..` alias are not followed (the crate has none; `crate::` is the
//! one way in), and `#[path]` attributes are not read.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// One dependency edge with the first place it was seen.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Site {
    file: String,
    line: usize,
}

/// The module graph: every top-level module, and for each edge `(from, to)` an example site.
#[derive(Debug, Default)]
struct Graph {
    modules: BTreeSet<String>,
    edges: BTreeMap<(String, String), Site>,
}

impl Graph {
    fn deps(&self, from: &str) -> impl Iterator<Item = &str> {
        self.edges
            .keys()
            .filter(move |(f, _)| f == from)
            .map(|(_, t)| t.as_str())
    }
}

/// The top-level module a file under `src/` belongs to (`rel` uses `/`), or None for the roots.
fn top_module(rel: &str) -> Option<String> {
    if !rel.ends_with(".rs") || rel == "lib.rs" || rel == "main.rs" {
        return None;
    }
    let first = rel.split('/').next().unwrap_or(rel);
    Some(first.trim_end_matches(".rs").to_string())
}

/// The source with comments, string literals and char literals replaced by spaces (newlines
/// kept, so line numbers still hold). Lifetimes (`'a`) are left alone.
fn blank_non_code(src: &str) -> String {
    let c: Vec<char> = src.chars().collect();
    let mut out: Vec<char> = Vec::with_capacity(c.len());
    let is_ident = |ch: char| ch.is_alphanumeric() || ch == '_';
    let blank = |out: &mut Vec<char>, ch: char| out.push(if ch == '\n' { '\n' } else { ' ' });
    let mut i = 0;
    while i < c.len() {
        let ch = c[i];
        let next = c.get(i + 1).copied();
        if ch == '/' && next == Some('/') {
            while i < c.len() && c[i] != '\n' {
                blank(&mut out, c[i]);
                i += 1;
            }
        } else if ch == '/' && next == Some('*') {
            let mut depth = 0usize;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.extend([' ', ' ']);
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.extend([' ', ' ']);
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut out, c[i]);
                    i += 1;
                }
            }
        } else if ch == 'r' && raw_string_start(&c, i).is_some() {
            let hashes = raw_string_start(&c, i).unwrap_or(0);
            // r, the hashes, the opening quote
            out.extend(std::iter::repeat_n(' ', hashes + 2));
            i += hashes + 2;
            while i < c.len() {
                if c[i] == '"' && (1..=hashes).all(|k| c.get(i + k) == Some(&'#')) {
                    out.extend(std::iter::repeat_n(' ', hashes + 1));
                    i += hashes + 1;
                    break;
                }
                blank(&mut out, c[i]);
                i += 1;
            }
        } else if ch == '"' {
            out.push(' ');
            i += 1;
            while i < c.len() && c[i] != '"' {
                if c[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                if i < c.len() {
                    blank(&mut out, c[i]);
                    i += 1;
                }
            }
            if i < c.len() {
                out.push(' ');
                i += 1;
            }
        } else if ch == '\'' && (next == Some('\\') || c.get(i + 2) == Some(&'\'')) {
            // A char literal ('x', '\n', '\'', '\u{..}'); a lifetime has no closing quote.
            out.push(' ');
            i += 1;
            if c.get(i) == Some(&'\\') {
                out.push(' ');
                i += 1;
            }
            while i < c.len() {
                let done = c[i] == '\'';
                blank(&mut out, c[i]);
                i += 1;
                if done {
                    break;
                }
            }
        } else if is_ident(ch) {
            // A whole identifier at once, so the 'r' of "for" never starts a raw string.
            while i < c.len() && is_ident(c[i]) {
                if c[i] == 'r' && raw_string_start(&c, i).is_some() {
                    break;
                }
                out.push(c[i]);
                i += 1;
            }
        } else {
            out.push(ch);
            i += 1;
        }
    }
    out.into_iter().collect()
}

/// If a raw string (`r"`, `r#"`, `br#"`) starts with the `r` at `i`, the number of `#`s.
fn raw_string_start(c: &[char], i: usize) -> Option<usize> {
    let is_ident = |ch: char| ch.is_alphanumeric() || ch == '_';
    let prefix_ok = match i.checked_sub(1).map(|p| c[p]) {
        None => true,
        Some('b') => i < 2 || !is_ident(c[i - 2]),
        Some(p) => !is_ident(p),
    };
    if !prefix_ok {
        return None;
    }
    let mut j = i + 1;
    while c.get(j) == Some(&'#') {
        j += 1;
    }
    (c.get(j) == Some(&'"')).then_some(j - i - 1)
}

/// A token of blanked code: an identifier, `::`, or one punctuation char; with its line.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Tok {
    text: String,
    line: usize,
}

fn tokenize(code: &str) -> Vec<Tok> {
    let c: Vec<char> = code.chars().collect();
    let mut toks = Vec::new();
    let mut line = 1;
    let mut i = 0;
    while i < c.len() {
        let ch = c[i];
        if ch == '\n' {
            line += 1;
            i += 1;
        } else if ch.is_whitespace() {
            i += 1;
        } else if ch.is_alphanumeric() || ch == '_' || ch == '$' {
            let start = i;
            i += 1;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            toks.push(Tok {
                text: c[start..i].iter().collect(),
                line,
            });
        } else if ch == ':' && c.get(i + 1) == Some(&':') {
            toks.push(Tok {
                text: "::".into(),
                line,
            });
            i += 2;
        } else {
            toks.push(Tok {
                text: ch.to_string(),
                line,
            });
            i += 1;
        }
    }
    toks
}

/// The tokens of non-test code, and the names of `#[cfg(test)] mod name;` declarations (their
/// files are test code as a whole). A file opening with `#![cfg(test)]` is all test code.
fn strip_test_code(toks: &[Tok]) -> (Vec<Tok>, Vec<String>) {
    let is = |k: usize, s: &str| toks.get(k).is_some_and(|t| t.text == s);
    let cfg_test_at = |k: usize| -> Option<usize> {
        // `#[cfg(test)]` or `#![cfg(test)]`: the index after it.
        let k1 = if is(k + 1, "!") { k + 2 } else { k + 1 };
        let pat = ["[", "cfg", "(", "test", ")", "]"];
        (is(k, "#") && pat.iter().enumerate().all(|(n, p)| is(k1 + n, p))).then_some(k1 + pat.len())
    };
    if toks.len() >= 2 && is(1, "!") && cfg_test_at(0).is_some() {
        return (Vec::new(), Vec::new());
    }
    let mut kept = Vec::new();
    let mut test_mods = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        let Some(mut j) = cfg_test_at(i) else {
            kept.push(toks[i].clone());
            i += 1;
            continue;
        };
        // Further attributes on the same item.
        while is(j, "#") && is(j + 1, "[") {
            j = skip_group(toks, j + 1);
        }
        // `mod name;` and `pub(crate) mod name;` declare a test file.
        let mut m = j;
        while m < toks.len() && toks[m].text != "mod" && toks[m].text != ";" && toks[m].text != "{"
        {
            m += 1;
        }
        if is(m, "mod") && is(m + 2, ";") {
            if let Some(t) = toks.get(m + 1) {
                test_mods.push(t.text.clone());
            }
        }
        // The item ends at a `;` outside brackets or at the `}` closing its body.
        let mut depth = 0usize;
        while j < toks.len() {
            match toks[j].text.as_str() {
                "(" | "[" => depth += 1,
                ")" | "]" => depth = depth.saturating_sub(1),
                ";" if depth == 0 => {
                    j += 1;
                    break;
                }
                "{" if depth == 0 => {
                    j = skip_group(toks, j);
                    break;
                }
                _ => {}
            }
            j += 1;
        }
        i = j;
    }
    (kept, test_mods)
}

/// The index after the bracket group opening at `open` (`(`, `[` or `{`).
fn skip_group(toks: &[Tok], open: usize) -> usize {
    let mut depth = 0usize;
    let mut k = open;
    while k < toks.len() {
        match toks[k].text.as_str() {
            "(" | "[" | "{" => depth += 1,
            ")" | "]" | "}" => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return k + 1;
                }
            }
            _ => {}
        }
        k += 1;
    }
    k
}

/// The top-level names a token stream reaches through `crate::`, each with its line.
fn crate_paths(toks: &[Tok]) -> Vec<(String, usize)> {
    let mut found = Vec::new();
    for (i, t) in toks.iter().enumerate() {
        if (t.text != "crate" && t.text != "$crate")
            || toks.get(i + 1).is_none_or(|n| n.text != "::")
        {
            continue;
        }
        let Some(after) = toks.get(i + 2) else {
            continue;
        };
        if after.text != "{" {
            found.push((after.text.clone(), after.line));
            continue;
        }
        // `crate::{a::X, b, c::{..}}`: the first name of each element at depth 1.
        let mut depth = 0usize;
        let mut at_start = true;
        for u in &toks[i + 2..] {
            match u.text.as_str() {
                "{" => {
                    depth += 1;
                    at_start = depth == 1;
                    continue;
                }
                "}" => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                "," if depth == 1 => {
                    at_start = true;
                    continue;
                }
                _ if at_start && depth == 1 => found.push((u.text.clone(), u.line)),
                _ => {}
            }
            at_start = false;
        }
    }
    found
}

/// The graph of `files`: (path relative to `src/` with `/`, source text).
fn graph_of(files: &[(String, String)]) -> Graph {
    let mut g = Graph::default();
    let mut scanned = Vec::new();
    let mut test_files: BTreeSet<String> = BTreeSet::new();
    for (rel, src) in files {
        let (toks, test_mods) = strip_test_code(&tokenize(&blank_non_code(src)));
        // Where `mod name;` files live: next to lib.rs or mod.rs, under foo/ for foo.rs.
        let dir = match rel.rsplit_once('/') {
            Some((d, "mod.rs")) => format!("{d}/"),
            None if rel == "lib.rs" || rel == "main.rs" => String::new(),
            _ => format!("{}/", rel.trim_end_matches(".rs")),
        };
        for m in test_mods {
            test_files.insert(format!("{dir}{m}.rs"));
            test_files.insert(format!("{dir}{m}/"));
        }
        let Some(top) = top_module(rel) else { continue };
        scanned.push((rel.clone(), top, toks));
    }
    let in_test = |rel: &str| {
        test_files
            .iter()
            .any(|t| rel == t || (t.ends_with('/') && rel.starts_with(t.as_str())))
    };
    scanned.retain(|(rel, _, _)| !in_test(rel));
    g.modules
        .extend(scanned.iter().map(|(_, top, _)| top.clone()));
    for (rel, top, toks) in scanned {
        for (to, line) in crate_paths(&toks) {
            if to == top || !g.modules.contains(&to) {
                continue;
            }
            g.edges.entry((top.clone(), to)).or_insert_with(|| Site {
                file: format!("src/{rel}"),
                line,
            });
        }
    }
    g
}

/// Strongly connected components (Tarjan), each sorted; a component comes after every
/// component it depends on, so the list read in order is a dependency order (lowest first).
fn sccs(g: &Graph) -> Vec<Vec<String>> {
    struct State<'a> {
        g: &'a Graph,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on_stack.insert(v);
        let deps: Vec<&'a str> = s.g.deps(v).collect();
        for w in deps {
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).expect("v was indexed above");
                *lv = (*lv).min(lw);
            } else if s.on_stack.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).expect("v was indexed above");
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                comp.push(w.to_string());
                if w == v {
                    break;
                }
            }
            comp.sort();
            s.out.push(comp);
        }
    }
    let mut s = State {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for m in &g.modules {
        if !s.index.contains_key(m.as_str()) {
            visit(&mut s, m);
        }
    }
    s.out
}

/// One shortest cycle through `start` inside `comp` (BFS), as a list of modules ending at start.
fn one_cycle(g: &Graph, comp: &[String], start: &str) -> Vec<String> {
    let inside: BTreeSet<&str> = comp.iter().map(String::as_str).collect();
    let mut prev: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start]);
    while let Some(v) = queue.pop_front() {
        for w in g.deps(v) {
            if !inside.contains(w) || prev.contains_key(w) {
                continue;
            }
            prev.insert(w, v);
            if w == start {
                let mut path = vec![start.to_string()];
                let mut cur = v;
                while cur != start {
                    path.push(cur.to_string());
                    cur = prev[cur];
                }
                path.push(start.to_string());
                path.reverse();
                return path;
            }
            queue.push_back(w);
        }
    }
    Vec::new()
}

/// The dependency order, one module a line with what it depends on.
fn order_report(g: &Graph, comps: &[Vec<String>]) -> String {
    let mut s = String::new();
    for comp in comps {
        for m in comp {
            let deps: Vec<&str> = g.deps(m).collect();
            s.push_str(&format!("  {m}: {}\n", deps.join(", ")));
        }
    }
    s
}

/// Ok(dependency order report), or Err(every cycle with its edges, then the order).
fn check(files: &[(String, String)]) -> Result<String, String> {
    let g = graph_of(files);
    let comps = sccs(&g);
    let order = order_report(&g, &comps);
    let mut report = String::new();
    for comp in comps.iter().filter(|c| c.len() > 1) {
        report.push_str(&format!(
            "cycle among {} modules: {}\n",
            comp.len(),
            comp.join(", ")
        ));
        let path = one_cycle(&g, comp, &comp[0]);
        report.push_str(&format!("  for example {}\n", path.join(" -> ")));
        for ((from, to), site) in &g.edges {
            if comp.contains(from) && comp.contains(to) {
                report.push_str(&format!(
                    "  {from} -> {to}   ({}:{})\n",
                    site.file, site.line
                ));
            }
        }
    }
    if report.is_empty() {
        Ok(order)
    } else {
        Err(format!(
            "{report}dependency order (a cycle is one line group):\n{order}"
        ))
    }
}

/// Every `.rs` file under `dir`, as (path relative to `root` with `/`, text).
fn read_tree(root: &Path, dir: &Path, out: &mut Vec<(String, String)>) {
    let entries =
        std::fs::read_dir(dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()));
    for entry in entries {
        let path = entry
            .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
            .path();
        if path.is_dir() {
            read_tree(root, &path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            let rel = path.strip_prefix(root).unwrap_or(&path);
            let rel = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy())
                .collect::<Vec<_>>()
                .join("/");
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
            out.push((rel, text));
        }
    }
}

#[test]
fn no_import_cycle_between_top_level_modules() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    read_tree(&src, &src, &mut files);
    files.sort();
    assert!(
        files.len() > 20,
        "found only {} files under {}",
        files.len(),
        src.display()
    );
    match check(&files) {
        Ok(order) => println!("dependency order (lowest first):\n{order}"),
        Err(report) => panic!("import cycles between top-level modules of the crate:\n{report}"),
    }
}

#[cfg(test)]
mod checker_tests {
    use super::*;

    fn files(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(p, s)| (p.to_string(), s.to_string()))
            .collect()
    }

    #[test]
    fn finds_a_cycle_with_its_sites() {
        let fs = files(&[
            ("lib.rs", "pub mod a; pub mod b; pub mod c;"),
            ("a.rs", "use std::fmt;\nuse crate::b::Thing;\n"),
            ("b/mod.rs", "mod inner;\n"),
            ("b/inner.rs", "pub fn f() {\n    crate::a::g();\n}\n"),
            ("c.rs", "use crate::{a, b::{x, y}};\n"),
        ]);
        let err = check(&fs).expect_err("a <-> b is a cycle");
        assert!(err.contains("cycle among 2 modules: a, b"), "{err}");
        assert!(err.contains("a -> b   (src/a.rs:2)"), "{err}");
        assert!(err.contains("b -> a   (src/b/inner.rs:2)"), "{err}");
        assert!(err.contains("for example a -> b -> a"), "{err}");
        // c depends on both but is in no cycle.
        assert!(err.contains("  c: a, b\n"), "{err}");
        assert!(!err.contains("modules: a, b, c"), "{err}");
    }

    #[test]
    fn comments_strings_and_test_code_do_not_count() {
        let fs = files(&[
            ("a.rs", "use crate::b::Thing;\n"),
            (
                "b.rs",
                concat!(
                    "// crate::a in a comment\n",
                    "/* crate::a /* nested */ crate::a */\n",
                    "const S: &str = \"crate::a::x\";\n",
                    "const R: &str = r#\"crate::a \"quoted\" \"#;\n",
                    "const C: char = '\"'; fn f<'a>(x: &'a str) {}\n",
                    "pub(crate) fn g() {}\n",
                    "#[cfg(test)]\nmod tests {\n    use crate::a;\n}\n",
                    "#[cfg(test)]\nfn helper() { crate::a::h() }\n",
                    "#[cfg(test)]\nmod more;\n",
                ),
            ),
            ("b/more.rs", "use crate::a::Z;\n"),
            (
                "lib.rs",
                "pub mod a;\npub mod b;\n#[cfg(test)]\nmod checks;\n",
            ),
            ("checks.rs", "use crate::a::Z;\n"),
        ]);
        let order = check(&fs).expect("only a -> b is code");
        assert_eq!(order, "  b: \n  a: b\n");
    }

    #[test]
    fn order_is_lowest_first() {
        let fs = files(&[
            ("top.rs", "use crate::mid::M;"),
            ("mid.rs", "use crate::low::L;"),
            ("low.rs", ""),
        ]);
        assert_eq!(
            check(&fs).expect("no cycle"),
            "  low: \n  mid: low\n  top: mid\n"
        );
    }
}
