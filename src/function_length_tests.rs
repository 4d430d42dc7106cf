//! No function outside tests is longer than [`MAX_LINES`] lines (issue 18).
//!
//! A small Rust lexer finds every `fn` item with a body (free functions, methods, nested
//! functions; closures are not `fn` items) in every `.rs` file under `src/`, skipping
//! `#[cfg(test)]` items (and the files of `#[cfg(test)] mod x;` declarations) and `#[test]`
//! functions. A function's length runs from its `fn` line to its closing brace, inclusive; doc
//! comments and attributes above it do not count. Clippy's `too_many_lines` (clippy.toml) counts
//! only code lines; this test counts all lines and is the one CI runs.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The longest a function may be, in lines.
const MAX_LINES: usize = 120;

/// Functions allowed over [`MAX_LINES`] for now, as (file under the crate root, name), each
/// with the reason. An entry that is no longer over the limit fails the test, so the list
/// only shrinks.
const ALLOWED: &[(&str, &str)] = &[];

/// One token of Rust source: an identifier (or keyword, or number) or one punctuation char.
#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Punct(char),
}

/// A token and the 1-based line it starts on.
#[derive(Debug, Clone)]
struct Token {
    tok: Tok,
    line: usize,
}

/// A function item with a body found by [`scan`].
#[derive(Debug, Clone, PartialEq)]
struct FnSpan {
    name: String,
    line: usize,
    lines: usize,
}

/// What [`scan`] finds in one file.
#[derive(Debug, Default)]
struct Scan {
    fns: Vec<FnSpan>,
    /// Names of `#[cfg(test)] mod x;` declarations (their files are test-only).
    test_mods: Vec<String>,
}

/// Splits source into identifier and punctuation tokens, dropping whitespace, comments,
/// string/char/byte literals (raw or not) and lifetimes.
fn lex(src: &str) -> Vec<Token> {
    let c: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let mut line = 1;
    // Advances over c[i], counting newlines.
    let step = |i: &mut usize, line: &mut usize| {
        if c[*i] == '\n' {
            *line += 1;
        }
        *i += 1;
    };
    while i < c.len() {
        let ch = c[i];
        let next = c.get(i + 1).copied();
        if ch.is_whitespace() {
            step(&mut i, &mut line);
        } else if ch == '/' && next == Some('/') {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && next == Some('*') {
            let mut depth = 0usize;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    step(&mut i, &mut line);
                }
            }
        } else if ch == '"' {
            skip_quoted(&c, &mut i, &mut line, '"');
        } else if ch == '\'' {
            skip_char_or_lifetime(&c, &mut i, &mut line);
        } else if ch.is_alphanumeric() || ch == '_' {
            let start = i;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            let word: String = c[start..i].iter().collect();
            let raw_prefix = matches!(word.as_str(), "r" | "br" | "cr");
            let quote_prefix = matches!(word.as_str(), "b" | "c" | "r" | "br" | "cr");
            if raw_prefix && raw_string_hashes(&c, i).is_some() {
                skip_raw_string(&c, &mut i, &mut line);
            } else if quote_prefix && c.get(i) == Some(&'"') {
                skip_quoted(&c, &mut i, &mut line, '"');
            } else if word == "b" && c.get(i) == Some(&'\'') {
                skip_quoted(&c, &mut i, &mut line, '\'');
            } else {
                out.push(Token {
                    tok: Tok::Ident(word),
                    line,
                });
            }
        } else {
            out.push(Token {
                tok: Tok::Punct(ch),
                line,
            });
            i += 1;
        }
    }
    out
}

/// Skips a literal opened by `quote` at `c[*i]` up to its closing `quote`, honouring `\` escapes.
fn skip_quoted(c: &[char], i: &mut usize, line: &mut usize, quote: char) {
    *i += 1;
    while *i < c.len() {
        match c[*i] {
            '\\' => {
                // An escaped newline (a string continuation) still ends a line.
                if c.get(*i + 1) == Some(&'\n') {
                    *line += 1;
                }
                *i += 2;
                continue;
            }
            '\n' => *line += 1,
            ch if ch == quote => {
                *i += 1;
                return;
            }
            _ => {}
        }
        *i += 1;
    }
}

/// The number of `#`s of a raw string whose `#`s or `"` start at `c[i]`, if one starts there.
fn raw_string_hashes(c: &[char], i: usize) -> Option<usize> {
    let mut j = i;
    while c.get(j) == Some(&'#') {
        j += 1;
    }
    (c.get(j) == Some(&'"')).then_some(j - i)
}

/// Skips a raw string whose `#`s or `"` start at `c[*i]` (the `r` prefix already consumed).
fn skip_raw_string(c: &[char], i: &mut usize, line: &mut usize) {
    let hashes = raw_string_hashes(c, *i).unwrap_or(0);
    *i += hashes + 1;
    while *i < c.len() {
        if c[*i] == '"' && (1..=hashes).all(|k| c.get(*i + k) == Some(&'#')) {
            *i += hashes + 1;
            return;
        }
        if c[*i] == '\n' {
            *line += 1;
        }
        *i += 1;
    }
}

/// Skips a char literal (`'a'`, `'\n'`, `'\''`) or a lifetime/label (`'a`) at `c[*i]`.
fn skip_char_or_lifetime(c: &[char], i: &mut usize, line: &mut usize) {
    let is_char = c.get(*i + 1) == Some(&'\\') || c.get(*i + 2) == Some(&'\'');
    if is_char {
        skip_quoted(c, i, line, '\'');
    } else {
        *i += 1;
        while *i < c.len() && (c[*i].is_alphanumeric() || c[*i] == '_') {
            *i += 1;
        }
    }
}

/// The index of the token closing the bracket opened at `toks[open]`, or the last index when
/// the source is unbalanced.
fn matching(toks: &[Token], open: usize) -> usize {
    let (o, cl) = match toks[open].tok {
        Tok::Punct('(') => ('(', ')'),
        Tok::Punct('[') => ('[', ']'),
        _ => ('{', '}'),
    };
    let mut depth = 0usize;
    for (j, t) in toks.iter().enumerate().skip(open) {
        if t.tok == Tok::Punct(o) {
            depth += 1;
        } else if t.tok == Tok::Punct(cl) {
            depth -= 1;
            if depth == 0 {
                return j;
            }
        }
    }
    toks.len().saturating_sub(1)
}

/// Whether an attribute's tokens (between `[` and `]`) mark test-only code: `test`,
/// `tokio::test(..)`, `cfg(test)` or `cfg(all(test, ..))`.
fn is_test_attr(toks: &[Token]) -> bool {
    let text: String = toks
        .iter()
        .map(|t| match &t.tok {
            Tok::Ident(s) => s.clone(),
            Tok::Punct(p) => p.to_string(),
        })
        .collect();
    let path = text.split('(').next().unwrap_or("");
    path == "test"
        || path.ends_with("::test")
        || text == "cfg(test)"
        || text.starts_with("cfg(all(test,")
}

/// From `toks[i]`, the first item of test-only code: returns the index after it. A `{` block
/// is skipped whole; the item ends at `;` or `,` outside brackets, or before an enclosing `}`.
fn skip_item(toks: &[Token], mut i: usize) -> usize {
    while i < toks.len() {
        match toks[i].tok {
            Tok::Punct('(') | Tok::Punct('[') => i = matching(toks, i) + 1,
            Tok::Punct('{') => return matching(toks, i) + 1,
            Tok::Punct(';') | Tok::Punct(',') => return i + 1,
            Tok::Punct('}') => return i,
            _ => i += 1,
        }
    }
    i
}

/// Finds the function items with bodies outside test code in one file's source.
fn scan(src: &str) -> Scan {
    let toks = lex(src);
    let mut out = Scan::default();
    let mut i = 0;
    while i < toks.len() {
        let ident = |k: usize| match toks.get(k).map(|t| &t.tok) {
            Some(Tok::Ident(s)) => Some(s.as_str()),
            _ => None,
        };
        let punct = |k: usize| match toks.get(k).map(|t| &t.tok) {
            Some(Tok::Punct(p)) => Some(*p),
            _ => None,
        };
        if punct(i) == Some('#') {
            let inner = punct(i + 1) == Some('!');
            let open = if inner { i + 2 } else { i + 1 };
            if punct(open) != Some('[') {
                i += 1;
                continue;
            }
            let close = matching(&toks, open);
            if !is_test_attr(&toks[open + 1..close]) {
                i = close + 1;
            } else if inner {
                // `#![cfg(test)]`: the rest of this file is test-only.
                break;
            } else if ident(close + 1) == Some("mod") && punct(close + 3) == Some(';') {
                out.test_mods.extend(ident(close + 2).map(str::to_string));
                i = close + 4;
            } else {
                i = skip_item(&toks, close + 1);
            }
            continue;
        }
        if ident(i) == Some("fn") {
            if let Some(name) = ident(i + 1) {
                if let Some(close) = fn_body_end(&toks, i + 2) {
                    let line = toks[i].line;
                    out.fns.push(FnSpan {
                        name: name.to_string(),
                        line,
                        lines: toks[close].line - line + 1,
                    });
                }
            }
        }
        i += 1;
    }
    out
}

/// From just after a `fn` item's name, the index of its body's closing `}`, or `None` when
/// the item has no body (a `;` comes first).
fn fn_body_end(toks: &[Token], mut i: usize) -> Option<usize> {
    while i < toks.len() {
        match toks[i].tok {
            Tok::Punct('(') | Tok::Punct('[') => i = matching(toks, i) + 1,
            Tok::Punct('{') => return Some(matching(toks, i)),
            Tok::Punct(';') => return None,
            _ => i += 1,
        }
    }
    None
}

/// Every `.rs` file under `dir`, recursively, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let entries = std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display()));
        for entry in entries {
            let path = entry.expect("read_dir entry").path();
            if path.is_dir() {
                todo.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The directory holding the files of `file`'s child modules (`a/b.rs` -> `a/b/`).
fn child_module_dir(file: &Path) -> PathBuf {
    let parent = file.parent().unwrap_or(Path::new(""));
    let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    if matches!(stem, "mod" | "lib" | "main") {
        parent.to_path_buf()
    } else {
        parent.join(stem)
    }
}

/// Every function over [`MAX_LINES`] under `src/`, as (path relative to the crate root, fn),
/// and the number of functions looked at.
fn long_functions() -> (Vec<(String, FnSpan)>, usize) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let files = rust_files(&root.join("src"));
    let mut scans = Vec::new();
    let mut test_paths = BTreeSet::new();
    for file in &files {
        let src =
            std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let s = scan(&src);
        for m in &s.test_mods {
            let dir = child_module_dir(file);
            test_paths.insert(dir.join(format!("{m}.rs")));
            test_paths.insert(dir.join(m));
        }
        scans.push((file, s));
    }
    let mut long = Vec::new();
    let mut count = 0;
    for (file, s) in scans {
        if test_paths.iter().any(|p| file.starts_with(p)) {
            continue;
        }
        let rel = file
            .strip_prefix(root)
            .unwrap_or(file)
            .display()
            .to_string();
        count += s.fns.len();
        long.extend(
            s.fns
                .into_iter()
                .filter(|f| f.lines > MAX_LINES)
                .map(|f| (rel.clone(), f)),
        );
    }
    (long, count)
}

#[test]
fn no_function_over_the_limit() {
    let (long, count) = long_functions();
    assert!(
        count > 1000,
        "only {count} functions found under src/: is the scanner broken?"
    );
    let over: Vec<String> = long
        .iter()
        .filter(|(file, f)| !ALLOWED.contains(&(file.as_str(), f.name.as_str())))
        .map(|(file, f)| format!("{file}:{} fn {}: {} lines", f.line, f.name, f.lines))
        .collect();
    assert!(
        over.is_empty(),
        "functions over {MAX_LINES} lines (split them into named steps):\n{}",
        over.join("\n")
    );
    let stale: Vec<String> = ALLOWED
        .iter()
        .filter(|(file, name)| !long.iter().any(|(lf, f)| lf == file && f.name == *name))
        .map(|(file, name)| format!("{file} fn {name}"))
        .collect();
    assert!(
        stale.is_empty(),
        "ALLOWED lists functions no longer over {MAX_LINES} lines; remove them:\n{}",
        stale.join("\n")
    );
}

#[test]
fn scanner_measures_a_long_function() {
    let body = "    let x = 1;\n".repeat(130);
    let src = format!("/// doc\n#[inline]\npub fn long() {{\n{body}}}\n\nfn short() {{}}\n");
    let s = scan(&src);
    assert_eq!(
        s.fns,
        vec![
            FnSpan {
                name: "long".into(),
                line: 3,
                lines: 132
            },
            FnSpan {
                name: "short".into(),
                line: 136,
                lines: 1
            },
        ]
    );
}

#[test]
fn scanner_is_not_confused_by_literals_and_comments() {
    let src = r####"
fn a<'a>(x: &'a str) -> char {
    let s = "}}} \" {";
    let r = r#"}" {"#;
    let rr = r##"}"# {"##;
    let b = b"}";
    let br = br#"}"#;
    let c = '}';
    let d = b'{';
    let e = '\'';
    let f = '\\';
    'outer: loop { break 'outer; }
    // }
    /* } /* nested } */ } */
    let g: fn(u8) -> u8 = |v| v;
    let h = |v: u8| { v };
    '{'
}
fn b() {
    fn nested() {
    }
}
trait T { fn decl(&self); fn provided(&self) { } }
"####;
    let s = scan(src);
    let got: Vec<(&str, usize, usize)> = s
        .fns
        .iter()
        .map(|f| (f.name.as_str(), f.line, f.lines))
        .collect();
    assert_eq!(
        got,
        vec![
            ("a", 2, 17),
            ("b", 19, 4),
            ("nested", 20, 2),
            ("provided", 23, 1)
        ]
    );
}

#[test]
fn scanner_skips_test_code() {
    let src = "
fn kept() {}
#[cfg(test)]
#[allow(dead_code)]
mod tests {
    fn helper() {}
    #[test]
    fn t() {}
}
#[test]
fn top_test() { let a = [0u8; 4]; }
#[tokio::test(flavor = \"current_thread\")]
async fn async_test() {}
#[cfg(test)]
mod more;
struct S {
    #[cfg(test)]
    field: u8,
    other: u8,
}
fn also_kept() {}
";
    let s = scan(src);
    let names: Vec<&str> = s.fns.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, vec!["kept", "also_kept"]);
    assert_eq!(s.test_mods, vec!["more".to_string()]);
}

#[test]
fn module_files_map_to_their_directories() {
    assert_eq!(
        child_module_dir(Path::new("src/yaml.rs")),
        Path::new("src/yaml")
    );
    assert_eq!(
        child_module_dir(Path::new("src/kubelet/mod.rs")),
        Path::new("src/kubelet")
    );
    assert_eq!(child_module_dir(Path::new("src/lib.rs")), Path::new("src"));
}
