//! The API server double's certificate authority, made and used through the Debian `openssl`
//! CLI (independent of nanolet's own certificate code): the CA, the serving certificate,
//! client certificates for any user, and the CSR signer kube-controller-manager runs for
//! `kubernetes.io/kube-apiserver-client-kubelet` and `kubernetes.io/kubelet-serving`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// A client (or serving) certificate and its key, as PEM files.
#[derive(Clone, Debug)]
pub struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// A CA in a temp dir: `ca.crt`, `ca.key` and `openssl ca`'s database.
pub struct Ca {
    dir: tempfile::TempDir,
    pub cert: PathBuf,
    pub key: PathBuf,
    /// `openssl ca` keeps a database and a serial file: one signing at a time.
    lock: Mutex<u64>,
}

fn openssl(dir: &Path, args: &[&str]) -> Result<Vec<u8>, String> {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .map_err(|e| format!("running openssl: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "openssl {}: {}",
            args.first().copied().unwrap_or(""),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(out.stdout)
}

/// An openssl `-subj` for a subject: one O per group, then CN (the order kubeadm's certs have).
pub fn subject(cn: &str, orgs: &[&str]) -> String {
    let esc = |s: &str| s.replace('\\', "\\\\").replace('/', "\\/");
    let mut s = String::new();
    for o in orgs {
        s.push_str(&format!("/O={}", esc(o)));
    }
    s.push_str(&format!("/CN={}", esc(cn)));
    s
}

/// `YYYYMMDDHHMMSSZ` (what `openssl ca -startdate/-enddate` take) of a Unix time.
fn asn1_time(secs: i64) -> String {
    crate::apiserver::rfc3339(secs).replace(['-', ':', 'T'], "")
}

/// certificates.k8s.io/v1 key usages -> openssl's keyUsage / extendedKeyUsage names
/// (`keyUsageDict` / `extKeyUsageDict` in k8s.io/kubernetes pkg/controller/certificates/authority).
pub fn usage_extensions(
    usages: &[String],
) -> Result<(Vec<&'static str>, Vec<&'static str>), String> {
    let (mut ku, mut eku) = (Vec::new(), Vec::new());
    for u in usages {
        match u.as_str() {
            "signing" | "digital signature" => ku.push("digitalSignature"),
            "content commitment" => ku.push("nonRepudiation"),
            "key encipherment" => ku.push("keyEncipherment"),
            "key agreement" => ku.push("keyAgreement"),
            "data encipherment" => ku.push("dataEncipherment"),
            "cert sign" => ku.push("keyCertSign"),
            "crl sign" => ku.push("cRLSign"),
            "encipher only" => ku.push("encipherOnly"),
            "decipher only" => ku.push("decipherOnly"),
            "any" => eku.push("anyExtendedKeyUsage"),
            "server auth" => eku.push("serverAuth"),
            "client auth" => eku.push("clientAuth"),
            "code signing" => eku.push("codeSigning"),
            "email protection" => eku.push("emailProtection"),
            "s/mime" => eku.push("emailProtection"),
            "ipsec end system" => eku.push("ipsecEndSystem"),
            "ipsec tunnel" => eku.push("ipsecTunnel"),
            "ipsec user" => eku.push("ipsecUser"),
            "timestamping" => eku.push("timeStamping"),
            "ocsp signing" => eku.push("OCSPSigning"),
            "microsoft sgc" => eku.push("msSGC"),
            "netscape sgc" => eku.push("nsSGC"),
            other => return Err(format!("unrecognized usage: {other}")),
        }
    }
    ku.dedup();
    eku.dedup();
    Ok((ku, eku))
}

impl Ca {
    /// A new self-signed ECDSA P-256 CA (`CN=<cn>`, ten years), as `kubeadm init` makes
    /// `ca.crt` (kubeadm's is RSA; the algorithm does not matter to the clients).
    pub fn new(cn: &str) -> Ca {
        let dir = tempfile::tempdir().expect("tmp for the CA");
        let (cert, key) = (dir.path().join("ca.crt"), dir.path().join("ca.key"));
        openssl(
            dir.path(),
            &[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-keyout",
                "ca.key",
                "-out",
                "ca.crt",
                "-days",
                "3650",
                "-subj",
                &subject(cn, &[]),
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
            ],
        )
        .expect("openssl: the CA");
        std::fs::write(dir.path().join("index.txt"), "").expect("CA index");
        std::fs::write(
            dir.path().join("ca.cnf"),
            "[ca]\ndefault_ca = d\n[d]\ndatabase = index.txt\nnew_certs_dir = issued\n\
             serial = serial\ndefault_md = sha256\npolicy = p\nunique_subject = no\n\
             copy_extensions = copy\nemail_in_dn = no\n[p]\ncommonName = optional\n\
             organizationName = optional\n",
        )
        .expect("CA config");
        std::fs::create_dir(dir.path().join("issued")).expect("CA issued dir");
        Ca {
            dir,
            cert,
            key,
            lock: Mutex::new(1),
        }
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The CA certificate, PEM.
    pub fn pem(&self) -> String {
        std::fs::read_to_string(&self.cert).expect("read ca.crt")
    }

    /// Signs a PEM CSR (its subject kept, SANs copied) with the usages as extensions
    /// (keyUsage critical, basicConstraints CA:FALSE critical, as Go's x509 writes them),
    /// valid from `not_before` to `not_after` (Unix seconds). Returns the certificate PEM.
    pub fn sign_csr(
        &self,
        csr_pem: &[u8],
        usages: &[String],
        not_before: i64,
        not_after: i64,
    ) -> Result<String, String> {
        let (ku, eku) = usage_extensions(usages)?;
        let mut serial = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        *serial += 1;
        let n = *serial;
        let d = self.dir.path();
        let (csr, crt, ext) = (
            format!("req{n}.csr"),
            format!("req{n}.crt"),
            format!("req{n}.ext"),
        );
        std::fs::write(d.join(&csr), csr_pem).map_err(|e| e.to_string())?;
        std::fs::write(d.join("serial"), format!("{n:04X}\n")).map_err(|e| e.to_string())?;
        let mut text = String::from("[x]\nbasicConstraints = critical,CA:FALSE\n");
        if !ku.is_empty() {
            text.push_str(&format!("keyUsage = critical,{}\n", ku.join(",")));
        }
        if !eku.is_empty() {
            text.push_str(&format!("extendedKeyUsage = {}\n", eku.join(",")));
        }
        std::fs::write(d.join(&ext), text).map_err(|e| e.to_string())?;
        let (start, end) = (asn1_time(not_before), asn1_time(not_after));
        let r = openssl(
            d,
            &[
                "ca",
                "-batch",
                "-config",
                "ca.cnf",
                "-cert",
                "ca.crt",
                "-keyfile",
                "ca.key",
                "-in",
                &csr,
                "-out",
                &crt,
                "-notext",
                "-preserveDN",
                "-startdate",
                &start,
                "-enddate",
                &end,
                "-extfile",
                &ext,
                "-extensions",
                "x",
            ],
        )
        .and_then(|_| std::fs::read_to_string(d.join(&crt)).map_err(|e| e.to_string()));
        for f in [&csr, &crt, &ext] {
            let _ = std::fs::remove_file(d.join(f));
        }
        r
    }

    /// A new key (ECDSA P-256) and certificate for `cn`/`orgs` with `usages`, SANs
    /// (`DNS:x`, `IP:y`) and a lifetime of `days`, written to `dir` as `<stem>.crt`/`<stem>.key`.
    pub fn issue(
        &self,
        dir: &Path,
        stem: &str,
        cn: &str,
        orgs: &[&str],
        sans: &[String],
        usages: &[&str],
    ) -> CertFiles {
        let key = dir.join(format!("{stem}.key"));
        let csr = dir.join(format!("{stem}.csr"));
        let mut args: Vec<String> = [
            "req",
            "-new",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.push(key.display().to_string());
        args.extend([
            "-out".into(),
            csr.display().to_string(),
            "-subj".into(),
            subject(cn, orgs),
        ]);
        if !sans.is_empty() {
            args.extend([
                "-addext".into(),
                format!("subjectAltName={}", sans.join(",")),
            ]);
        }
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        openssl(dir, &a).expect("openssl: a key and CSR");
        let pem = std::fs::read(&csr).expect("read CSR");
        let now = crate::apiserver::now_secs();
        let usages: Vec<String> = usages.iter().map(|s| s.to_string()).collect();
        let crt = self
            .sign_csr(&pem, &usages, now - 300, now + 365 * 86400)
            .expect("openssl: sign");
        let cert = dir.join(format!("{stem}.crt"));
        std::fs::write(&cert, crt).expect("write cert");
        let _ = std::fs::remove_file(&csr);
        set_mode_0600(&key);
        CertFiles { cert, key }
    }
}

fn set_mode_0600(p: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o600));
}

/// A PEM CSR made by openssl for `cn`/`orgs` with SANs, and its key (for tests that play the
/// kubelet's side of the CSR flow): (csr PEM, key path).
pub fn make_csr(
    dir: &Path,
    stem: &str,
    cn: &str,
    orgs: &[&str],
    sans: &[String],
) -> (String, PathBuf) {
    let key = dir.join(format!("{stem}.key"));
    let csr = dir.join(format!("{stem}.csr"));
    let subj = subject(cn, orgs);
    let (k, c) = (key.display().to_string(), csr.display().to_string());
    let mut args = vec![
        "req",
        "-new",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-keyout",
        &k,
        "-out",
        &c,
        "-subj",
        &subj,
    ];
    let san = format!("subjectAltName={}", sans.join(","));
    if !sans.is_empty() {
        args.extend(["-addext", &san]);
    }
    openssl(dir, &args).expect("openssl: CSR");
    (std::fs::read_to_string(&csr).expect("read CSR"), key)
}

/// `openssl x509 -noout -text` of a PEM certificate (for assertions on what was issued).
pub fn cert_text(pem: &str) -> String {
    let dir = tempfile::tempdir().expect("tmp");
    std::fs::write(dir.path().join("c.pem"), pem).expect("write");
    let out = openssl(
        dir.path(),
        &["x509", "-in", "c.pem", "-noout", "-text", "-dates"],
    )
    .expect("openssl x509 -text");
    String::from_utf8_lossy(&out).into_owned()
}
