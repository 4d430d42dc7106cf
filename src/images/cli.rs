//! `nanolet images import [--arch A] FILE...` and `nanolet images ls`: they talk to containerd
//! directly (its socket, like `nanolet exec`), not to a running agent.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail};

use super::archive::Platform;
use super::containerd::Client;
use super::{DEFAULT_SNAPSHOTTER, ImportOptions, Progress, import_archive, is_pinned};
use crate::util::flags::{self, Arg, Flag, FlagError};

pub const USAGE: &str = "  nanolet images import [--arch ARCH] FILE...
                               import OCI-layout or docker-archive tarballs (.tar, .tar.gz,
                               .tar.zst) into containerd (namespace k8s.io), unpacked and pinned
  nanolet images ls            images in containerd's k8s.io namespace: name, digest, size, pinned
Images flags: --container-runtime-endpoint (default unix:///run/containerd/containerd.sock),
--root-dir (default /var/lib/nanolet; the pin record), --snapshotter (default overlayfs).
";

struct Opts {
    endpoint: String,
    root_dir: PathBuf,
    snapshotter: String,
    arch: Option<String>,
    files: Vec<String>,
}

/// The flags of `images import` and `images ls`.
const FLAGS: &[Flag] = &[
    Flag::value("container-runtime-endpoint"),
    Flag::value("root-dir"),
    Flag::value("snapshotter"),
    Flag::value("arch"),
    Flag::value("platform"),
];

/// Lexes the arguments (`util::flags`, Go's pflag conventions); the others are files.
fn parse(args: &[String]) -> anyhow::Result<Opts> {
    let mut o = Opts {
        endpoint: crate::cri::DEFAULT_ENDPOINT.into(),
        root_dir: PathBuf::from("/var/lib/nanolet"),
        snapshotter: DEFAULT_SNAPSHOTTER.into(),
        arch: None,
        files: Vec::new(),
    };
    for arg in flags::lex(FLAGS, args) {
        let (name, value) = match arg {
            Ok(Arg::Flag { spec, value }) => (spec.name, value),
            Ok(Arg::Positional(file)) => {
                o.files.push(file);
                continue;
            }
            Ok(Arg::Rest(files)) => {
                o.files.extend(files);
                continue;
            }
            Err(FlagError::Unknown(f)) => bail!("unknown flag {f}\n{USAGE}"),
            Err(e) => return Err(e.into()),
        };
        match name {
            "container-runtime-endpoint" => o.endpoint = value,
            "root-dir" => o.root_dir = PathBuf::from(value),
            "snapshotter" => o.snapshotter = value,
            "arch" | "platform" => o.arch = Some(value),
            other => bail!("unknown flag --{other}\n{USAGE}"),
        }
    }
    Ok(o)
}

/// `nanolet images ...`
pub fn run(args: &[String]) -> anyhow::Result<()> {
    match args.first().map(String::as_str) {
        Some("import" | "load") => import(&parse(&args[1..])?),
        Some("ls" | "list") => ls(&parse(&args[1..])?),
        Some("help" | "--help" | "-h") => {
            print!("{USAGE}");
            Ok(())
        }
        _ => bail!("usage:\n{USAGE}"),
    }
}

fn human(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

fn import(o: &Opts) -> anyhow::Result<()> {
    if o.files.is_empty() {
        bail!("nanolet images import: no FILE given\n{USAGE}");
    }
    let (platform, forced) = match &o.arch {
        Some(a) => (
            Platform::parse(a).map_err(|e| anyhow!("--arch: {e}"))?,
            true,
        ),
        None => (Platform::host(), false),
    };
    let client = Client::connect(&o.endpoint, &o.snapshotter)
        .map_err(|e| anyhow!("cannot reach containerd at {}: {e}", o.endpoint))?;
    let opts = ImportOptions {
        platform,
        forced_platform: forced,
        root_dir: Some(o.root_dir.clone()),
    };
    let tty = std::io::stderr().is_terminal();
    let mut failed = Vec::new();
    for f in &o.files {
        let path = Path::new(f);
        let started = std::time::Instant::now();
        let mut last_line = String::new();
        let mut progress = |p: Progress| {
            let line = match &p {
                Progress::Scan { bytes } => format!("{f}: reading {}", human(*bytes)),
                Progress::Write {
                    digest,
                    done,
                    total,
                } => format!(
                    "{f}: writing {} {}/{}",
                    &digest[..digest.len().min(19)],
                    human(*done),
                    human(*total)
                ),
                Progress::Unpack {
                    image,
                    index,
                    count,
                    existed,
                } => format!(
                    "{f}: {image}: layer {}/{count} {}",
                    index + 1,
                    if *existed {
                        "already unpacked"
                    } else {
                        "unpacking"
                    }
                ),
            };
            if tty {
                // One updating line; only redraw when the text changed (sizes round).
                if line != last_line {
                    eprint!("\r\x1b[2K{line}");
                    let _ = std::io::stderr().flush();
                    last_line = line;
                }
            } else if !matches!(p, Progress::Scan { .. } | Progress::Write { .. }) {
                eprintln!("{line}");
            }
        };
        let res = import_archive(&client, path, &opts, &mut progress);
        if tty {
            eprint!("\r\x1b[2K");
        }
        match res {
            Ok(imgs) => {
                for i in imgs {
                    println!(
                        "imported {} ({}, {}, {} layers unpacked, {} blobs written, {} already present) from {f} in {:.1}s",
                        i.names.join(", "),
                        i.digest,
                        i.platform,
                        i.unpacked,
                        i.written,
                        i.reused,
                        started.elapsed().as_secs_f64()
                    );
                }
            }
            Err(e) => {
                eprintln!("error: {e}");
                failed.push(f.clone());
            }
        }
    }
    if !failed.is_empty() {
        bail!(
            "{} of {} archives failed to import: {}",
            failed.len(),
            o.files.len(),
            failed.join(", ")
        );
    }
    Ok(())
}

fn ls(o: &Opts) -> anyhow::Result<()> {
    let client = Client::connect(&o.endpoint, &o.snapshotter)
        .map_err(|e| anyhow!("cannot reach containerd at {}: {e}", o.endpoint))?;
    let mut imgs = client
        .list_images()
        .map_err(|e| anyhow!("listing images at {}: {e}", o.endpoint))?;
    imgs.sort_by(|a, b| a.name.cmp(&b.name));
    // Sizes as CRI reports them (the unpacked size of the host platform's image).
    let cri =
        crate::cri::client::CriRuntime::connect(&o.endpoint, std::time::Duration::from_secs(30))
            .map_err(|e| anyhow!("cannot reach containerd at {}: {e}", o.endpoint))?;
    let sizes = cri.list_images().unwrap_or_default();
    let pins = super::pinned_images(&o.root_dir).unwrap_or_else(|e| {
        eprintln!("warning: {e}");
        Default::default()
    });
    let mut rows = vec![[
        "NAME".to_string(),
        "DIGEST".to_string(),
        "SIZE".to_string(),
        "PINNED".to_string(),
    ]];
    for i in imgs {
        if i.name.starts_with("sha256:") {
            continue; // CRI's by-ID references
        }
        let size = sizes
            .iter()
            .find(|s| {
                s.repo_tags.contains(&i.name)
                    || s.repo_digests.iter().any(|d| d.starts_with(&i.name))
            })
            .map(|s| human(s.size))
            .unwrap_or_else(|| "-".into());
        let pinned = is_pinned(&pins, &i.name)
            || i.labels
                .get(super::LABEL_CRI_PINNED)
                .is_some_and(|v| v == "pinned");
        rows.push([
            i.name,
            i.target_digest,
            size,
            if pinned { "yes" } else { "no" }.into(),
        ]);
    }
    let widths: Vec<usize> = (0..4)
        .map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0))
        .collect();
    let mut out = std::io::stdout().lock();
    for r in rows {
        writeln!(
            out,
            "{:w0$}   {:w1$}   {:w2$}   {}",
            r[0],
            r[1],
            r[2],
            r[3],
            w0 = widths[0],
            w1 = widths[1],
            w2 = widths[2]
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn flags_and_files() {
        let o = parse(&args(&[
            "a.tar",
            "--arch=arm64",
            "--root-dir",
            "/r",
            "b.tar",
            "--",
            "--c.tar",
        ]))
        .unwrap();
        assert_eq!(o.files, ["a.tar", "b.tar", "--c.tar"]);
        assert_eq!(o.arch.as_deref(), Some("arm64"));
        assert_eq!(o.root_dir, PathBuf::from("/r"));
        assert_eq!(
            parse(&args(&["--platform", "amd64"]))
                .unwrap()
                .arch
                .as_deref(),
            Some("amd64")
        );
        let e = parse(&args(&["--bogus=1"])).err().unwrap().to_string();
        assert!(e.starts_with("unknown flag --bogus\n"), "{e}");
        let e = parse(&args(&["--arch"])).err().unwrap().to_string();
        assert_eq!(e, "flag needs an argument: --arch");
    }
}
