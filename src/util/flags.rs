//! The one command-line lexer of the `nanolet` binary (hand-written, no clap), following Go's
//! pflag (the kubelet's and kubectl's flag library): `--flag=value`, `--flag value` (the next
//! argument is the value even when it starts with `-`), boolean `--flag` / `--flag=false` (Go's
//! `strconv.ParseBool` spellings), shorthands `-v 3`, `-v=3`, `-v3`, combined boolean shorthands
//! (`-Ap`), repeated flags (each occurrence is reported; the caller decides whether the last
//! wins or they add up), positional arguments between flags, and `--` ending the flags.
//!
//! It only splits: each command keeps its own table of [`Flag`]s (or of larger definitions that
//! carry one, see [`Spec`]) and decides what the values mean and how errors read.

/// How a flag takes its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `--flag` (true) or `--flag=true|false`; never takes the next argument.
    Bool,
    /// `--flag value` or `--flag=value`.
    Value,
    /// A value flag whose occurrences add up (lexed as [`Kind::Value`]).
    Repeated,
}

/// A flag's name, shorthand and kind: what the lexer needs to know of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flag {
    /// The long name, without `--`.
    pub name: &'static str,
    pub shorthand: Option<char>,
    pub kind: Kind,
}

impl Flag {
    /// A boolean flag.
    pub const fn bool(name: &'static str) -> Flag {
        Flag {
            name,
            shorthand: None,
            kind: Kind::Bool,
        }
    }

    /// A flag with a value.
    pub const fn value(name: &'static str) -> Flag {
        Flag {
            name,
            shorthand: None,
            kind: Kind::Value,
        }
    }

    /// A value flag given any number of times.
    pub const fn repeated(name: &'static str) -> Flag {
        Flag {
            name,
            shorthand: None,
            kind: Kind::Repeated,
        }
    }

    /// The same flag with the one-letter shorthand `-c`.
    pub const fn short(self, c: char) -> Flag {
        Flag {
            shorthand: Some(c),
            ..self
        }
    }

    /// Whether the flag takes a value (everything but booleans).
    pub const fn takes_value(&self) -> bool {
        !matches!(self.kind, Kind::Bool)
    }
}

/// An entry of a flag table: a [`Flag`], or a larger definition that carries one.
pub trait Spec {
    fn flag(&self) -> &Flag;
}

impl Spec for Flag {
    fn flag(&self) -> &Flag {
        self
    }
}

/// Why the arguments do not lex. The texts are pflag's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FlagError {
    /// `--nope` or `-x` (as written, without any `=value`).
    #[error("unknown flag: {0}")]
    Unknown(String),
    /// A value flag at the end of the arguments (as written: `--tail`, `-v`).
    #[error("flag needs an argument: {0}")]
    MissingValue(String),
    /// `--flag=maybe` for a boolean flag.
    #[error("{flag}: invalid boolean {value:?}: use true or false")]
    InvalidBool { flag: String, value: String },
}

/// One lexed item, in argument order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Arg<'s, S> {
    /// A flag and its value; a boolean's value is `"true"` or `"false"`.
    Flag { spec: &'s S, value: String },
    /// An argument that is not a flag (`-` alone is one too).
    Positional(String),
    /// `--` was given: the arguments after it, verbatim. Always the last item.
    Rest(Vec<String>),
}

/// Go's `strconv.ParseBool`.
pub fn parse_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

/// Lexes `args` against `specs`, one [`Arg`] (or the first error) at a time, so a caller that
/// refuses positional arguments reports the first problem in argument order.
pub fn lex<'s, 'a, S: Spec>(specs: &'s [S], args: &'a [String]) -> Lexer<'s, 'a, S> {
    Lexer {
        specs,
        args,
        next: 0,
        shorthands: String::new(),
    }
}

/// The iterator [`lex`] returns.
pub struct Lexer<'s, 'a, S> {
    specs: &'s [S],
    args: &'a [String],
    /// Index of the next argument to read.
    next: usize,
    /// Boolean shorthands combined in one argument and not yet returned (`-Ap`: `p`).
    shorthands: String,
}

impl<'s, S: Spec> Lexer<'s, '_, S> {
    fn by_name(&self, name: &str) -> Option<&'s S> {
        self.specs.iter().find(|s| s.flag().name == name)
    }

    fn by_shorthand(&self, c: char) -> Option<&'s S> {
        self.specs.iter().find(|s| s.flag().shorthand == Some(c))
    }

    /// The value of a flag written as `shown` (`--name` or `-c`): the inline one, else the
    /// next argument (whatever it looks like).
    fn value(
        &mut self,
        spec: &'s S,
        inline: Option<&str>,
        shown: impl Fn() -> String,
    ) -> Result<Arg<'s, S>, FlagError> {
        let value = match (spec.flag().kind, inline) {
            (Kind::Bool, None) => "true".to_string(),
            (Kind::Bool, Some(v)) => match parse_bool(v) {
                Some(b) => b.to_string(),
                None => {
                    return Err(FlagError::InvalidBool {
                        flag: shown(),
                        value: v.to_string(),
                    });
                }
            },
            (_, Some(v)) => v.to_string(),
            (_, None) => match self.args.get(self.next) {
                Some(v) => {
                    self.next += 1;
                    v.clone()
                }
                None => return Err(FlagError::MissingValue(shown())),
            },
        };
        Ok(Arg::Flag { spec, value })
    }

    /// The first of `body`'s shorthands (`body` is an argument without its `-`); boolean ones
    /// may be followed by more shorthands, kept for the next call.
    fn shorthand(&mut self, body: &str) -> Result<Arg<'s, S>, FlagError> {
        let mut chars = body.chars();
        let c = chars.next().unwrap_or('-');
        let rest = chars.as_str();
        let spec = self
            .by_shorthand(c)
            .ok_or_else(|| FlagError::Unknown(format!("-{c}")))?;
        let shown = || format!("-{c}");
        if let Some(v) = rest.strip_prefix('=') {
            self.value(spec, Some(v), shown)
        } else if rest.is_empty() {
            self.value(spec, None, shown)
        } else if spec.flag().kind == Kind::Bool {
            self.shorthands = rest.to_string();
            self.value(spec, None, shown)
        } else {
            self.value(spec, Some(rest), shown) // `-v3`
        }
    }
}

impl<'s, S: Spec> Iterator for Lexer<'s, '_, S> {
    type Item = Result<Arg<'s, S>, FlagError>;

    fn next(&mut self) -> Option<Self::Item> {
        if !self.shorthands.is_empty() {
            let body = std::mem::take(&mut self.shorthands);
            return Some(self.shorthand(&body));
        }
        let arg = self.args.get(self.next)?;
        self.next += 1;
        if arg == "--" {
            let rest = self.args[self.next..].to_vec();
            self.next = self.args.len();
            return Some(Ok(Arg::Rest(rest)));
        }
        if let Some(body) = arg.strip_prefix("--") {
            let (name, inline) = match body.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (body, None),
            };
            let Some(spec) = self.by_name(name) else {
                return Some(Err(FlagError::Unknown(format!("--{name}"))));
            };
            return Some(self.value(spec, inline, || format!("--{name}")));
        }
        match arg.strip_prefix('-').filter(|b| !b.is_empty()) {
            Some(body) => Some(self.shorthand(body)),
            None => Some(Ok(Arg::Positional(arg.clone()))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FLAGS: &[Flag] = &[
        Flag::bool("all").short('A'),
        Flag::bool("previous").short('p'),
        Flag::value("v").short('v'),
        Flag::value("tail"),
        Flag::repeated("header"),
    ];

    fn lexed(args: &[&str]) -> Result<Vec<String>, FlagError> {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        lex(FLAGS, &args)
            .map(|a| {
                a.map(|a| match a {
                    Arg::Flag { spec, value } => format!("{}={value}", spec.name),
                    Arg::Positional(p) => format!("pos:{p}"),
                    Arg::Rest(r) => format!("rest:{}", r.join(" ")),
                })
            })
            .collect()
    }

    #[test]
    fn pflag_syntaxes() {
        let ok = |args: &[&str], want: &[&str]| assert_eq!(lexed(args).unwrap(), want, "{args:?}");
        ok(&["--tail=5", "--tail", "6"], &["tail=5", "tail=6"]);
        ok(&["--tail", "--all"], &["tail=--all"]);
        ok(&["--tail="], &["tail="]);
        ok(
            &["--all", "--all=false", "--all=T", "--all=0"],
            &["all=true", "all=false", "all=true", "all=false"],
        );
        ok(
            &["-v", "3", "-v=4", "-v5", "-v="],
            &["v=3", "v=4", "v=5", "v="],
        );
        ok(
            &["-Ap", "-pv3", "-A=false"],
            &[
                "all=true",
                "previous=true",
                "previous=true",
                "v=3",
                "all=false",
            ],
        );
        ok(
            &["a", "-", "", "--header=x", "b", "--header", "y"],
            &["pos:a", "pos:-", "pos:", "header=x", "pos:b", "header=y"],
        );
        ok(
            &["--all", "--", "--tail", "x"],
            &["all=true", "rest:--tail x"],
        );
        ok(&["--"], &["rest:"]);
    }

    #[test]
    fn errors_name_the_flag_as_written() {
        let err = |args: &[&str]| lexed(args).unwrap_err().to_string();
        assert_eq!(err(&["--nope=1"]), "unknown flag: --nope");
        assert_eq!(err(&["-x"]), "unknown flag: -x");
        assert_eq!(err(&["-Ax"]), "unknown flag: -x");
        assert_eq!(err(&["--tail"]), "flag needs an argument: --tail");
        assert_eq!(err(&["-v"]), "flag needs an argument: -v");
        assert_eq!(
            err(&["--all=maybe"]),
            "--all: invalid boolean \"maybe\": use true or false"
        );
        assert_eq!(err(&["-A="]), "-A: invalid boolean \"\": use true or false");
        // Items before the error are returned first: callers see problems in order.
        let args: Vec<String> = ["x", "--nope"].iter().map(|s| s.to_string()).collect();
        let mut it = lex(FLAGS, &args);
        assert_eq!(it.next(), Some(Ok(Arg::Positional("x".into()))));
        assert!(matches!(it.next(), Some(Err(FlagError::Unknown(_)))));
    }
}
