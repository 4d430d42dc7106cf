//! Image archives: a streaming tar reader (ustar, GNU long names, pax headers), outer
//! compression (plain, gzip via flate2, zstd via ruzstd, detected by magic bytes, not by file
//! name), and the two layouts: OCI image layout (`oci-layout`, `index.json`, `blobs/<alg>/<hex>`)
//! and docker-archive (`manifest.json` from `docker save`).
//!
//! An archive is read twice, never unpacked to disk: [`scan`] hashes every file and keeps the
//! small JSON ones (indexes, manifests, configs) in memory; [`plan`] turns that into the blobs
//! to write and the images to create; the importer then streams the big blobs (layers) straight
//! from a second pass ([`for_each_entry`]) into containerd. Pure: no containerd here.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::{Path, PathBuf};

use serde_json::Value;
use sha2::{Digest as _, Sha256};

/// Files at most this big that look like JSON are kept in memory by [`scan`].
const MAX_JSON: u64 = 4 << 20;

pub const MT_OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub const MT_OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub const MT_DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
pub const MT_DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
pub const MT_DOCKER_CONFIG: &str = "application/vnd.docker.container.image.v1+json";
pub const MT_DOCKER_LAYER: &str = "application/vnd.docker.image.rootfs.diff.tar";
pub const MT_DOCKER_LAYER_GZIP: &str = "application/vnd.docker.image.rootfs.diff.tar.gzip";
pub const MT_DOCKER_LAYER_ZSTD: &str = "application/vnd.docker.image.rootfs.diff.tar.zstd";

/// What can go wrong reading an archive. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    #[error("{file}: {source}")]
    Io {
        file: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{file}: not a valid tar archive: {reason}")]
    Tar { file: PathBuf, reason: String },
    #[error("{file}: {path}: {reason}")]
    Layout {
        file: PathBuf,
        path: String,
        reason: String,
    },
    #[error(
        "{file}: neither an OCI image layout (index.json) nor a docker archive (manifest.json)"
    )]
    UnknownFormat { file: PathBuf },
}

type Result<T> = std::result::Result<T, ArchiveError>;

/// A `--arch` value that names no platform.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlatformError {
    #[error("{0:?}: expected ARCH, ARCH/VARIANT or OS/ARCH[/VARIANT]")]
    Form(String),
    #[error("{0:?}: empty architecture or OS")]
    Empty(String),
}

/// An image name docker and containerd would not accept.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImageRefError {
    #[error("empty image name")]
    Empty,
    #[error("{0:?}: image names have no whitespace")]
    Whitespace(String),
    #[error("{0:?}: empty repository or tag")]
    EmptyPart(String),
    #[error("{0:?}: repository names must be lowercase and not empty")]
    Repository(String),
}

/// Outer compression of the archive file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
    Zstd,
}

impl Compression {
    /// By magic bytes (gzip `1f 8b`, zstd `28 b5 2f fd`).
    pub fn detect(head: &[u8]) -> Compression {
        if head.starts_with(&[0x1f, 0x8b]) {
            Compression::Gzip
        } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
            Compression::Zstd
        } else {
            Compression::None
        }
    }
}

/// Opens `path` and returns a reader of the (decompressed) tar stream.
pub fn open(path: &Path) -> Result<(Box<dyn Read>, Compression)> {
    let io_err = |source| ArchiveError::Io {
        file: path.to_path_buf(),
        source,
    };
    let mut f = File::open(path).map_err(io_err)?;
    let mut head = [0u8; 4];
    let n = read_full(&mut f, &mut head).map_err(io_err)?;
    let comp = Compression::detect(&head[..n]);
    let f = File::open(path).map_err(io_err)?;
    let r = BufReader::with_capacity(256 << 10, f);
    Ok((decoder(path, r, comp)?, comp))
}

/// The decompressed stream of `r` (the content of `file`, compressed as `comp` says).
pub fn decoder<'a>(
    file: &Path,
    r: impl Read + 'a,
    comp: Compression,
) -> Result<Box<dyn Read + 'a>> {
    Ok(match comp {
        Compression::None => Box::new(r),
        Compression::Gzip => Box::new(flate2::read::MultiGzDecoder::new(r)),
        Compression::Zstd => {
            Box::new(
                ruzstd::decoding::StreamingDecoder::new(r).map_err(|e| ArchiveError::Tar {
                    file: file.to_path_buf(),
                    reason: format!("zstd: {e}"),
                })?,
            )
        }
    })
}

fn read_full(r: &mut dyn Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

// ---------------------------------------------------------------------------------------------
// tar

/// One tar member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Normalised path (no leading `./` or `/`).
    pub path: String,
    pub kind: EntryKind,
    pub size: u64,
    /// Target of a symlink or hard link.
    pub link: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    File,
    Dir,
    Symlink,
    HardLink,
    Other,
}

/// A streaming tar reader. [`TarReader::next_entry`] skips whatever is left of the previous
/// member; the member's data is read through [`TarReader::data`].
pub struct TarReader<R: Read> {
    r: R,
    /// Unread data bytes of the current member, then its padding.
    remaining: u64,
    padding: u64,
    done: bool,
}

fn octal(field: &[u8]) -> Option<u64> {
    // GNU base-256 for big values: high bit of the first byte set.
    if field.first().is_some_and(|b| b & 0x80 != 0) {
        let mut v: u64 = u64::from(field[0] & 0x7f);
        for b in &field[1..] {
            v = v.checked_mul(256)?.checked_add(u64::from(*b))?;
        }
        return Some(v);
    }
    let s: String = field
        .iter()
        .take_while(|b| **b != 0)
        .map(|b| *b as char)
        .collect();
    let s = s.trim();
    if s.is_empty() {
        return Some(0);
    }
    u64::from_str_radix(s, 8).ok()
}

fn cstr(field: &[u8]) -> String {
    let end = field.iter().position(|b| *b == 0).unwrap_or(field.len());
    String::from_utf8_lossy(&field[..end]).into_owned()
}

/// `./a/b` and `/a/b` -> `a/b`; `a//b/` -> `a/b`.
pub fn normalize_path(p: &str) -> String {
    p.split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect::<Vec<_>>()
        .join("/")
}

/// pax records: `<len> <key>=<value>\n`.
fn parse_pax(data: &[u8]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut rest = data;
    while !rest.is_empty() {
        let Some(sp) = rest.iter().position(|b| *b == b' ') else {
            break;
        };
        let Some(len) = std::str::from_utf8(&rest[..sp])
            .ok()
            .and_then(|s| s.parse::<usize>().ok())
        else {
            break;
        };
        if len <= sp + 1 || len > rest.len() {
            break;
        }
        let rec = &rest[sp + 1..len];
        let rec = rec.strip_suffix(b"\n").unwrap_or(rec);
        if let Some(eq) = rec.iter().position(|b| *b == b'=') {
            out.insert(
                String::from_utf8_lossy(&rec[..eq]).into_owned(),
                String::from_utf8_lossy(&rec[eq + 1..]).into_owned(),
            );
        }
        rest = &rest[len..];
    }
    out
}

impl<R: Read> TarReader<R> {
    pub fn new(r: R) -> Self {
        TarReader {
            r,
            remaining: 0,
            padding: 0,
            done: false,
        }
    }

    fn skip(&mut self, mut n: u64) -> io::Result<()> {
        let mut buf = [0u8; 8192];
        while n > 0 {
            let want = n.min(buf.len() as u64) as usize;
            let got = read_full(&mut self.r, &mut buf[..want])?;
            if got < want {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "archive ends in the middle of a member (truncated?)",
                ));
            }
            n -= got as u64;
        }
        Ok(())
    }

    fn read_block(&mut self, block: &mut [u8; 512]) -> io::Result<bool> {
        let n = read_full(&mut self.r, block)?;
        if n == 0 {
            return Ok(false);
        }
        if n < 512 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "archive ends in the middle of a header (truncated?)",
            ));
        }
        Ok(true)
    }

    fn read_member_data(&mut self, size: u64) -> io::Result<Vec<u8>> {
        if size > MAX_JSON {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("extended header of {size} bytes"),
            ));
        }
        let mut v = vec![0u8; size as usize];
        if read_full(&mut self.r, &mut v)? < v.len() {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "archive ends in an extended header (truncated?)",
            ));
        }
        self.skip((512 - size % 512) % 512)?;
        Ok(v)
    }

    /// The next member, or `None` at the end of the archive.
    pub fn next_entry(&mut self) -> io::Result<Option<Entry>> {
        if self.done {
            return Ok(None);
        }
        let left = self.remaining + self.padding;
        self.skip(left)?;
        self.remaining = 0;
        self.padding = 0;
        let mut long_name: Option<String> = None;
        let mut long_link: Option<String> = None;
        let mut pax: BTreeMap<String, String> = BTreeMap::new();
        let mut block = [0u8; 512];
        loop {
            if !self.read_block(&mut block)? {
                // EOF without the two zero blocks: accepted (some writers omit them) only
                // between members.
                self.done = true;
                return Ok(None);
            }
            if block.iter().all(|b| *b == 0) {
                self.done = true;
                return Ok(None);
            }
            // Checksum: sum of the header with the checksum field as spaces.
            let stored = octal(&block[148..156]).ok_or_else(|| {
                io::Error::new(io::ErrorKind::InvalidData, "bad header checksum field")
            })?;
            let sum: u64 = block
                .iter()
                .enumerate()
                .map(|(i, b)| {
                    if (148..156).contains(&i) {
                        u64::from(b' ')
                    } else {
                        u64::from(*b)
                    }
                })
                .sum();
            if sum != stored {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "header checksum mismatch (corrupt archive?)",
                ));
            }
            let size = octal(&block[124..136])
                .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "bad size field"))?;
            let typeflag = block[156];
            match typeflag {
                b'L' => {
                    let d = self.read_member_data(size)?;
                    long_name = Some(cstr(&d));
                    continue;
                }
                b'K' => {
                    let d = self.read_member_data(size)?;
                    long_link = Some(cstr(&d));
                    continue;
                }
                b'x' => {
                    let d = self.read_member_data(size)?;
                    pax.extend(parse_pax(&d));
                    continue;
                }
                b'g' => {
                    let _ = self.read_member_data(size)?;
                    continue;
                }
                _ => {}
            }
            let mut name = cstr(&block[0..100]);
            if &block[257..262] == b"ustar" {
                let prefix = cstr(&block[345..500]);
                if !prefix.is_empty() {
                    name = format!("{prefix}/{name}");
                }
            }
            if let Some(n) = long_name.take() {
                name = n;
            }
            if let Some(p) = pax.get("path") {
                name = p.clone();
            }
            let mut link = cstr(&block[157..257]);
            if let Some(l) = long_link.take() {
                link = l;
            }
            if let Some(l) = pax.get("linkpath") {
                link = l.clone();
            }
            let size = match pax.get("size") {
                Some(s) => s.parse::<u64>().map_err(|_| {
                    io::Error::new(io::ErrorKind::InvalidData, "bad pax size record")
                })?,
                None => size,
            };
            let kind = match typeflag {
                b'0' | 0 | b'7' => EntryKind::File,
                b'5' => EntryKind::Dir,
                b'2' => EntryKind::Symlink,
                b'1' => EntryKind::HardLink,
                _ => EntryKind::Other,
            };
            // Go's archive/tar (what containerd and podman read layers with): links, character
            // and block devices, directories and FIFOs (typeflags 1-6) are header-only, whatever
            // size a writer put on them; the next header follows at once (its
            // isHeaderOnlyType). Regular files and unknown types carry `size` bytes.
            let header_only = matches!(typeflag, b'1'..=b'6');
            let data = if header_only { 0 } else { size };
            self.remaining = data;
            self.padding = (512 - data % 512) % 512;
            return Ok(Some(Entry {
                path: normalize_path(&name),
                kind,
                size: data,
                link,
            }));
        }
    }

    /// Reads from the current member's data (0 at its end).
    pub fn data(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.remaining == 0 {
            return Ok(0);
        }
        let want = (buf.len() as u64).min(self.remaining) as usize;
        let n = self.r.read(&mut buf[..want])?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "archive ends in the middle of a member (truncated?)",
            ));
        }
        self.remaining -= n as u64;
        Ok(n)
    }
}

// ---------------------------------------------------------------------------------------------
// pass 1: scan

/// What [`scan`] learnt about one regular file.
#[derive(Debug, Clone)]
pub struct FileInfo {
    /// `sha256:<hex>` of its content.
    pub digest: String,
    pub size: u64,
    /// The first bytes (to tell gzip/zstd/tar layers apart).
    pub head: Vec<u8>,
    /// The content, for small JSON-looking files.
    pub content: Option<Vec<u8>>,
}

/// Every regular file of an archive (by normalised path) and its symlinks.
#[derive(Debug, Clone, Default)]
pub struct Scan {
    pub files: BTreeMap<String, FileInfo>,
    pub links: BTreeMap<String, String>,
    pub compression: Option<Compression>,
}

impl Scan {
    /// Follows symlinks/hard links (docker save links identical layers) to a regular file.
    pub fn resolve(&self, path: &str) -> Option<(&str, &FileInfo)> {
        let mut p = normalize_path(path);
        for _ in 0..16 {
            if let Some((k, f)) = self.files.get_key_value(&p) {
                return Some((k.as_str(), f));
            }
            let target = self.links.get(&p)?;
            p = if target.starts_with('/') {
                normalize_path(target)
            } else {
                // relative to the link's directory
                let dir = p.rsplit_once('/').map(|(d, _)| d).unwrap_or("");
                let mut parts: Vec<&str> = dir.split('/').filter(|c| !c.is_empty()).collect();
                for c in target.split('/') {
                    match c {
                        "" | "." => {}
                        ".." => {
                            parts.pop();
                        }
                        c => parts.push(c),
                    }
                }
                parts.join("/")
            };
        }
        None
    }

    fn json(&self, file: &Path, path: &str) -> Result<Value> {
        let (_, f) = self.resolve(path).ok_or_else(|| ArchiveError::Layout {
            file: file.to_path_buf(),
            path: path.to_string(),
            reason: "missing from the archive".into(),
        })?;
        let bytes = f.content.as_ref().ok_or_else(|| ArchiveError::Layout {
            file: file.to_path_buf(),
            path: path.to_string(),
            reason: format!("not a JSON document of at most {MAX_JSON} bytes"),
        })?;
        serde_json::from_slice(bytes).map_err(|e| ArchiveError::Layout {
            file: file.to_path_buf(),
            path: path.to_string(),
            reason: format!("invalid JSON: {e}"),
        })
    }
}

fn keep_in_memory(path: &str, size: u64, head: &[u8]) -> bool {
    size <= MAX_JSON
        && (matches!(
            path,
            "index.json" | "manifest.json" | "oci-layout" | "repositories"
        ) || head
            .iter()
            .find(|b| !b.is_ascii_whitespace())
            .is_some_and(|b| *b == b'{' || *b == b'['))
}

/// Pass 1: reads the whole archive, hashing every regular file. `progress` gets the number
/// of member bytes read so far.
pub fn scan(file: &Path, progress: &mut dyn FnMut(u64)) -> Result<Scan> {
    let (reader, comp) = open(file)?;
    scan_reader(file, reader, comp, progress)
}

/// [`scan`] of an opened, decompressed tar stream (`reader`) of `file`, compressed as `comp`
/// says. Pure: `file` only names the archive in errors.
pub fn scan_reader(
    file: &Path,
    reader: impl Read,
    comp: Compression,
    progress: &mut dyn FnMut(u64),
) -> Result<Scan> {
    let mut tar = TarReader::new(reader);
    let tar_err = |e: io::Error| ArchiveError::Tar {
        file: file.to_path_buf(),
        reason: e.to_string(),
    };
    let mut out = Scan {
        compression: Some(comp),
        ..Scan::default()
    };
    let mut buf = vec![0u8; 256 << 10];
    let mut total = 0u64;
    let mut members = 0usize;
    while let Some(e) = tar.next_entry().map_err(tar_err)? {
        members += 1;
        match e.kind {
            EntryKind::File => {
                let mut h = Sha256::new();
                let mut head = Vec::new();
                let mut content = Vec::new();
                let mut keep: Option<bool> = None;
                loop {
                    let n = tar.data(&mut buf).map_err(tar_err)?;
                    if n == 0 {
                        break;
                    }
                    let chunk = &buf[..n];
                    h.update(chunk);
                    if head.len() < 16 {
                        let take = (16 - head.len()).min(n);
                        head.extend_from_slice(&chunk[..take]);
                    }
                    let k = *keep.get_or_insert_with(|| keep_in_memory(&e.path, e.size, &head));
                    if k {
                        content.extend_from_slice(chunk);
                    }
                    total += n as u64;
                    progress(total);
                }
                let keep = keep.unwrap_or_else(|| keep_in_memory(&e.path, e.size, &head));
                let digest = format!("sha256:{}", hex(&h.finalize()));
                out.files.insert(
                    e.path.clone(),
                    FileInfo {
                        digest,
                        size: e.size,
                        head,
                        content: keep.then_some(content),
                    },
                );
            }
            EntryKind::Symlink | EntryKind::HardLink => {
                let target = if e.kind == EntryKind::HardLink {
                    // hard link targets are archive paths, not relative to the link
                    format!("/{}", normalize_path(&e.link))
                } else {
                    e.link.clone()
                };
                out.links.insert(e.path.clone(), target);
            }
            EntryKind::Dir | EntryKind::Other => {}
        }
    }
    if members == 0 {
        return Err(ArchiveError::Tar {
            file: file.to_path_buf(),
            reason: "empty archive".into(),
        });
    }
    Ok(out)
}

/// Why pass 2 stopped: the archive could not be read, or the callback failed.
#[derive(Debug)]
pub enum EntryError<E> {
    Archive(ArchiveError),
    Callback(E),
}

/// Pass 2: calls `f(path, reader)` for each regular file in `wanted` (normalised paths), in
/// archive order. The reader yields the member's data. The first error stops the pass.
pub fn for_each_entry<E>(
    file: &Path,
    wanted: &BTreeSet<String>,
    f: &mut dyn FnMut(&str, &mut dyn Read) -> std::result::Result<(), E>,
) -> std::result::Result<(), EntryError<E>> {
    let (reader, _) = open(file).map_err(EntryError::Archive)?;
    let mut tar = TarReader::new(reader);
    let tar_err = |e: io::Error| ArchiveError::Tar {
        file: file.to_path_buf(),
        reason: e.to_string(),
    };
    while let Some(e) = tar
        .next_entry()
        .map_err(|e| EntryError::Archive(tar_err(e)))?
    {
        if e.kind == EntryKind::File && wanted.contains(&e.path) {
            let mut r = MemberReader { tar: &mut tar };
            f(&e.path, &mut r).map_err(EntryError::Callback)?;
        }
    }
    Ok(())
}

struct MemberReader<'a, R: Read> {
    tar: &'a mut TarReader<R>,
}

impl<R: Read> Read for MemberReader<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.tar.data(buf)
    }
}

pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// `sha256:<hex>` of `data`.
pub fn sha256_digest(data: &[u8]) -> String {
    format!("sha256:{}", hex(&Sha256::digest(data)))
}

// ---------------------------------------------------------------------------------------------
// platforms, chain IDs, names

/// An OS/architecture/variant triple as in OCI descriptors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Platform {
    pub os: String,
    pub architecture: String,
    pub variant: String,
}

impl std::fmt::Display for Platform {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.os, self.architecture)?;
        if !self.variant.is_empty() {
            write!(f, "/{}", self.variant)?;
        }
        Ok(())
    }
}

impl Platform {
    /// The host's platform (`uname -m` decides the ARM variant).
    pub fn host() -> Platform {
        let machine = nix::sys::utsname::uname()
            .map(|u| u.machine().to_string_lossy().into_owned())
            .unwrap_or_else(|_| std::env::consts::ARCH.to_string());
        Self::from_machine(&machine)
    }

    fn from_machine(machine: &str) -> Platform {
        let (arch, variant) = match machine {
            "x86_64" | "amd64" => ("amd64", ""),
            "aarch64" | "arm64" => ("arm64", ""),
            "armv7l" | "armv8l" | "arm" => ("arm", "v7"),
            "armv6l" => ("arm", "v6"),
            "i386" | "i486" | "i586" | "i686" | "x86" => ("386", ""),
            "riscv64" => ("riscv64", ""),
            "ppc64le" | "powerpc64le" => ("ppc64le", ""),
            "s390x" => ("s390x", ""),
            other => (other, ""),
        };
        Platform {
            os: "linux".into(),
            architecture: arch.into(),
            variant: variant.into(),
        }
    }

    /// `amd64`, `arm64`, `arm/v7`, `linux/arm/v6`.
    pub fn parse(s: &str) -> std::result::Result<Platform, PlatformError> {
        let parts: Vec<&str> = s.split('/').collect();
        let (os, arch, variant) = match parts.as_slice() {
            [a] => ("linux", *a, ""),
            [a, v] if !matches!(*a, "linux") => ("linux", *a, *v),
            [o, a] => (*o, *a, ""),
            [o, a, v] => (*o, *a, *v),
            _ => {
                return Err(PlatformError::Form(s.into()));
            }
        };
        if arch.is_empty() || os.is_empty() {
            return Err(PlatformError::Empty(s.into()));
        }
        let mut p = Platform {
            os: os.to_string(),
            architecture: arch.to_string(),
            variant: variant.to_string(),
        };
        if p.architecture == "arm64" && p.variant == "v8" {
            p.variant.clear();
        }
        if p.architecture == "arm" && p.variant.is_empty() {
            p.variant = "v7".into();
        }
        Ok(p)
    }

    /// How well a descriptor's platform fits: lower is better, `None` does not run here.
    /// An ARM v7 host also runs v6 and v5 images (containerd's matcher does the same).
    pub fn rank(&self, os: &str, arch: &str, variant: &str) -> Option<usize> {
        if os != self.os || arch != self.architecture {
            return None;
        }
        let variant = if arch == "arm64" && variant == "v8" {
            ""
        } else {
            variant
        };
        if self.architecture == "arm" {
            let order: &[&str] = match self.variant.as_str() {
                "v8" => &["v8", "v7", "v6", "v5"],
                "v7" => &["v7", "v6", "v5"],
                "v6" => &["v6", "v5"],
                _ => &["v5"],
            };
            // An unspecified ARM variant is taken as the host's.
            if variant.is_empty() {
                return Some(0);
            }
            return order.iter().position(|v| *v == variant);
        }
        (variant.is_empty() || self.variant.is_empty() || variant == self.variant).then_some(0)
    }
}

/// The chain IDs of a layer stack: `chain[0] = diff_id[0]`,
/// `chain[i] = sha256(chain[i-1] + " " + diff_id[i])` (OCI image spec, config.md).
pub fn chain_ids(diff_ids: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(diff_ids.len());
    for d in diff_ids {
        let next = match out.last() {
            None => d.clone(),
            Some(parent) => sha256_digest(format!("{parent} {d}").as_bytes()),
        };
        out.push(next);
    }
    out
}

/// Normalises an image reference the way docker and containerd's CRI do
/// (`busybox` -> `docker.io/library/busybox:latest`), so the names pods use find the image.
pub fn normalize_ref(name: &str) -> std::result::Result<String, ImageRefError> {
    let name = name.trim();
    if name.is_empty() {
        return Err(ImageRefError::Empty);
    }
    if name.chars().any(|c| c.is_whitespace()) {
        return Err(ImageRefError::Whitespace(name.into()));
    }
    let (first, rest) = match name.split_once('/') {
        Some((f, r)) => (f, Some(r)),
        None => (name, None),
    };
    let is_domain = rest.is_some() && (first.contains(['.', ':']) || first == "localhost");
    let (domain, path_and_tag) = if is_domain {
        (first.to_string(), rest.unwrap_or_default().to_string())
    } else if rest.is_none() {
        ("docker.io".to_string(), format!("library/{name}"))
    } else {
        ("docker.io".to_string(), name.to_string())
    };
    let (path, suffix) = if let Some((p, d)) = path_and_tag.split_once('@') {
        (p.to_string(), format!("@{d}"))
    } else if let Some((p, t)) = path_and_tag.rsplit_once(':') {
        if p.is_empty() || t.is_empty() {
            return Err(ImageRefError::EmptyPart(name.into()));
        }
        (p.to_string(), format!(":{t}"))
    } else {
        (path_and_tag.clone(), ":latest".to_string())
    };
    if path.is_empty() || path.chars().any(|c| c.is_ascii_uppercase()) {
        return Err(ImageRefError::Repository(name.into()));
    }
    Ok(format!("{domain}/{path}{suffix}"))
}

// ---------------------------------------------------------------------------------------------
// plan

/// Where a blob's bytes come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A member of the archive (normalised path), streamed in pass 2.
    Archive(String),
    /// Bytes built or kept in memory (manifests nanolet made, small JSON blobs).
    Memory(Vec<u8>),
}

/// A content blob to have in containerd's content store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blob {
    pub digest: String,
    pub size: u64,
    pub media_type: String,
    pub source: Source,
    /// containerd labels (GC references, uncompressed digest) the blob must carry.
    pub labels: BTreeMap<String, String>,
}

/// A layer to unpack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layer {
    pub digest: String,
    pub size: u64,
    pub media_type: String,
    pub diff_id: String,
}

/// One image of the archive: its names, target descriptor, config and layers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImagePlan {
    pub names: Vec<String>,
    pub target_digest: String,
    pub target_size: u64,
    pub target_media_type: String,
    pub config_digest: String,
    pub layers: Vec<Layer>,
    pub platform: String,
}

/// Everything to import from one archive.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub format: &'static str,
    /// Deduplicated by digest, children before parents (layers, config, manifest, index).
    pub blobs: Vec<Blob>,
    pub images: Vec<ImagePlan>,
    /// Entries skipped (no name), for a warning.
    pub skipped: Vec<String>,
}

impl Plan {
    fn add_blob(&mut self, b: Blob) {
        if let Some(old) = self.blobs.iter_mut().find(|x| x.digest == b.digest) {
            old.labels.extend(b.labels);
        } else {
            self.blobs.push(b);
        }
    }
}

struct Ctx<'a> {
    file: &'a Path,
    scan: &'a Scan,
    platform: &'a Platform,
    /// `--arch` given: import even when the image is for another platform.
    forced: bool,
}

impl Ctx<'_> {
    fn err(&self, path: &str, reason: impl Into<String>) -> ArchiveError {
        ArchiveError::Layout {
            file: self.file.to_path_buf(),
            path: path.to_string(),
            reason: reason.into(),
        }
    }

    /// `blobs/sha256/<hex>` for a digest, checked against the hash of the content.
    fn blob_path(&self, digest: &str, size: Option<u64>, at: &str) -> Result<(String, &FileInfo)> {
        let (alg, hexpart) = digest
            .split_once(':')
            .ok_or_else(|| self.err(at, format!("invalid digest {digest:?}")))?;
        if alg != "sha256" || hexpart.len() != 64 || !hexpart.bytes().all(|b| b.is_ascii_hexdigit())
        {
            return Err(self.err(at, format!("unsupported digest {digest:?} (sha256 only)")));
        }
        let p = format!("blobs/{alg}/{hexpart}");
        let (real, f) = self
            .scan
            .resolve(&p)
            .ok_or_else(|| self.err(at, format!("blob {p} is missing from the archive")))?;
        if f.digest != digest {
            return Err(self.err(
                &p,
                format!(
                    "content does not match its digest (got {}): corrupt archive",
                    f.digest
                ),
            ));
        }
        if let Some(s) = size {
            if s != f.size {
                return Err(self.err(
                    &p,
                    format!("size {} differs from the descriptor's {s}", f.size),
                ));
            }
        }
        Ok((real.to_string(), f))
    }

    fn json_blob(&self, digest: &str, size: Option<u64>, at: &str) -> Result<(Value, Vec<u8>)> {
        let (p, f) = self.blob_path(digest, size, at)?;
        let bytes = f
            .content
            .clone()
            .ok_or_else(|| self.err(&p, "expected a JSON document (manifest, index or config)"))?;
        let v = serde_json::from_slice(&bytes)
            .map_err(|e| self.err(&p, format!("invalid JSON: {e}")))?;
        Ok((v, bytes))
    }
}

/// The rank of an index child without a `platform`: it matches, after every child that
/// matches by its platform (see [`Platform::rank`]).
const NO_PLATFORM_RANK: usize = usize::MAX;

/// An attestation manifest (provenance, SBOM) of buildx / BuildKit: never an image to run.
fn is_attestation(d: &Value) -> bool {
    let annotated = d
        .pointer("/annotations/vnd.docker.reference.type")
        .and_then(Value::as_str)
        == Some("attestation-manifest");
    let unknown = d.get("platform").is_some_and(|p| {
        str_field(p, "os") == "unknown" && str_field(p, "architecture") == "unknown"
    });
    annotated || unknown
}

fn str_field<'a>(v: &'a Value, k: &str) -> &'a str {
    v.get(k).and_then(Value::as_str).unwrap_or("")
}

fn desc_size(v: &Value) -> Option<u64> {
    v.get("size").and_then(Value::as_u64)
}

/// Builds the import plan. `forced` says the platform came from `--arch`.
pub fn plan(file: &Path, scan: &Scan, platform: &Platform, forced: bool) -> Result<Plan> {
    let ctx = Ctx {
        file,
        scan,
        platform,
        forced,
    };
    if scan.resolve("index.json").is_some() {
        plan_oci(&ctx)
    } else if scan.resolve("manifest.json").is_some() {
        plan_docker(&ctx)
    } else {
        Err(ArchiveError::UnknownFormat {
            file: file.to_path_buf(),
        })
    }
}

fn plan_oci(ctx: &Ctx) -> Result<Plan> {
    let index = ctx.scan.json(ctx.file, "index.json")?;
    let manifests = index
        .get("manifests")
        .and_then(Value::as_array)
        .ok_or_else(|| ctx.err("index.json", "no \"manifests\" array"))?;
    let mut plan = Plan {
        format: "oci-layout",
        ..Plan::default()
    };
    for (i, d) in manifests.iter().enumerate() {
        let at = format!("index.json: manifests[{i}]");
        let ann = d.get("annotations");
        let ann_str = |k: &str| ann.and_then(|a| a.get(k)).and_then(Value::as_str);
        let name = ann_str("io.containerd.image.name").or_else(|| {
            // A bare tag ("1.36") is no image name without a base name.
            ann_str("org.opencontainers.image.ref.name").filter(|n| n.contains(['/', ':', '@']))
        });
        let Some(name) = name else {
            plan.skipped.push(format!(
                "{at}: no image name (annotation io.containerd.image.name or a full org.opencontainers.image.ref.name)"
            ));
            continue;
        };
        let name = normalize_ref(name).map_err(|e| ctx.err(&at, e.to_string()))?;
        let img = plan_descriptor(ctx, &mut plan, d, &at, 0)?;
        if let Some(existing) = plan
            .images
            .iter_mut()
            .find(|x| x.target_digest == img.target_digest)
        {
            existing.names.push(name);
        } else {
            let mut img = img;
            img.names.push(name);
            plan.images.push(img);
        }
    }
    if plan.images.is_empty() {
        return Err(ctx.err(
            "index.json",
            format!(
                "no named image in the archive ({})",
                plan.skipped.join("; ")
            ),
        ));
    }
    Ok(plan)
}

/// An index or manifest descriptor, recursively (the host's platform chosen from indexes).
fn plan_descriptor(
    ctx: &Ctx,
    plan: &mut Plan,
    d: &Value,
    at: &str,
    depth: usize,
) -> Result<ImagePlan> {
    if depth > 4 {
        return Err(ctx.err(at, "indexes nested too deep"));
    }
    let digest = str_field(d, "digest");
    let (v, bytes) = ctx.json_blob(digest, desc_size(d), at)?;
    let mt = match str_field(d, "mediaType") {
        "" => str_field(&v, "mediaType").to_string(),
        m => m.to_string(),
    };
    let is_index = mt == MT_OCI_INDEX
        || mt == MT_DOCKER_LIST
        || (mt.is_empty() && v.get("manifests").is_some());
    if !is_index {
        return plan_manifest(ctx, plan, &v, bytes, digest, mt, at);
    }
    let children = v
        .get("manifests")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let (i, labels) = choose_child(ctx, &children, digest, at)?;
    let mut img = plan_descriptor(
        ctx,
        plan,
        &children[i],
        &format!("{at} -> {digest}"),
        depth + 1,
    )?;
    plan.add_blob(Blob {
        digest: digest.to_string(),
        size: bytes.len() as u64,
        media_type: if mt.is_empty() {
            MT_OCI_INDEX.into()
        } else {
            mt.clone()
        },
        source: Source::Memory(bytes.clone()),
        labels,
    });
    img.target_digest = digest.to_string();
    img.target_size = bytes.len() as u64;
    img.target_media_type = if mt.is_empty() {
        MT_OCI_INDEX.into()
    } else {
        mt
    };
    Ok(img)
}

/// The index child to import (its position) and the index's content labels.
fn choose_child(
    ctx: &Ctx,
    children: &[Value],
    digest: &str,
    at: &str,
) -> Result<(usize, BTreeMap<String, String>)> {
    // containerd's platform rule (images.Manifest, and the exporter behind `ctr images
    // export`): a child without a `platform` matches every platform, but sorts after each
    // child whose platform does match (the matcher's order: the host's exact platform
    // first, then compatible ARM variants; ties keep the index's order), and containerd
    // takes the first. Attestation manifests (buildx: annotation
    // `vnd.docker.reference.type: attestation-manifest`, platform unknown/unknown) are
    // never chosen.
    let mut best: Option<(usize, usize)> = None;
    let mut labels = BTreeMap::new();
    let mut seen = Vec::new();
    let mut attestations = 0usize;
    for (i, c) in children.iter().enumerate() {
        labels.insert(
            format!("containerd.io/gc.ref.content.m.{i}"),
            str_field(c, "digest").to_string(),
        );
        if is_attestation(c) {
            attestations += 1;
            continue;
        }
        let rank = match c.get("platform") {
            None | Some(Value::Null) => Some(NO_PLATFORM_RANK),
            Some(p) => {
                let (os, arch, variant) = (
                    str_field(p, "os"),
                    str_field(p, "architecture"),
                    str_field(p, "variant"),
                );
                seen.push(
                    Platform {
                        os: os.into(),
                        architecture: arch.into(),
                        variant: variant.into(),
                    }
                    .to_string(),
                );
                ctx.platform.rank(os, arch, variant)
            }
        };
        if let Some(r) = rank {
            if best.is_none_or(|(br, _)| r < br) {
                best = Some((r, i));
            }
        }
    }
    let Some((_, i)) = best else {
        if attestations > 0 {
            seen.push(format!(
                "{attestations} attestation manifest{}, never imported",
                if attestations == 1 { "" } else { "s" }
            ));
        }
        return Err(ctx.err(
            at,
            format!(
                "no manifest for platform {} in index {digest} (it has: {})",
                ctx.platform,
                if seen.is_empty() {
                    "none".to_string()
                } else {
                    seen.join(", ")
                }
            ),
        ));
    };
    Ok((i, labels))
}

/// A manifest descriptor's plan: its config and layers as blobs, and the image they make.
fn plan_manifest(
    ctx: &Ctx,
    plan: &mut Plan,
    v: &Value,
    bytes: Vec<u8>,
    digest: &str,
    mt: String,
    at: &str,
) -> Result<ImagePlan> {
    let cfg = v
        .get("config")
        .ok_or_else(|| ctx.err(at, format!("manifest {digest} has no config")))?;
    let cfg_digest = str_field(cfg, "digest").to_string();
    let (config, cfg_bytes) = ctx.json_blob(&cfg_digest, desc_size(cfg), at)?;
    let platform = check_config_platform(ctx, &config, at)?;
    let diff_ids = diff_ids(ctx, &config, &cfg_digest)?;
    let layer_descs = v
        .get("layers")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if layer_descs.len() != diff_ids.len() {
        return Err(ctx.err(
            at,
            format!(
                "manifest {digest} has {} layers but its config {} diff_ids",
                layer_descs.len(),
                diff_ids.len()
            ),
        ));
    }
    let mut labels = BTreeMap::new();
    labels.insert(
        "containerd.io/gc.ref.content.config".to_string(),
        cfg_digest.clone(),
    );
    let mut layers = Vec::new();
    for (i, l) in layer_descs.iter().enumerate() {
        let ld = str_field(l, "digest");
        let (path, f) = ctx.blob_path(ld, desc_size(l), &format!("{at}: layers[{i}]"))?;
        labels.insert(
            format!("containerd.io/gc.ref.content.l.{i}"),
            ld.to_string(),
        );
        let lmt = str_field(l, "mediaType").to_string();
        let mut llabels = BTreeMap::new();
        llabels.insert(
            "containerd.io/uncompressed".to_string(),
            diff_ids[i].clone(),
        );
        plan.add_blob(Blob {
            digest: ld.to_string(),
            size: f.size,
            media_type: lmt.clone(),
            source: Source::Archive(path),
            labels: llabels,
        });
        layers.push(Layer {
            digest: ld.to_string(),
            size: f.size,
            media_type: lmt,
            diff_id: diff_ids[i].clone(),
        });
    }
    plan.add_blob(Blob {
        digest: cfg_digest.clone(),
        size: cfg_bytes.len() as u64,
        media_type: str_field(cfg, "mediaType").to_string(),
        source: Source::Memory(cfg_bytes),
        labels: BTreeMap::new(),
    });
    let mt = if mt.is_empty() {
        MT_OCI_MANIFEST.to_string()
    } else {
        mt
    };
    plan.add_blob(Blob {
        digest: digest.to_string(),
        size: bytes.len() as u64,
        media_type: mt.clone(),
        source: Source::Memory(bytes.clone()),
        labels,
    });
    Ok(ImagePlan {
        names: Vec::new(),
        target_digest: digest.to_string(),
        target_size: bytes.len() as u64,
        target_media_type: mt,
        config_digest: cfg_digest,
        layers,
        platform,
    })
}

fn diff_ids(ctx: &Ctx, config: &Value, cfg_digest: &str) -> Result<Vec<String>> {
    let ids = config
        .pointer("/rootfs/diff_ids")
        .and_then(Value::as_array)
        .ok_or_else(|| ctx.err(cfg_digest, "config has no rootfs.diff_ids"))?;
    ids.iter()
        .map(|d| {
            d.as_str()
                .filter(|s| s.starts_with("sha256:") && s.len() == 71)
                .map(str::to_string)
                .ok_or_else(|| ctx.err(cfg_digest, format!("bad diff_id {d}")))
        })
        .collect()
}

/// The config's platform; an image for another platform is refused unless `--arch` forced it.
fn check_config_platform(ctx: &Ctx, config: &Value, at: &str) -> Result<String> {
    let os = match str_field(config, "os") {
        "" => "linux",
        o => o,
    };
    let arch = str_field(config, "architecture");
    let variant = str_field(config, "variant");
    let p = Platform {
        os: os.into(),
        architecture: arch.into(),
        variant: variant.into(),
    }
    .to_string();
    if !arch.is_empty() && !ctx.forced && ctx.platform.rank(os, arch, variant).is_none() {
        return Err(ctx.err(
            at,
            format!(
                "image is for {p}, this host is {} (use --arch to import it anyway)",
                ctx.platform
            ),
        ));
    }
    Ok(p)
}

fn plan_docker(ctx: &Ctx) -> Result<Plan> {
    let m = ctx.scan.json(ctx.file, "manifest.json")?;
    let entries = m
        .as_array()
        .ok_or_else(|| ctx.err("manifest.json", "expected a JSON array"))?;
    let mut plan = Plan {
        format: "docker-archive",
        ..Plan::default()
    };
    for (i, e) in entries.iter().enumerate() {
        plan_docker_image(ctx, &mut plan, &format!("manifest.json[{i}]"), e)?;
    }
    if plan.images.is_empty() {
        return Err(ctx.err(
            "manifest.json",
            format!(
                "no tagged image in the archive ({})",
                plan.skipped.join("; ")
            ),
        ));
    }
    Ok(plan)
}

/// One `manifest.json` entry `e` (at `at`): its config and layers as blobs, a docker schema2
/// manifest made for them, and the image under its RepoTags (skipped without any).
fn plan_docker_image(ctx: &Ctx, plan: &mut Plan, at: &str, e: &Value) -> Result<()> {
    let cfg_path = str_field(e, "Config");
    let (real_cfg, cfg_file) = ctx
        .scan
        .resolve(cfg_path)
        .ok_or_else(|| ctx.err(&format!("{at}.Config"), format!("{cfg_path:?} is missing")))?;
    let cfg_bytes = cfg_file
        .content
        .clone()
        .ok_or_else(|| ctx.err(real_cfg, "config is not a small JSON document"))?;
    let config: Value = serde_json::from_slice(&cfg_bytes)
        .map_err(|e| ctx.err(real_cfg, format!("invalid JSON: {e}")))?;
    let cfg_digest = cfg_file.digest.clone();
    let platform = check_config_platform(ctx, &config, at)?;
    let diff_ids = diff_ids(ctx, &config, real_cfg)?;
    let layer_paths: Vec<&str> = e
        .get("Layers")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if layer_paths.len() != diff_ids.len() {
        return Err(ctx.err(
            &format!("{at}.Layers"),
            format!(
                "{} layers but the config has {} diff_ids",
                layer_paths.len(),
                diff_ids.len()
            ),
        ));
    }
    let mut labels = BTreeMap::new();
    labels.insert(
        "containerd.io/gc.ref.content.config".to_string(),
        cfg_digest.clone(),
    );
    let (layers, mlayers) =
        plan_docker_layers(ctx, plan, at, &layer_paths, &diff_ids, &mut labels)?;
    // docker schema2 manifest for config + layers (docker save has none of its own).
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": MT_DOCKER_MANIFEST,
        "config": {"mediaType": MT_DOCKER_CONFIG, "size": cfg_file.size, "digest": cfg_digest},
        "layers": mlayers,
    });
    let mbytes = serde_json::to_vec(&manifest).map_err(|e| ctx.err(at, e.to_string()))?;
    let mdigest = sha256_digest(&mbytes);
    plan.add_blob(Blob {
        digest: cfg_digest.clone(),
        size: cfg_bytes.len() as u64,
        media_type: MT_DOCKER_CONFIG.into(),
        source: Source::Memory(cfg_bytes),
        labels: BTreeMap::new(),
    });
    plan.add_blob(Blob {
        digest: mdigest.clone(),
        size: mbytes.len() as u64,
        media_type: MT_DOCKER_MANIFEST.into(),
        source: Source::Memory(mbytes.clone()),
        labels,
    });
    let mut names = Vec::new();
    for t in e
        .get("RepoTags")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        names
            .push(normalize_ref(t).map_err(|r| ctx.err(&format!("{at}.RepoTags"), r.to_string()))?);
    }
    if names.is_empty() {
        plan.skipped.push(format!("{at}: no RepoTags"));
        return Ok(());
    }
    plan.images.push(ImagePlan {
        names,
        target_digest: mdigest,
        target_size: mbytes.len() as u64,
        target_media_type: MT_DOCKER_MANIFEST.into(),
        config_digest: cfg_digest,
        layers,
        platform,
    });
    Ok(())
}

/// The entry's layer files as blobs (their media type from their compression), each listed
/// in `labels`; returns the layers and their schema2 manifest descriptors.
fn plan_docker_layers(
    ctx: &Ctx,
    plan: &mut Plan,
    at: &str,
    layer_paths: &[&str],
    diff_ids: &[String],
    labels: &mut BTreeMap<String, String>,
) -> Result<(Vec<Layer>, Vec<Value>)> {
    let mut layers = Vec::new();
    let mut mlayers = Vec::new();
    for (j, lp) in layer_paths.iter().enumerate() {
        let (real, f) = ctx
            .scan
            .resolve(lp)
            .ok_or_else(|| ctx.err(&format!("{at}.Layers[{j}]"), format!("{lp:?} is missing")))?;
        let mt = match Compression::detect(&f.head) {
            Compression::Gzip => MT_DOCKER_LAYER_GZIP,
            Compression::Zstd => MT_DOCKER_LAYER_ZSTD,
            Compression::None => MT_DOCKER_LAYER,
        };
        if mt == MT_DOCKER_LAYER && f.digest != diff_ids[j] {
            return Err(ctx.err(
                real,
                format!(
                    "uncompressed layer hashes to {} but the config says {}: corrupt archive",
                    f.digest, diff_ids[j]
                ),
            ));
        }
        labels.insert(
            format!("containerd.io/gc.ref.content.l.{j}"),
            f.digest.clone(),
        );
        let mut llabels = BTreeMap::new();
        llabels.insert(
            "containerd.io/uncompressed".to_string(),
            diff_ids[j].clone(),
        );
        plan.add_blob(Blob {
            digest: f.digest.clone(),
            size: f.size,
            media_type: mt.into(),
            source: Source::Archive(real.to_string()),
            labels: llabels,
        });
        mlayers.push(serde_json::json!({"mediaType": mt, "size": f.size, "digest": f.digest}));
        layers.push(Layer {
            digest: f.digest.clone(),
            size: f.size,
            media_type: mt.into(),
            diff_id: diff_ids[j].clone(),
        });
    }
    Ok((layers, mlayers))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::io::Write as _;

    /// A minimal ustar writer for tests (pax `path` records for long names).
    pub(crate) struct TarBuilder(pub Vec<u8>);

    impl TarBuilder {
        pub fn new() -> Self {
            TarBuilder(Vec::new())
        }

        fn header(&mut self, name: &str, size: usize, typeflag: u8, link: &str) {
            let mut h = [0u8; 512];
            h[..name.len().min(100)].copy_from_slice(&name.as_bytes()[..name.len().min(100)]);
            h[100..108].copy_from_slice(b"0000644\0");
            h[108..116].copy_from_slice(b"0000000\0");
            h[116..124].copy_from_slice(b"0000000\0");
            h[124..136].copy_from_slice(format!("{size:011o}\0").as_bytes());
            h[136..148].copy_from_slice(b"00000000000\0");
            h[156] = typeflag;
            h[157..157 + link.len()].copy_from_slice(link.as_bytes());
            h[257..263].copy_from_slice(b"ustar\0");
            h[263..265].copy_from_slice(b"00");
            h[148..156].copy_from_slice(b"        ");
            let sum: u32 = h.iter().map(|b| u32::from(*b)).sum();
            h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
            self.0.extend_from_slice(&h);
        }

        fn data(&mut self, data: &[u8]) {
            self.0.extend_from_slice(data);
            let pad = (512 - data.len() % 512) % 512;
            self.0.extend(std::iter::repeat_n(0u8, pad));
        }

        pub fn file(&mut self, name: &str, data: &[u8]) -> &mut Self {
            if name.len() > 100 {
                let rec = format!(" path={name}\n");
                let mut len = rec.len();
                len += len.to_string().len();
                let rec = format!("{len}{rec}");
                self.header("PaxHeaders/x", rec.len(), b'x', "");
                self.data(rec.as_bytes());
            }
            self.header(name, data.len(), b'0', "");
            self.data(data);
            self
        }

        pub fn symlink(&mut self, name: &str, target: &str) -> &mut Self {
            self.header(name, 0, b'2', target);
            self
        }

        pub fn finish(&mut self) -> Vec<u8> {
            let mut v = self.0.clone();
            v.extend(std::iter::repeat_n(0u8, 1024));
            v
        }
    }

    fn write_tmp(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
        let p = dir.join(name);
        std::fs::File::create(&p).unwrap().write_all(bytes).unwrap();
        p
    }

    fn amd64() -> Platform {
        Platform::parse("linux/amd64").unwrap()
    }

    /// An OCI layout with one layer; returns (tar bytes, layer digest, manifest digest).
    pub(crate) fn oci_layout(name: &str, arch: &str) -> (Vec<u8>, String, String) {
        let layer = TarBuilder::new().file("hello.txt", b"hi\n").finish();
        let ldigest = sha256_digest(&layer);
        let config = format!(
            r#"{{"architecture":"{arch}","os":"linux","rootfs":{{"type":"layers","diff_ids":["{ldigest}"]}}}}"#
        );
        let cdigest = sha256_digest(config.as_bytes());
        let manifest = format!(
            r#"{{"schemaVersion":2,"mediaType":"{MT_OCI_MANIFEST}","config":{{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"{cdigest}","size":{}}},"layers":[{{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"{ldigest}","size":{}}}]}}"#,
            config.len(),
            layer.len()
        );
        let mdigest = sha256_digest(manifest.as_bytes());
        let index = format!(
            r#"{{"schemaVersion":2,"manifests":[{{"mediaType":"{MT_OCI_MANIFEST}","digest":"{mdigest}","size":{},"annotations":{{"io.containerd.image.name":"{name}"}}}}]}}"#,
            manifest.len()
        );
        let blob = |d: &str| format!("blobs/sha256/{}", &d[7..]);
        let tar = TarBuilder::new()
            .file("oci-layout", br#"{"imageLayoutVersion":"1.0.0"}"#)
            .file(&blob(&ldigest), &layer)
            .file(&blob(&cdigest), config.as_bytes())
            .file(&blob(&mdigest), manifest.as_bytes())
            .file("index.json", index.as_bytes())
            .finish();
        (tar, ldigest, mdigest)
    }

    #[test]
    fn tar_reader_reads_members_long_names_and_links() {
        let long = format!("{}/file", "d".repeat(120));
        let bytes = TarBuilder::new()
            .file("./a.txt", b"hello")
            .file(&long, b"x")
            .symlink("l", "a.txt")
            .finish();
        let mut t = TarReader::new(&bytes[..]);
        let e = t.next_entry().unwrap().unwrap();
        assert_eq!(
            (e.path.as_str(), e.size, e.kind),
            ("a.txt", 5, EntryKind::File)
        );
        let mut buf = [0u8; 16];
        assert_eq!(t.data(&mut buf).unwrap(), 5);
        assert_eq!(&buf[..5], b"hello");
        let e = t.next_entry().unwrap().unwrap();
        assert_eq!(e.path, long);
        let e = t.next_entry().unwrap().unwrap();
        assert_eq!((e.kind, e.link.as_str()), (EntryKind::Symlink, "a.txt"));
        assert!(t.next_entry().unwrap().is_none());
    }

    /// Go's archive/tar isHeaderOnlyType: typeflags 1-6 (here 3 character device, 4 block
    /// device, 6 FIFO, 5 directory) carry no data even with a non-zero size field; the next
    /// header follows directly. Reading the size as data would swallow the next member.
    #[test]
    fn devices_and_fifos_with_a_size_are_header_only_as_go_archive_tar() {
        for flag in [b'3', b'4', b'5', b'6'] {
            let mut b = TarBuilder::new();
            b.header("dev", 512, flag, "");
            b.file("after.txt", b"data");
            let bytes = b.finish();
            let mut t = TarReader::new(&bytes[..]);
            let e = t.next_entry().unwrap().unwrap();
            assert_eq!((e.path.as_str(), e.size), ("dev", 0), "typeflag {flag}");
            let e = t.next_entry().unwrap().unwrap();
            assert_eq!(
                (e.path.as_str(), e.size, e.kind),
                ("after.txt", 4, EntryKind::File),
                "typeflag {flag}"
            );
            assert!(t.next_entry().unwrap().is_none());
        }
    }

    #[test]
    fn truncated_and_corrupt_tars_are_errors() {
        let d = tempfile::tempdir().unwrap();
        let (tar, _, _) = oci_layout("localhost/a:1", "amd64");
        let cut = write_tmp(d.path(), "cut.tar", &tar[..tar.len() / 2 + 100]);
        let e = scan(&cut, &mut |_| {}).unwrap_err().to_string();
        assert!(e.contains("cut.tar") && e.contains("truncated"), "{e}");
        let mut bad = tar.clone();
        bad[10] ^= 0x55; // first header's name: checksum no longer matches
        let bad = write_tmp(d.path(), "bad.tar", &bad);
        let e = scan(&bad, &mut |_| {}).unwrap_err().to_string();
        assert!(e.contains("bad.tar") && e.contains("checksum"), "{e}");
        let empty = write_tmp(d.path(), "empty.tar", &[0u8; 1024]);
        assert!(
            scan(&empty, &mut |_| {})
                .unwrap_err()
                .to_string()
                .contains("empty archive")
        );
    }

    #[test]
    fn oci_layout_plan_plain_gzip_and_zstd_detection() {
        let d = tempfile::tempdir().unwrap();
        let (tar, ldigest, mdigest) = oci_layout("localhost/a:1", "amd64");
        let plain = write_tmp(d.path(), "a.tar", &tar);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&tar).unwrap();
        let gz = write_tmp(d.path(), "a.tar.gz", &gz.finish().unwrap());
        for f in [&plain, &gz] {
            let s = scan(f, &mut |_| {}).unwrap();
            let p = plan(f, &s, &amd64(), false).unwrap();
            assert_eq!(p.format, "oci-layout");
            assert_eq!(p.images.len(), 1);
            let img = &p.images[0];
            assert_eq!(img.names, vec!["localhost/a:1".to_string()]);
            assert_eq!(img.target_digest, mdigest);
            assert_eq!(img.layers[0].digest, ldigest);
            // layers first, then config, then the manifest with its GC references
            assert_eq!(p.blobs.len(), 3);
            assert_eq!(
                p.blobs[0].source,
                Source::Archive(format!("blobs/sha256/{}", &ldigest[7..]))
            );
            assert_eq!(p.blobs[0].labels["containerd.io/uncompressed"], ldigest);
            let m = &p.blobs[2];
            assert_eq!(m.digest, mdigest);
            assert_eq!(m.labels["containerd.io/gc.ref.content.l.0"], ldigest);
            assert_eq!(
                m.labels["containerd.io/gc.ref.content.config"],
                img.config_digest
            );
        }
        assert_eq!(
            Compression::detect(&[0x28, 0xb5, 0x2f, 0xfd, 0]),
            Compression::Zstd
        );
        assert_eq!(Compression::detect(b"ustar"), Compression::None);
    }

    #[test]
    fn wrong_platform_and_bad_digest_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let (tar, _, _) = oci_layout("localhost/a:1", "arm64");
        let f = write_tmp(d.path(), "arm.tar", &tar);
        let s = scan(&f, &mut |_| {}).unwrap();
        let e = plan(&f, &s, &amd64(), false).unwrap_err().to_string();
        assert!(e.contains("linux/arm64") && e.contains("--arch"), "{e}");
        assert!(plan(&f, &s, &amd64(), true).is_ok(), "--arch forces it");
        // a blob whose content does not match its name
        let (tar, ldigest, _) = oci_layout("localhost/a:1", "amd64");
        let mut s = scan(&write_tmp(d.path(), "ok.tar", &tar), &mut |_| {}).unwrap();
        let key = format!("blobs/sha256/{}", &ldigest[7..]);
        s.files.get_mut(&key).unwrap().digest = sha256_digest(b"other");
        let e = plan(&f, &s, &amd64(), false).unwrap_err().to_string();
        assert!(e.contains(&key) && e.contains("corrupt"), "{e}");
    }

    #[test]
    fn docker_archive_plan_builds_a_schema2_manifest() {
        let d = tempfile::tempdir().unwrap();
        let layer = TarBuilder::new().file("x", b"1").finish();
        let ld = sha256_digest(&layer);
        let config = format!(
            r#"{{"architecture":"amd64","os":"linux","rootfs":{{"type":"layers","diff_ids":["{ld}","{ld}"]}}}}"#
        );
        let cfg_name = format!("{}.json", &sha256_digest(config.as_bytes())[7..]);
        let manifest = format!(
            r#"[{{"Config":"{cfg_name}","RepoTags":["busybox:1.36","example.com:5000/x/y"],"Layers":["l1/layer.tar","l2/layer.tar"]}}]"#
        );
        let tar = TarBuilder::new()
            .file(&cfg_name, config.as_bytes())
            .file("l1/layer.tar", &layer)
            .symlink("l2/layer.tar", "../l1/layer.tar")
            .file("manifest.json", manifest.as_bytes())
            .finish();
        let f = write_tmp(d.path(), "docker.tar", &tar);
        let s = scan(&f, &mut |_| {}).unwrap();
        let p = plan(&f, &s, &amd64(), false).unwrap();
        assert_eq!(p.format, "docker-archive");
        let img = &p.images[0];
        assert_eq!(
            img.names,
            vec![
                "docker.io/library/busybox:1.36".to_string(),
                "example.com:5000/x/y:latest".to_string()
            ]
        );
        assert_eq!(img.layers.len(), 2);
        assert_eq!(img.layers[1].media_type, MT_DOCKER_LAYER);
        let m = p
            .blobs
            .iter()
            .find(|b| b.digest == img.target_digest)
            .unwrap();
        let Source::Memory(bytes) = &m.source else {
            panic!()
        };
        assert_eq!(sha256_digest(bytes), img.target_digest);
        let v: Value = serde_json::from_slice(bytes).unwrap();
        assert_eq!(v["mediaType"], MT_DOCKER_MANIFEST);
        assert_eq!(v["layers"][1]["digest"], ld.as_str());
        assert_eq!(m.labels["containerd.io/gc.ref.content.l.1"], ld);
    }

    #[test]
    fn index_picks_the_host_platform() {
        let d = tempfile::tempdir().unwrap();
        let mk = |arch: &str| {
            let config =
                format!(r#"{{"architecture":"{arch}","os":"linux","rootfs":{{"diff_ids":[]}}}}"#);
            let cd = sha256_digest(config.as_bytes());
            let m = format!(
                r#"{{"schemaVersion":2,"mediaType":"{MT_OCI_MANIFEST}","config":{{"digest":"{cd}","size":{}}},"layers":[]}}"#,
                config.len()
            );
            (config, cd, m.clone(), sha256_digest(m.as_bytes()))
        };
        let a = mk("amd64");
        let b = mk("arm");
        let idx = format!(
            r#"{{"schemaVersion":2,"mediaType":"{MT_OCI_INDEX}","manifests":[{{"mediaType":"{MT_OCI_MANIFEST}","digest":"{}","size":{},"platform":{{"os":"linux","architecture":"arm","variant":"v6"}}}},{{"mediaType":"{MT_OCI_MANIFEST}","digest":"{}","size":{},"platform":{{"os":"linux","architecture":"amd64"}}}}]}}"#,
            b.3,
            b.2.len(),
            a.3,
            a.2.len()
        );
        let id = sha256_digest(idx.as_bytes());
        let top = format!(
            r#"{{"schemaVersion":2,"manifests":[{{"mediaType":"{MT_OCI_INDEX}","digest":"{id}","size":{},"annotations":{{"org.opencontainers.image.ref.name":"localhost/multi:1"}}}}]}}"#,
            idx.len()
        );
        let blob = |d: &str| format!("blobs/sha256/{}", &d[7..]);
        let tar = TarBuilder::new()
            .file(&blob(&a.1), a.0.as_bytes())
            .file(&blob(&a.3), a.2.as_bytes())
            .file(&blob(&b.1), b.0.as_bytes())
            .file(&blob(&b.3), b.2.as_bytes())
            .file(&blob(&id), idx.as_bytes())
            .file("index.json", top.as_bytes())
            .finish();
        let f = write_tmp(d.path(), "multi.tar", &tar);
        let s = scan(&f, &mut |_| {}).unwrap();
        let p = plan(&f, &s, &amd64(), false).unwrap();
        assert_eq!(p.images[0].target_digest, id);
        assert_eq!(p.images[0].config_digest, a.1);
        let ib = p.blobs.iter().find(|x| x.digest == id).unwrap();
        assert_eq!(ib.labels["containerd.io/gc.ref.content.m.1"], a.3);
        // an ARM v7 host takes the v6 image
        let p = plan(&f, &s, &Platform::parse("arm/v7").unwrap(), false).unwrap();
        assert_eq!(p.images[0].config_digest, b.1);
        let e = plan(&f, &s, &Platform::parse("arm64").unwrap(), false)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("no manifest for platform linux/arm64")
                && e.contains("linux/arm/v6, linux/amd64"),
            "{e}"
        );
    }

    /// An OCI layout whose index.json names one image index, `localhost/idx:1`, with one
    /// child per `(config architecture, descriptor extra JSON)`: the extra is spliced into the
    /// child's descriptor (`"platform":{...}`, `"annotations":{...}` or nothing). Returns the
    /// archive and, per child, its config digest.
    fn index_archive(children: &[(&str, &str)]) -> (Vec<u8>, Vec<String>) {
        let blob = |d: &str| format!("blobs/sha256/{}", &d[7..]);
        let mut tar = TarBuilder::new();
        let mut descs = Vec::new();
        let mut configs = Vec::new();
        for (i, (arch, extra)) in children.iter().enumerate() {
            // distinct configs (and so manifests) per child
            let config = format!(
                r#"{{"architecture":"{arch}","os":"linux","config":{{"Labels":{{"child":"{i}"}}}},"rootfs":{{"diff_ids":[]}}}}"#
            );
            let cd = sha256_digest(config.as_bytes());
            let m = format!(
                r#"{{"schemaVersion":2,"mediaType":"{MT_OCI_MANIFEST}","config":{{"digest":"{cd}","size":{}}},"layers":[]}}"#,
                config.len()
            );
            let md = sha256_digest(m.as_bytes());
            tar.file(&blob(&cd), config.as_bytes())
                .file(&blob(&md), m.as_bytes());
            let extra = if extra.is_empty() {
                String::new()
            } else {
                format!(",{extra}")
            };
            descs.push(format!(
                r#"{{"mediaType":"{MT_OCI_MANIFEST}","digest":"{md}","size":{}{extra}}}"#,
                m.len()
            ));
            configs.push(cd);
        }
        // As skopeo writes an index: no mediaType field in the document itself.
        let idx = format!(r#"{{"schemaVersion":2,"manifests":[{}]}}"#, descs.join(","));
        let id = sha256_digest(idx.as_bytes());
        let top = format!(
            r#"{{"schemaVersion":2,"manifests":[{{"mediaType":"{MT_OCI_INDEX}","digest":"{id}","size":{},"annotations":{{"io.containerd.image.name":"localhost/idx:1"}}}}]}}"#,
            idx.len()
        );
        tar.file(&blob(&id), idx.as_bytes())
            .file("index.json", top.as_bytes());
        (tar.finish(), configs)
    }

    /// containerd's platform matcher as images.Manifest applies it to an index (and
    /// `ctr images export` writes such indexes, e.g. of an image imported with
    /// `ctr images import --index-name`): a descriptor without `platform` matches any
    /// platform; descriptors whose platform matches the host are preferred to it; attestation
    /// manifests are never chosen.
    #[test]
    fn containerd_rule_a_child_without_platform_matches_any_platform() {
        let d = tempfile::tempdir().unwrap();
        let attestation = r#""platform":{"os":"unknown","architecture":"unknown"},"annotations":{"vnd.docker.reference.type":"attestation-manifest"}"#;
        let amd64 = r#""platform":{"os":"linux","architecture":"amd64"}"#;
        let pick = |children: &[(&str, &str)], host: &str| {
            let (tar, configs) = index_archive(children);
            let f = write_tmp(d.path(), "idx.tar", &tar);
            let s = scan(&f, &mut |_| {}).unwrap();
            plan(&f, &s, &Platform::parse(host).unwrap(), false)
                .map(|p| configs.iter().position(|c| *c == p.images[0].config_digest))
                .map_err(|e| e.to_string())
        };
        // The only child has no platform (what the issue's `ctr images export` archive had).
        assert_eq!(pick(&[("amd64", "")], "linux/amd64"), Ok(Some(0)));
        // An attestation manifest first: never chosen.
        assert_eq!(
            pick(&[("amd64", attestation), ("amd64", "")], "linux/amd64"),
            Ok(Some(1))
        );
        // A child that matches by its platform wins over an earlier one without platform.
        assert_eq!(
            pick(&[("amd64", ""), ("amd64", amd64)], "linux/amd64"),
            Ok(Some(1))
        );
        // ... and over a compatible variant only when it is the exact one (ARM v7 host).
        assert_eq!(
            pick(
                &[
                    ("arm", ""),
                    (
                        "arm",
                        r#""platform":{"os":"linux","architecture":"arm","variant":"v6"}"#
                    ),
                    (
                        "arm",
                        r#""platform":{"os":"linux","architecture":"arm","variant":"v7"}"#
                    ),
                ],
                "arm/v7"
            ),
            Ok(Some(2))
        );
        // A child without platform is still checked against its config (containerd reads
        // the config's os/architecture for it): an arm64 image is refused on amd64.
        let e = pick(&[("arm64", "")], "linux/amd64").unwrap_err();
        assert!(
            e.contains("image is for linux/arm64") && e.contains("--arch"),
            "{e}"
        );
        // Only an attestation and another platform: nothing to import, and the error says so.
        let e = pick(
            &[
                (
                    "arm64",
                    r#""platform":{"os":"linux","architecture":"arm64"}"#,
                ),
                ("amd64", attestation),
            ],
            "linux/amd64",
        )
        .unwrap_err();
        assert!(
            e.contains("no manifest for platform linux/amd64")
                && e.contains("linux/arm64, 1 attestation manifest, never imported"),
            "{e}"
        );
    }

    #[test]
    fn chain_ids_follow_the_image_spec() {
        let ids = chain_ids(&["sha256:aaaa".into(), "sha256:bbbb".into()]);
        assert_eq!(ids[0], "sha256:aaaa");
        assert_eq!(
            ids[1],
            "sha256:2c4d8760379f05d0ad1ed610712309f0114e7345e6e6a351494cff030ffdf197"
        );
        assert!(chain_ids(&[]).is_empty());
    }

    #[test]
    fn references_normalise_like_docker() {
        for (i, o) in [
            ("busybox", "docker.io/library/busybox:latest"),
            ("busybox:1.36", "docker.io/library/busybox:1.36"),
            ("me/app", "docker.io/me/app:latest"),
            ("localhost/busybox:1.36", "localhost/busybox:1.36"),
            ("reg.io:5000/a/b:c", "reg.io:5000/a/b:c"),
            ("reg.io/a@sha256:00", "reg.io/a@sha256:00"),
        ] {
            assert_eq!(normalize_ref(i).unwrap(), o, "{i}");
        }
        assert!(normalize_ref("Busybox").is_err());
        assert!(normalize_ref("").is_err());
    }

    #[test]
    fn platforms_parse_and_rank() {
        assert_eq!(Platform::from_machine("armv7l").to_string(), "linux/arm/v7");
        assert_eq!(Platform::from_machine("aarch64").to_string(), "linux/arm64");
        assert_eq!(
            Platform::parse("arm64/v8").unwrap().to_string(),
            "linux/arm64"
        );
        assert!(Platform::parse("a/b/c/d").is_err());
        let v6 = Platform::parse("arm/v6").unwrap();
        assert_eq!(v6.rank("linux", "arm", "v7"), None);
        assert_eq!(v6.rank("linux", "arm", "v5"), Some(1));
    }
}
