//! The client commands of the `nanolet` binary: `get pods`, `describe pod`, `logs` talk to a
//! running agent's read-only port (the kubectl-compatible API of [`crate::server::api`]);
//! `validate` works offline, exactly as `nanolet run` decodes, defaults and validates manifests.
//!
//! Output reads like kubectl's. Errors are returned as `anyhow` (this is the CLI edge); `main`
//! prints them and exits 1.

use std::io::{Read, Write};
use std::path::Path;

use anyhow::{Context, anyhow, bail};
use serde_json::Value;

use crate::config::SourceKind;
use crate::config::naming::{DecodedDoc, decode_manifest_with_notes, make_static_pod};
use crate::util::flags::{self, Arg, Flag};

pub const DEFAULT_SERVER: &str = "http://127.0.0.1:10255";

pub const USAGE: &str = "Client commands (talk to a running `nanolet run` on its read-only port):
  nanolet get pods [NAME] [-A] [-n NS] [-l SELECTOR] [-o wide|json|yaml|name]
  nanolet describe pod NAME [-n NS]
  nanolet logs NAME [-c CONTAINER] [-p|--previous] [--tail N] [-f|--follow] [--timestamps] [-n NS]
  nanolet exec NAME [-i] [-t] [-c CONTAINER] [-n NS] [--timeout 5m] -- COMMAND [ARG...]
                               run a command in a container (CRI ExecSync on containerd's socket,
                               --container-runtime-endpoint; needs root); exits with its code;
                               -i/-t: interactive (stdin, TTY) through CRI streaming
  nanolet port-forward NAME [LOCAL:]REMOTE... [-n NS] [--address 127.0.0.1]
                               forward local ports to a pod (CRI PortForward; needs root)
  nanolet validate FILE...     offline: decode, default and validate manifests as `run` does
  nanolet images import|ls     see `nanolet images help`
Common flags: --server URL (default http://127.0.0.1:10255), --token-file FILE (bearer token
for a read-only port started with --read-only-token-file).
";

/// Flags shared by the client commands, plus the positional arguments left.
#[derive(Debug, Default)]
struct Opts {
    server: Option<String>,
    token_file: Option<String>,
    namespace: Option<String>,
    all_namespaces: bool,
    output: String,
    selector: String,
    container: String,
    previous: bool,
    follow: bool,
    timestamps: bool,
    tail: Option<i64>,
    hostname: Option<String>,
    endpoint: Option<String>,
    timeout: Option<String>,
    /// exec -i: pass stdin on.
    stdin: bool,
    /// exec -t: a TTY.
    tty: bool,
    /// port-forward --address.
    address: Option<String>,
    /// validate --runtime-class-dir.
    runtime_class_dir: Option<String>,
    positional: Vec<String>,
    /// After `--`.
    command: Vec<String>,
}

/// The client commands' flags (kubectl's names and shorthands).
const FLAGS: &[Flag] = &[
    Flag::value("server").short('s'),
    Flag::value("token-file"),
    Flag::value("namespace").short('n'),
    Flag::bool("all-namespaces").short('A'),
    Flag::value("output").short('o'),
    Flag::value("selector").short('l'),
    Flag::value("container").short('c'),
    Flag::bool("previous").short('p'),
    Flag::bool("follow").short('f'),
    Flag::bool("timestamps"),
    Flag::value("tail"),
    Flag::value("hostname-override"),
    Flag::value("container-runtime-endpoint"),
    Flag::value("timeout"),
    Flag::bool("stdin").short('i'),
    Flag::bool("tty").short('t'),
    Flag::value("address"),
    Flag::value("runtime-class-dir"),
];

/// Lexes the arguments (`util::flags`, Go's pflag conventions); everything after `--` is the
/// command `exec` runs.
fn parse_opts(args: &[String]) -> anyhow::Result<Opts> {
    let mut o = Opts::default();
    for arg in flags::lex(FLAGS, args) {
        let (name, value) = match arg? {
            Arg::Flag { spec, value } => (spec.name, value),
            Arg::Positional(p) => {
                o.positional.push(p);
                continue;
            }
            Arg::Rest(command) => {
                o.command = command;
                continue;
            }
        };
        match name {
            "server" => o.server = Some(value),
            "token-file" => o.token_file = Some(value),
            "namespace" => o.namespace = Some(value),
            "all-namespaces" => o.all_namespaces = value == "true",
            "output" => o.output = value,
            "selector" => o.selector = value,
            "container" => o.container = value,
            "previous" => o.previous = value == "true",
            "follow" => o.follow = value == "true",
            "timestamps" => o.timestamps = value == "true",
            "tail" => {
                o.tail = Some(
                    value
                        .parse()
                        .map_err(|_| anyhow!("--tail: invalid number {value:?}"))?,
                );
            }
            "hostname-override" => o.hostname = Some(value),
            "container-runtime-endpoint" => o.endpoint = Some(value),
            "timeout" => o.timeout = Some(value),
            "stdin" => o.stdin = value == "true",
            "tty" => o.tty = value == "true",
            "address" => o.address = Some(value),
            "runtime-class-dir" => o.runtime_class_dir = Some(value),
            other => bail!("unknown flag: --{other}"),
        }
    }
    Ok(o)
}

/// `nanolet <command> --help` for the client commands.
fn command_help(command: &str) -> Option<&'static str> {
    Some(match command {
        "get" => "Usage: nanolet get pods [NAME] [-A] [-n NS] [-l SELECTOR] [-o wide|json|yaml|name]
List pods (or one pod) from a running `nanolet run`, as kubectl prints them.
  -A, --all-namespaces     every namespace
  -n, --namespace NS       this namespace (default: default)
  -l, --selector SELECTOR  label selector (a=b,c!=d,e)
  -o, --output FORMAT      wide, json, yaml (quoted for YAML 1.1 readers) or name
  -s, --server URL         the read-only port (default http://127.0.0.1:10255)
      --token-file FILE    bearer token for a port started with --read-only-token-file
",
        "describe" => "Usage: nanolet describe pod NAME [-n NS]
Show a pod's details, containers and events, as kubectl describe does.
  -n, --namespace NS       the pod's namespace (default: default)
  -s, --server URL         the read-only port (default http://127.0.0.1:10255)
      --token-file FILE    bearer token for a port started with --read-only-token-file
",
        "logs" | "log" => "Usage: nanolet logs NAME [-c CONTAINER] [-p] [--tail N] [-f] [--timestamps] [-n NS]
Print a container's log (the CRI log files under --pod-logs-dir, through the read-only port).
  -c, --container NAME     the container (required when the pod has several)
  -p, --previous           the previous instance's log
      --tail N             the last N lines
  -f, --follow             keep streaming new lines
      --timestamps         prefix each line with its RFC 3339 time
  -n, --namespace NS       the pod's namespace (default: default)
  -s, --server URL         the read-only port (default http://127.0.0.1:10255)
      --token-file FILE    bearer token for a port started with --read-only-token-file
",
        "exec" => "Usage: nanolet exec NAME [-i] [-t] [-c CONTAINER] [-n NS] [--timeout 5m] -- COMMAND [ARG...]
Run a command in a container (CRI ExecSync on containerd's socket; needs root) and exit with
its exit code. With -i or -t the command runs interactively through the runtime's streaming
server (CRI Exec, WebSocket v4.channel.k8s.io): stdin, a TTY in raw mode, terminal resizes.
  -i, --stdin                          pass stdin to the command (v4 cannot signal its end)
  -t, --tty                            allocate a TTY (dropped when stdin is not a terminal)
  -c, --container NAME                 the container (needed when the pod has several)
  -n, --namespace NS                   the pod's namespace (default: default)
      --timeout DURATION               give up after this long (default 5m)
      --container-runtime-endpoint EP  containerd's socket (default unix:///run/containerd/containerd.sock)
",
        "port-forward" => "Usage: nanolet port-forward NAME [LOCAL:]REMOTE... [-n NS] [--address ADDR]
Forward local ports to ports of a pod (CRI PortForward on containerd's socket, WebSocket to its
streaming server; needs root), one stream per connection, until interrupted.
  LOCAL:REMOTE                         listen on LOCAL, forward to REMOTE (`:REMOTE`: any free port)
  -n, --namespace NS                   the pod's namespace (default: default)
      --address ADDR                   the address to listen on (default 127.0.0.1)
      --container-runtime-endpoint EP  containerd's socket (default unix:///run/containerd/containerd.sock)
",
        "validate" => "Usage: nanolet validate FILE...
Offline: read, decode, default and validate manifests exactly as `nanolet run` does (regular
files of at most 10 MiB; YAML 1.1 as the kubelet reads it). Prints `FILE: valid` or
`FILE: field: reason` for each problem; exit 1 when any file is invalid.
      --hostname-override NAME  the node name for the static pods' names (default: hostname)
      --runtime-class-dir DIR   RuntimeClasses pods may name (default /etc/nanolet/runtimeclasses);
                                a RuntimeClass manifest given as FILE is validated too
",
        _ => return None,
    })
}

/// Dispatches `nanolet <command> args...` for the client commands. `Ok(None)` when `command`
/// is not one of them.
pub fn run(command: &str, args: &[String]) -> Option<anyhow::Result<()>> {
    let wants_help = args
        .iter()
        .take_while(|a| *a != "--")
        .any(|a| a == "-h" || a == "--help");
    if wants_help {
        if let Some(help) = command_help(command) {
            print!("{help}");
            return Some(Ok(()));
        }
    }
    let r = match command {
        "get" => parse_opts(args).and_then(|o| get(&o)),
        "describe" => parse_opts(args).and_then(|o| describe(&o)),
        "logs" | "log" => parse_opts(args).and_then(|o| logs(&o)),
        "validate" => parse_opts(args).and_then(|o| validate(&o)),
        "exec" => parse_opts(args).and_then(|o| exec(&o)),
        "port-forward" => parse_opts(args).and_then(|o| port_forward(&o)),
        "images" => crate::images::cli::run(args),
        _ => return None,
    };
    Some(r)
}

// ---------------------------------------------------------------------------------------------
// HTTP

struct Client {
    server: String,
    token: Option<String>,
}

impl Client {
    fn new(o: &Opts) -> anyhow::Result<Client> {
        let server = o
            .server
            .clone()
            .unwrap_or_else(|| DEFAULT_SERVER.to_string())
            .trim_end_matches('/')
            .to_string();
        let token = match &o.token_file {
            Some(p) => Some(
                std::fs::read_to_string(p)
                    .with_context(|| format!("reading the token file {p}"))?
                    .trim()
                    .to_string(),
            ),
            None => None,
        };
        Ok(Client { server, token })
    }

    /// GET `path`; returns the body reader for 2xx, an error with the server's Status message
    /// otherwise, and a clear error when the agent cannot be reached.
    fn get(
        &self,
        path: &str,
        accept: &str,
        streaming: bool,
    ) -> anyhow::Result<Box<dyn Read + Send>> {
        let url = format!("{}{path}", self.server);
        let mut cfg = ureq::Agent::config_builder().http_status_as_error(false);
        if !streaming {
            cfg = cfg.timeout_global(Some(std::time::Duration::from_secs(60)));
        } else {
            cfg = cfg.timeout_connect(Some(std::time::Duration::from_secs(10)));
        }
        let agent = cfg.build().new_agent();
        let mut req = agent.get(&url).header("Accept", accept);
        if let Some(t) = &self.token {
            req = req.header("Authorization", &format!("Bearer {t}"));
        }
        let resp = req.call().map_err(|e| {
            anyhow!(
                "cannot reach the nanolet agent at {}: {e}\n(is `nanolet run` running with its read-only port there? --server sets the address)",
                self.server
            )
        })?;
        let status = resp.status().as_u16();
        let body = resp.into_body().into_reader();
        if (200..300).contains(&status) {
            return Ok(Box::new(body));
        }
        let mut text = String::new();
        let _ = body.take(64 * 1024).read_to_string(&mut text);
        let msg = match serde_json::from_str::<Value>(&text) {
            Ok(v) if v["kind"] == "Status" => format!(
                "Error from server ({}): {}",
                v["reason"].as_str().unwrap_or("Unknown"),
                v["message"].as_str().unwrap_or_default()
            ),
            _ if status == 401 => {
                "Error from server (Unauthorized): the read-only port requires a bearer token (--token-file)".to_string()
            }
            _ => format!("Error from server (HTTP {status}): {}", text.trim()),
        };
        Err(anyhow!(msg))
    }

    fn get_json(&self, path: &str, table: bool) -> anyhow::Result<Value> {
        let accept = if table {
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
        } else {
            "application/json"
        };
        let mut body = self.get(path, accept, false)?;
        let mut text = String::new();
        body.read_to_string(&mut text)
            .with_context(|| format!("reading the answer to {path}"))?;
        serde_json::from_str(&text).with_context(|| format!("decoding the answer to {path}"))
    }
}

fn encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn namespace(o: &Opts) -> String {
    o.namespace.clone().unwrap_or_else(|| "default".into())
}

// ---------------------------------------------------------------------------------------------
// get

/// Renders a meta.k8s.io Table like kubectl: upper-case headers, columns separated by three
/// spaces, priority > 0 columns only with `wide`, a NAMESPACE column first with `namespaced`.
pub fn render_table(t: &Value, wide: bool, namespaced: bool) -> String {
    let empty = vec![];
    let cols = t["columnDefinitions"].as_array().unwrap_or(&empty);
    let keep: Vec<usize> = cols
        .iter()
        .enumerate()
        .filter(|(_, c)| wide || c["priority"].as_i64().unwrap_or(0) == 0)
        .map(|(i, _)| i)
        .collect();
    let mut grid: Vec<Vec<String>> = vec![];
    let mut header: Vec<String> = vec![];
    if namespaced {
        header.push("NAMESPACE".into());
    }
    header.extend(
        keep.iter()
            .map(|i| cols[*i]["name"].as_str().unwrap_or_default().to_uppercase()),
    );
    grid.push(header);
    for row in t["rows"].as_array().unwrap_or(&empty) {
        let mut line = vec![];
        if namespaced {
            line.push(
                row["object"]["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            );
        }
        for i in &keep {
            let cell = &row["cells"][*i];
            line.push(match cell {
                Value::String(s) => s.clone(),
                Value::Null => "<none>".into(),
                other => other.to_string(),
            });
        }
        grid.push(line);
    }
    let ncols = grid[0].len();
    let widths: Vec<usize> = (0..ncols)
        .map(|c| {
            grid.iter()
                .map(|r| r.get(c).map_or(0, |s| s.chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in &grid {
        let mut line = String::new();
        for (c, cell) in r.iter().enumerate() {
            if c + 1 == ncols {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<w$}   ", w = widths[c]));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn get(o: &Opts) -> anyhow::Result<()> {
    let (kind, name) = match o.positional.as_slice() {
        [k] => (k.as_str(), None),
        [k, n] => (k.as_str(), Some(n.as_str())),
        [] => bail!("usage: nanolet get pods [NAME] [-A] [-o wide|json|yaml|name]"),
        _ => bail!("nanolet get takes one resource type and at most one name"),
    };
    if !matches!(kind, "pods" | "pod" | "po") {
        bail!(
            "nanolet get supports only pods (for nodes and events use kubectl --server {DEFAULT_SERVER})"
        );
    }
    let client = Client::new(o)?;
    let ns = namespace(o);
    let mut path = match (name, o.all_namespaces) {
        (Some(n), _) => format!("/api/v1/namespaces/{}/pods/{}", encode(&ns), encode(n)),
        (None, true) => "/api/v1/pods".to_string(),
        (None, false) => format!("/api/v1/namespaces/{}/pods", encode(&ns)),
    };
    if !o.selector.is_empty() {
        path.push_str(&format!("?labelSelector={}", encode(&o.selector)));
    }
    let mut stdout = std::io::stdout().lock();
    match o.output.as_str() {
        "" | "wide" => {
            let t = client.get_json(&path, true)?;
            if t["rows"].as_array().is_none_or(|r| r.is_empty()) {
                eprintln!(
                    "No resources found{}.",
                    if o.all_namespaces {
                        String::new()
                    } else {
                        format!(" in {ns} namespace")
                    }
                );
                return Ok(());
            }
            let namespaced = o.all_namespaces && name.is_none();
            write!(
                stdout,
                "{}",
                render_table(&t, o.output == "wide", namespaced)
            )?;
        }
        "json" => {
            let v = client.get_json(&path, false)?;
            writeln!(stdout, "{}", serde_json::to_string_pretty(&v)?)?;
        }
        "yaml" => {
            let v = client.get_json(&path, false)?;
            // Quoted wherever a YAML 1.1 reader (kubectl, the kubelet) would misread a string.
            write!(stdout, "{}", crate::yaml::to_yaml_string(&v))?;
        }
        "name" => {
            let v = client.get_json(&path, false)?;
            let items = match v["items"].as_array() {
                Some(a) => a.clone(),
                None => vec![v.clone()],
            };
            for p in items {
                writeln!(
                    stdout,
                    "pod/{}",
                    p["metadata"]["name"].as_str().unwrap_or_default()
                )?;
            }
        }
        other => bail!("unknown output format {other:?} (wide, json, yaml, name)"),
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// describe

fn state_lines(out: &mut String, label: &str, s: &Value) {
    let pad = " ".repeat(4);
    if let Some(r) = s.get("running").filter(|v| v.is_object()) {
        out.push_str(&format!("{pad}{label}:\tRunning\n"));
        if let Some(t) = r["startedAt"].as_str() {
            out.push_str(&format!("{pad}  Started:\t{t}\n"));
        }
    } else if let Some(t) = s.get("terminated").filter(|v| v.is_object()) {
        out.push_str(&format!("{pad}{label}:\tTerminated\n"));
        out.push_str(&format!(
            "{pad}  Reason:\t{}\n",
            t["reason"].as_str().unwrap_or("")
        ));
        out.push_str(&format!("{pad}  Exit Code:\t{}\n", t["exitCode"]));
        for (k, f) in [("Started", "startedAt"), ("Finished", "finishedAt")] {
            if let Some(v) = t[f].as_str() {
                out.push_str(&format!("{pad}  {k}:\t{v}\n"));
            }
        }
    } else if let Some(w) = s.get("waiting").filter(|v| v.is_object()) {
        out.push_str(&format!("{pad}{label}:\tWaiting\n"));
        out.push_str(&format!(
            "{pad}  Reason:\t{}\n",
            w["reason"].as_str().unwrap_or("")
        ));
        if let Some(m) = w["message"].as_str().filter(|m| !m.is_empty()) {
            out.push_str(&format!("{pad}  Message:\t{m}\n"));
        }
    } else if label == "State" {
        out.push_str(&format!("{pad}{label}:\tWaiting\n"));
    }
}

/// `label:` then one `key<sep>value` line per entry (kubectl: `=` for labels, `: ` for
/// annotations).
fn map_lines(out: &mut String, label: &str, m: &Value, sep: &str) {
    match m.as_object().filter(|m| !m.is_empty()) {
        None => out.push_str(&format!("{label}:\t<none>\n")),
        Some(m) => {
            for (i, (k, v)) in m.iter().enumerate() {
                let head = if i == 0 {
                    format!("{label}:")
                } else {
                    String::new()
                };
                out.push_str(&format!(
                    "{head}\t{k}{sep}{}\n",
                    v.as_str().unwrap_or_default()
                ));
            }
        }
    }
}

/// kubectl-describe-like text for a pod and its events.
pub fn describe_text(p: &Value, events: &[Value], now: std::time::SystemTime) -> String {
    let mut out = String::new();
    let md = &p["metadata"];
    let st = &p["status"];
    let s = |v: &Value| v.as_str().unwrap_or("").to_string();
    out.push_str(&format!("Name:\t{}\n", s(&md["name"])));
    out.push_str(&format!("Namespace:\t{}\n", s(&md["namespace"])));
    out.push_str(&format!(
        "Node:\t{}/{}\n",
        s(&p["spec"]["nodeName"]),
        s(&st["hostIP"])
    ));
    out.push_str(&format!("Start Time:\t{}\n", s(&st["startTime"])));
    map_lines(&mut out, "Labels", &md["labels"], "=");
    map_lines(&mut out, "Annotations", &md["annotations"], ": ");
    out.push_str(&format!("Status:\t{}\n", s(&st["phase"])));
    if let Some(r) = st["reason"].as_str().filter(|r| !r.is_empty()) {
        out.push_str(&format!("Reason:\t{r}\n"));
    }
    out.push_str(&format!("IP:\t{}\n", s(&st["podIP"])));
    let empty = vec![];
    for (title, specs, statuses) in [
        (
            "Init Containers",
            &p["spec"]["initContainers"],
            &st["initContainerStatuses"],
        ),
        (
            "Containers",
            &p["spec"]["containers"],
            &st["containerStatuses"],
        ),
    ] {
        let specs = specs.as_array().unwrap_or(&empty);
        if specs.is_empty() {
            continue;
        }
        out.push_str(&format!("{title}:\n"));
        for c in specs {
            let name = s(&c["name"]);
            let cs = statuses
                .as_array()
                .and_then(|a| a.iter().find(|x| x["name"] == c["name"]))
                .cloned()
                .unwrap_or(Value::Null);
            out.push_str(&format!("  {name}:\n"));
            out.push_str(&format!("    Container ID:\t{}\n", s(&cs["containerID"])));
            out.push_str(&format!("    Image:\t{}\n", s(&c["image"])));
            out.push_str(&format!("    Image ID:\t{}\n", s(&cs["imageID"])));
            if let Some(cmd) = c["command"].as_array() {
                out.push_str("    Command:\n");
                for a in cmd {
                    out.push_str(&format!("      {}\n", a.as_str().unwrap_or_default()));
                }
            }
            state_lines(&mut out, "State", &cs["state"]);
            state_lines(&mut out, "Last State", &cs["lastState"]);
            let ready = if cs["ready"] == true { "True" } else { "False" };
            out.push_str(&format!("    Ready:\t{ready}\n"));
            out.push_str(&format!(
                "    Restart Count:\t{}\n",
                cs["restartCount"].as_i64().unwrap_or(0)
            ));
        }
    }
    out.push_str("Conditions:\n  Type\tStatus\n");
    for c in st["conditions"].as_array().unwrap_or(&empty) {
        out.push_str(&format!("  {}\t{}\n", s(&c["type"]), s(&c["status"])));
    }
    out.push_str(&format!("QoS Class:\t{}\n", s(&st["qosClass"])));
    if events.is_empty() {
        out.push_str("Events:\t<none>\n");
    } else {
        out.push_str(
            "Events:\n  Type\tReason\tAge\tFrom\tMessage\n  ----\t------\t----\t----\t-------\n",
        );
        for e in events {
            let age = e["lastTimestamp"]
                .as_str()
                .and_then(crate::timeutil::parse_rfc3339)
                .map(|t| {
                    let d = now.duration_since(t).unwrap_or_default();
                    let count = e["count"].as_i64().unwrap_or(1);
                    let first = e["firstTimestamp"]
                        .as_str()
                        .and_then(crate::timeutil::parse_rfc3339)
                        .map(|f| now.duration_since(f).unwrap_or_default());
                    match first {
                        Some(f) if count > 1 => format!(
                            "{} (x{count} over {})",
                            crate::server::api::printers::human_duration(d),
                            crate::server::api::printers::human_duration(f)
                        ),
                        _ => crate::server::api::printers::human_duration(d),
                    }
                })
                .unwrap_or_else(|| "<unknown>".into());
            out.push_str(&format!(
                "  {}\t{}\t{age}\t{}\t{}\n",
                s(&e["type"]),
                s(&e["reason"]),
                s(&e["source"]["component"]),
                s(&e["message"])
            ));
        }
    }
    align_tabs(&out)
}

/// Aligns `\t`-separated columns within each run of lines with the same indentation and
/// number of tabs (a small tabwriter).
fn align_tabs(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < lines.len() {
        let tabs = lines[i].matches('\t').count();
        if tabs == 0 {
            out.push_str(lines[i]);
            out.push('\n');
            i += 1;
            continue;
        }
        let mut j = i;
        while j < lines.len() && lines[j].matches('\t').count() == tabs {
            j += 1;
        }
        let block: Vec<Vec<&str>> = lines[i..j]
            .iter()
            .map(|l| l.split('\t').collect())
            .collect();
        let widths: Vec<usize> = (0..tabs)
            .map(|c| {
                block
                    .iter()
                    .map(|r| r[c].chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        for r in &block {
            let mut line = String::new();
            for (c, cell) in r.iter().enumerate() {
                if c < tabs {
                    line.push_str(&format!("{cell:<w$}  ", w = widths[c]));
                } else {
                    line.push_str(cell);
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        i = j;
    }
    out
}

fn describe(o: &Opts) -> anyhow::Result<()> {
    let name = match o.positional.as_slice() {
        [k, n] if matches!(k.as_str(), "pod" | "pods" | "po") => n,
        _ => bail!("usage: nanolet describe pod NAME [-n NS]"),
    };
    let client = Client::new(o)?;
    let ns = namespace(o);
    let pod = client.get_json(
        &format!("/api/v1/namespaces/{}/pods/{}", encode(&ns), encode(name)),
        false,
    )?;
    let selector = format!(
        "involvedObject.name={},involvedObject.namespace={},involvedObject.uid={}",
        name,
        ns,
        pod["metadata"]["uid"].as_str().unwrap_or_default()
    );
    let events = client.get_json(
        &format!(
            "/api/v1/namespaces/{}/events?fieldSelector={}",
            encode(&ns),
            encode(&selector)
        ),
        false,
    )?;
    let events = events["items"].as_array().cloned().unwrap_or_default();
    print!(
        "{}",
        describe_text(&pod, &events, std::time::SystemTime::now())
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// logs

fn logs(o: &Opts) -> anyhow::Result<()> {
    let name = match o.positional.as_slice() {
        [n] => n,
        _ => bail!("usage: nanolet logs NAME [-c CONTAINER] [-p] [--tail N] [-f]"),
    };
    let client = Client::new(o)?;
    let ns = namespace(o);
    let mut q = vec![];
    if !o.container.is_empty() {
        q.push(format!("container={}", encode(&o.container)));
    } else {
        // As kubectl: the default-container annotation, else the first container.
        let pod = client.get_json(
            &format!("/api/v1/namespaces/{}/pods/{}", encode(&ns), encode(name)),
            false,
        )?;
        let c = pod["metadata"]["annotations"]["kubectl.kubernetes.io/default-container"]
            .as_str()
            .or_else(|| pod["spec"]["containers"][0]["name"].as_str())
            .unwrap_or_default()
            .to_string();
        q.push(format!("container={}", encode(&c)));
    }
    if o.previous {
        q.push("previous=true".into());
    }
    if o.follow {
        q.push("follow=true".into());
    }
    if o.timestamps {
        q.push("timestamps=true".into());
    }
    if let Some(n) = o.tail.filter(|n| *n >= 0) {
        q.push(format!("tailLines={n}"));
    }
    let path = format!(
        "/api/v1/namespaces/{}/pods/{}/log?{}",
        encode(&ns),
        encode(name),
        q.join("&")
    );
    let mut body = client.get(&path, "text/plain", o.follow)?;
    let mut stdout = std::io::stdout().lock();
    let mut buf = [0u8; 8192];
    loop {
        let n = match body.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(anyhow!("reading the log stream: {e}")),
        };
        stdout.write_all(&buf[..n])?;
        stdout.flush()?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// exec

/// The command's exit status, for `main` to exit with (nothing more is printed).
#[derive(Debug, thiserror::Error)]
#[error("command exited with code {0}")]
pub struct ExitStatus(pub i32);

fn exec(o: &Opts) -> anyhow::Result<()> {
    use crate::cri::{
        ContainerState, LABEL_CONTAINER_NAME, LABEL_MANAGED_BY, LABEL_POD_NAME,
        LABEL_POD_NAMESPACE, Runtime,
    };
    let name = match o.positional.as_slice() {
        [n] if !o.command.is_empty() => n,
        _ => bail!("usage: nanolet exec NAME [-i] [-t] [-c CONTAINER] -- COMMAND [ARG...]"),
    };
    let ns = namespace(o);
    let endpoint = o
        .endpoint
        .clone()
        .unwrap_or_else(|| crate::cri::DEFAULT_ENDPOINT.into());
    if o.tty {
        // Before the runtime client starts its threads, so they inherit the mask.
        super::stream::block_sigwinch();
    }
    let timeout = match &o.timeout {
        Some(t) => crate::timeutil::parse_go_duration(t).map_err(|e| anyhow!("--timeout: {e}"))?,
        None => std::time::Duration::from_secs(300),
    };
    let rt = crate::cri::client::CriRuntime::connect(&endpoint, std::time::Duration::from_secs(30))
        .map_err(|e| anyhow!("cannot reach the container runtime at {endpoint}: {e}"))?;
    let containers = rt
        .list_containers()
        .map_err(|e| anyhow!("listing containers at {endpoint}: {e}"))?;
    let mut mine: Vec<_> = containers
        .into_iter()
        .filter(|c| {
            c.labels.contains_key(LABEL_MANAGED_BY)
                && c.labels.get(LABEL_POD_NAME) == Some(name)
                && c.labels.get(LABEL_POD_NAMESPACE) == Some(&ns)
        })
        .collect();
    if mine.is_empty() {
        bail!("Error from server (NotFound): pods \"{name}\" not found");
    }
    let wanted = if o.container.is_empty() {
        // As kubectl: the first container of the spec is not known here; take the only one or
        // ask.
        let mut names: Vec<&str> = mine
            .iter()
            .filter_map(|c| c.labels.get(LABEL_CONTAINER_NAME).map(String::as_str))
            .collect();
        names.sort_unstable();
        names.dedup();
        match names.as_slice() {
            [one] => one.to_string(),
            _ => bail!(
                "pod {name} has several containers, choose one with -c: {}",
                names.join(", ")
            ),
        }
    } else {
        o.container.clone()
    };
    mine.retain(|c| {
        c.labels.get(LABEL_CONTAINER_NAME) == Some(&wanted) && c.state == ContainerState::Running
    });
    mine.sort_by_key(|c| c.attempt);
    let Some(c) = mine.last() else {
        bail!("container {wanted} is not running in pod {name}");
    };
    if o.stdin || o.tty {
        let code = super::stream::exec_interactive(&rt, &c.id, &o.command, o.stdin, o.tty)
            .map_err(|e| anyhow!("exec in container {wanted} of pod {name}: {e:#}"))?;
        if code != 0 {
            return Err(ExitStatus(code).into());
        }
        return Ok(());
    }
    let r = rt
        .exec_sync(&c.id, &o.command, timeout)
        .map_err(|e| anyhow!("exec in container {wanted} of pod {name}: {e}"))?;
    std::io::stdout().write_all(&r.stdout)?;
    std::io::stdout().flush()?;
    std::io::stderr().write_all(&r.stderr)?;
    if r.exit_code != 0 {
        return Err(ExitStatus(r.exit_code).into());
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// port-forward

fn port_forward(o: &Opts) -> anyhow::Result<()> {
    use crate::cri::{
        LABEL_MANAGED_BY, LABEL_POD_NAME, LABEL_POD_NAMESPACE, Runtime, SandboxState,
    };
    let (name, specs) = match o.positional.split_first() {
        Some((n, specs)) if !specs.is_empty() => (n, specs),
        _ => bail!("usage: nanolet port-forward NAME [LOCAL:]REMOTE..."),
    };
    let mappings = specs
        .iter()
        .map(|s| super::stream::parse_port_mapping(s))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let ns = namespace(o);
    let endpoint = o
        .endpoint
        .clone()
        .unwrap_or_else(|| crate::cri::DEFAULT_ENDPOINT.into());
    let rt = crate::cri::client::CriRuntime::connect(&endpoint, std::time::Duration::from_secs(30))
        .map_err(|e| anyhow!("cannot reach the container runtime at {endpoint}: {e}"))?;
    let mut sandboxes: Vec<_> = rt
        .list_pod_sandboxes()
        .map_err(|e| anyhow!("listing pod sandboxes at {endpoint}: {e}"))?
        .into_iter()
        .filter(|s| {
            s.labels.contains_key(LABEL_MANAGED_BY)
                && s.labels.get(LABEL_POD_NAME) == Some(name)
                && s.labels.get(LABEL_POD_NAMESPACE) == Some(&ns)
                && s.state == SandboxState::Ready
        })
        .collect();
    sandboxes.sort_by_key(|s| s.created_at);
    let Some(sb) = sandboxes.last() else {
        bail!("Error from server (NotFound): pods \"{name}\" not found");
    };
    let address = o.address.as_deref().unwrap_or("127.0.0.1");
    super::stream::port_forward(std::sync::Arc::new(rt), &sb.id, address, &mappings)
}

// ---------------------------------------------------------------------------------------------
// validate

/// Errors of one manifest file, as `nanolet run` would report them (`field: reason`, field may
/// be empty for whole-document problems). The file is read as the file source reads it
/// ([`crate::config::file::read_manifest`]): a regular file (or a symbolic link to one) of at
/// most 10 MiB; a FIFO, device, directory or socket is refused without being opened for long
/// or read, a larger file without being read.
pub fn validate_file(path: &Path, node_name: &str) -> Vec<(String, String)> {
    validate_file_report(path, node_name).0
}

/// [`validate_file`] plus the warnings `run` would log for a valid file (further YAML
/// documents, which the kubelet ignores).
pub fn validate_file_report(path: &Path, node_name: &str) -> (Vec<(String, String)>, Vec<String>) {
    let origin = path.to_string_lossy().into_owned();
    let bytes = match crate::config::file::read_manifest(path) {
        Ok(b) => b,
        Err(e) => return (vec![(String::new(), e.to_string())], Vec::new()),
    };
    validate_bytes_report(&bytes, &origin, node_name)
}

/// [`validate_file`] for a manifest already read (the fuzz target `manifest` drives it).
/// Messages are bounded as `run` bounds them ([`crate::config::bounded`]).
pub fn validate_bytes(bytes: &[u8], origin: &str, node_name: &str) -> Vec<(String, String)> {
    validate_bytes_report(bytes, origin, node_name).0
}

fn validate_bytes_report(
    bytes: &[u8],
    origin: &str,
    node_name: &str,
) -> (Vec<(String, String)>, Vec<String>) {
    let (decoded, notes) = match decode_manifest_with_notes(bytes, origin) {
        Ok((doc, notes)) => (Ok(doc), notes),
        Err(e) => (Err(e), Vec::new()),
    };
    let errors = match decoded.map_err(crate::config::bounded) {
        Err(e) => vec![(e.field, e.reason)],
        Ok(DecodedDoc::PodList(_)) => vec![(
            "kind".into(),
            "Unsupported value: \"PodList\": a manifest file holds exactly one Pod".into(),
        )],
        Ok(DecodedDoc::Pod(pod)) => {
            match make_static_pod(*pod, node_name, SourceKind::File, origin, "") {
                // Valid, but the kubelet (and nanolet) would refuse it at admission on this
                // Linux node: said as a refusal, with the kubelet's reason and message.
                Ok(pod) => match crate::kubelet::admission::os_rejection(&pod) {
                    Some((reason, message)) => vec![(
                        String::new(),
                        format!("refused at admission on a Linux node: {reason}: {message}"),
                    )],
                    None => vec![],
                },
                Err(errs) => errs.into_iter().map(|e| (e.field, e.reason)).collect(),
            }
        }
    };
    (errors, notes)
}

/// A RuntimeClass manifest's problems (file, field path, reason), or `None` when `path` does
/// not hold a RuntimeClass.
fn runtime_class_file(path: &Path) -> Option<Vec<(String, String)>> {
    let bytes = crate::config::file::read_manifest(path).ok()?;
    let doc = crate::yaml::to_json(std::str::from_utf8(&bytes).ok()?).ok()?;
    if doc.value["kind"].as_str() != Some("RuntimeClass") {
        return None;
    }
    Some(
        match crate::runtimeclass::parse(&doc.value, &path.to_string_lossy()) {
            Ok(_) => vec![],
            Err(crate::runtimeclass::RuntimeClassError::Invalid { field, reason, .. }) => {
                vec![(field, reason)]
            }
            Err(e) => vec![(String::new(), e.to_string())],
        },
    )
}

/// How the pod's `runtimeClassName` would fail on this node: the kubelet's sandbox failure
/// when the class is not in `classes` (the local directory; `validate` has no API).
fn runtime_class_refusal(
    path: &Path,
    node: &str,
    classes: &crate::runtimeclass::RuntimeClasses,
) -> Option<(String, String)> {
    let origin = path.to_string_lossy().into_owned();
    let bytes = crate::config::file::read_manifest(path).ok()?;
    let Ok((DecodedDoc::Pod(pod), _)) = decode_manifest_with_notes(&bytes, &origin) else {
        return None;
    };
    let pod = make_static_pod(*pod, node, SourceKind::File, &origin, "").ok()?;
    let err = classes.lookup_handler(&pod).err()?;
    Some((
        "spec.runtimeClassName".into(),
        format!(
            "the pod would stay Pending: FailedCreatePodSandBox: Failed to create pod sandbox: {err}"
        ),
    ))
}

fn validate(o: &Opts) -> anyhow::Result<()> {
    if o.positional.is_empty() {
        bail!("usage: nanolet validate FILE...");
    }
    let node = match &o.hostname {
        Some(h) => h.to_lowercase(),
        None => nix::unistd::gethostname()
            .ok()
            .and_then(|h| h.into_string().ok())
            .map(|h| h.to_lowercase())
            .unwrap_or_else(|| "localhost".into()),
    };
    let classes = crate::runtimeclass::RuntimeClasses::new(
        Some(
            o.runtime_class_dir
                .clone()
                .unwrap_or_else(|| "/etc/nanolet/runtimeclasses".into())
                .into(),
        ),
        false,
    );
    let mut failed = 0;
    for f in &o.positional {
        let (mut errs, notes) = match runtime_class_file(Path::new(f)) {
            Some(r) => (r, vec![]),
            None => validate_file_report(Path::new(f), &node),
        };
        if errs.is_empty() {
            errs.extend(runtime_class_refusal(Path::new(f), &node, &classes));
        }
        // File names and manifest text may hold control characters: shown escaped, as `run`
        // logs them.
        let esc = crate::config::escape_text;
        let f = esc(f);
        if errs.is_empty() {
            println!("{f}: valid");
            for note in notes {
                eprintln!("{f}: warning: {}", esc(&note));
            }
            continue;
        }
        failed += 1;
        for (field, reason) in errs {
            let (field, reason) = (esc(&field), esc(&reason));
            if field.is_empty() {
                eprintln!("{f}: {reason}");
            } else {
                eprintln!("{f}: {field}: {reason}");
            }
        }
    }
    if failed > 0 {
        bail!("{failed} of {} manifests are invalid", o.positional.len());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn table_rendering_like_kubectl() {
        let t = json!({
            "columnDefinitions": [
                {"name": "Name", "priority": 0},
                {"name": "Ready", "priority": 0},
                {"name": "IP", "priority": 1},
            ],
            "rows": [
                {"cells": ["web-node1", "1/1", "10.1.0.2"], "object": {"metadata": {"namespace": "default"}}},
                {"cells": ["a", "0/2", null], "object": {"metadata": {"namespace": "kube-system"}}},
            ],
        });
        assert_eq!(
            render_table(&t, false, false),
            "NAME        READY\nweb-node1   1/1\na           0/2\n"
        );
        assert_eq!(
            render_table(&t, true, true),
            "NAMESPACE     NAME        READY   IP\ndefault       web-node1   1/1     10.1.0.2\nkube-system   a           0/2     <none>\n"
        );
    }

    #[test]
    fn flags() {
        let args: Vec<String> = [
            "pods",
            "-A",
            "-o=wide",
            "--server",
            "http://x:1",
            "--tail",
            "5",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let o = parse_opts(&args).unwrap();
        assert!(o.all_namespaces);
        assert_eq!(o.output, "wide");
        assert_eq!(o.server.as_deref(), Some("http://x:1"));
        assert_eq!(o.tail, Some(5));
        assert_eq!(o.positional, ["pods"]);
        assert!(parse_opts(&["--bogus".to_string()]).is_err());
        assert!(parse_opts(&["--tail".to_string()]).is_err());
        // pflag's other spellings (util::flags): attached shorthand values, combined boolean
        // shorthands, explicit booleans, and `--` ending the flags.
        let args: Vec<String> = [
            "x",
            "-nkube-system",
            "-pf",
            "--timestamps=false",
            "--",
            "sh",
            "-c",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let o = parse_opts(&args).unwrap();
        assert_eq!(o.namespace.as_deref(), Some("kube-system"));
        assert!(o.previous && o.follow && !o.timestamps);
        assert_eq!(
            (o.positional, o.command),
            (
                vec!["x".to_string()],
                vec!["sh".to_string(), "-c".to_string()]
            )
        );
        assert_eq!(
            parse_opts(&["-Ax".to_string()]).unwrap_err().to_string(),
            "unknown flag: -x"
        );
        assert_eq!(encode("a=b,c d"), "a%3Db%2Cc%20d");
    }

    #[test]
    fn every_client_command_has_help() {
        for c in [
            "get",
            "describe",
            "logs",
            "log",
            "exec",
            "port-forward",
            "validate",
        ] {
            let help = command_help(c).unwrap_or_else(|| panic!("no help for {c}"));
            assert!(help.starts_with("Usage: nanolet "), "{c}: {help}");
        }
        // --help after `--` belongs to the command run in the container.
        assert!(matches!(run("exec", &["--help".into()]), Some(Ok(()))));
        assert!(matches!(run("validate", &["-h".into()]), Some(Ok(()))));
    }

    #[test]
    fn validate_warns_that_only_the_first_document_is_read() {
        // As the kubelet (go-yaml v2 reads one document): valid, with a warning to split it.
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("two.yaml");
        let pod = |n: &str| {
            format!(
                "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {n}\nspec:\n  containers:\n  - name: c\n    image: busybox\n"
            )
        };
        std::fs::write(&p, format!("{}---\n{}", pod("a"), pod("b"))).unwrap();
        let (errs, notes) = validate_file_report(&p, "node1");
        assert!(errs.is_empty(), "{errs:?}");
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].contains("only the first is read"), "{notes:?}");
        std::fs::write(&p, format!("{}---\n", pod("a"))).unwrap();
        assert_eq!(validate_file_report(&p, "node1"), (vec![], vec![]));
    }

    #[test]
    fn validate_reports_field_paths() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("p.yaml");
        std::fs::write(
            &p,
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\nspec:\n  containers:\n  - name: c\n    image: ''\n",
        )
        .unwrap();
        let errs = validate_file(&p, "node1");
        assert!(
            errs.iter().any(|(f, _)| f == "spec.containers[0].image"),
            "{errs:?}"
        );
        std::fs::write(&p, "apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\nspec:\n  containers:\n  - name: c\n    image: busybox\n").unwrap();
        assert_eq!(validate_file(&p, "node1"), vec![]);
        assert_eq!(validate_file(&dir.path().join("nope.yaml"), "n").len(), 1);
    }

    /// Issue 32: `validate` shows how a pod naming a RuntimeClass the node lacks would fail
    /// (the kubelet's FailedCreatePodSandBox with the API's NotFound text), and validates
    /// RuntimeClass manifests (ValidateRuntimeClass's field paths).
    #[test]
    fn validate_shows_the_runtime_class_refusal_and_checks_runtime_classes() {
        let dir = tempfile::tempdir().expect("tmp");
        let classes_dir = dir.path().join("rc");
        std::fs::create_dir_all(&classes_dir).expect("mkdir");
        let rc = classes_dir.join("kata.yaml");
        std::fs::write(
            &rc,
            "apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata:\n  name: kata\nhandler: kata\n",
        )
        .expect("write");
        let classes = crate::runtimeclass::RuntimeClasses::new(Some(classes_dir.clone()), true);
        let p = dir.path().join("p.yaml");
        let pod = |class: &str| {
            format!(
                "apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\nspec:\n  runtimeClassName: {class}\n  containers:\n  - name: c\n    image: busybox\n"
            )
        };
        std::fs::write(&p, pod("kata")).expect("write");
        assert_eq!(runtime_class_refusal(&p, "n", &classes), None);
        std::fs::write(&p, pod("gvisor")).expect("write");
        assert_eq!(
            runtime_class_refusal(&p, "n", &classes),
            Some((
                "spec.runtimeClassName".into(),
                "the pod would stay Pending: FailedCreatePodSandBox: Failed to create pod sandbox: runtimeclass.node.k8s.io \"gvisor\" not found".into()
            ))
        );
        assert_eq!(runtime_class_file(&rc), Some(vec![]));
        assert_eq!(runtime_class_file(&p), None, "a pod is not a RuntimeClass");
        std::fs::write(
            &rc,
            "apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata:\n  name: kata\n",
        )
        .expect("write");
        assert_eq!(
            runtime_class_file(&rc),
            Some(vec![("handler".into(), "Required value".into())])
        );
    }

    /// Issue 34: shapes the kubelet refuses, each called valid before. ValidatePodSpec's
    /// field paths; `os.name: windows` is the kubelet's admission refusal (PodOSNotSupported).
    #[test]
    fn validate_refuses_what_the_kubelet_refuses() {
        let base = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\nspec:\n  containers:\n  - name: c\n    image: busybox\n";
        for (extra, field) in [
            (
                "  tolerations:\n  - key: k\n    operator: Bogus\n",
                "spec.tolerations[0].operator",
            ),
            ("  nodeSelector:\n    'bad key!': x\n", "spec.nodeSelector"),
            (
                "  topologySpreadConstraints:\n  - maxSkew: 0\n    topologyKey: zone\n    whenUnsatisfiable: DoNotSchedule\n",
                "spec.topologySpreadConstraints[0].maxSkew",
            ),
            (
                "  topologySpreadConstraints:\n  - maxSkew: 1\n    topologyKey: ''\n    whenUnsatisfiable: DoNotSchedule\n",
                "spec.topologySpreadConstraints[0].topologyKey",
            ),
            (
                "  topologySpreadConstraints:\n  - maxSkew: 1\n    topologyKey: zone\n    whenUnsatisfiable: Nope\n",
                "spec.topologySpreadConstraints[0].whenUnsatisfiable",
            ),
            ("  os:\n    name: windows\n", ""),
        ] {
            let errs = validate_bytes(format!("{base}{extra}").as_bytes(), "/m/x.yaml", "node1");
            assert!(errs.iter().any(|(f, _)| f == field), "{extra}: {errs:?}");
            if field.is_empty() {
                assert!(errs[0].1.contains("PodOSNotSupported"), "{errs:?}");
            }
        }
        let linux = format!("{base}  os:\n    name: linux\n");
        assert_eq!(
            validate_bytes(linux.as_bytes(), "/m/x.yaml", "node1"),
            vec![]
        );
    }

    /// `VmHWM` (peak resident memory, KiB) of this process.
    fn peak_rss_kib() -> u64 {
        std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("VmHWM:"))
                    .and_then(|v| v.split_whitespace().next())
                    .and_then(|v| v.parse().ok())
            })
            .unwrap_or(0)
    }

    /// [`validate_file`] on another thread; fails the test instead of hanging it.
    fn validate_within(path: &Path, limit: std::time::Duration) -> Vec<(String, String)> {
        let (tx, rx) = std::sync::mpsc::channel();
        let p = path.to_path_buf();
        std::thread::spawn(move || {
            let _ = tx.send(validate_file(&p, "n"));
        });
        rx.recv_timeout(limit)
            .unwrap_or_else(|_| panic!("validate {} did not return in {limit:?}", path.display()))
    }

    #[test]
    fn validate_reads_like_the_file_source() {
        let dir = tempfile::tempdir().unwrap();
        let limit = std::time::Duration::from_secs(10);
        let only = |errs: Vec<(String, String)>| {
            assert_eq!(errs.len(), 1, "{errs:?}");
            errs[0].1.clone()
        };
        // A FIFO is refused without blocking (no writer will ever come).
        let fifo = dir.path().join("fifo.yaml");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
        let r = only(validate_within(&fifo, limit));
        assert!(
            r.contains("not a regular file but a FIFO (named pipe)"),
            "{r}"
        );
        // A symbolic link to /dev/zero is refused without reading (it never ends).
        let zero = dir.path().join("zero.yaml");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        let r = only(validate_within(&zero, limit));
        assert!(
            r.contains("not a regular file but a character device"),
            "{r}"
        );
        let r = only(validate_within(dir.path(), limit));
        assert!(r.contains("not a regular file but a directory"), "{r}");
        // A sparse 1 GiB file: refused by its size, quickly, without allocating it.
        let huge = dir.path().join("huge.yaml");
        std::fs::File::create(&huge)
            .and_then(|f| f.set_len(1 << 30))
            .unwrap();
        let (peak, started) = (peak_rss_kib(), std::time::Instant::now());
        let r = only(validate_within(&huge, limit));
        let (took, grew) = (started.elapsed(), peak_rss_kib().saturating_sub(peak));
        assert!(
            r.contains("larger than 10485760 bytes (the manifest size limit): 1073741824 bytes"),
            "{r}"
        );
        assert!(took < std::time::Duration::from_secs(2), "{took:?}");
        assert!(grew < 256 * 1024, "peak RSS grew by {grew} KiB");
        // A symbolic link to a valid manifest is read, as the kubelet follows it.
        let real = dir.path().join("real.yaml");
        std::fs::write(&real, "apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\nspec:\n  containers:\n  - name: c\n    image: busybox\n").unwrap();
        let link = dir.path().join("link.yaml");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        assert_eq!(validate_within(&link, limit), vec![]);
    }

    #[test]
    fn describe_aligns_and_lists_events() {
        let now = crate::timeutil::parse_rfc3339("2026-11-22T18:10:00Z").unwrap();
        let p = json!({
            "metadata": {"name": "web-node1", "namespace": "default", "labels": {"app": "web"}},
            "spec": {"nodeName": "node1", "containers": [{"name": "c", "image": "busybox"}]},
            "status": {"phase": "Running", "containerStatuses": [{"name": "c", "ready": true, "restartCount": 2, "state": {"running": {"startedAt": "2026-11-22T18:00:00Z"}}}]},
        });
        let e = json!({"type": "Normal", "reason": "Started", "message": "Started container c", "source": {"component": "kubelet"}, "count": 3, "firstTimestamp": "2026-11-22T18:00:00Z", "lastTimestamp": "2026-11-22T18:09:00Z"});
        let t = describe_text(&p, &[e], now);
        assert!(t.contains("Name:         web-node1\n"), "{t}");
        assert!(t.contains("Restart Count:  2\n"), "{t}");
        assert!(t.contains("Ready:          True\n"), "{t}");
        assert!(t.contains("Labels:       app=web\n"), "{t}");
        assert!(
            t.contains("Normal  Started  60s (x3 over 10m)  kubelet  Started container c\n"),
            "{t}"
        );
    }
}
