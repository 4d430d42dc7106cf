//! `nanolet admin-kubeconfig`: a kubeconfig for the device's local administrator (issue 19
//! section 3). Run as root on the device: it creates the local client CA in the certificate
//! directory if absent (`certificate::localca`), signs a client certificate for the user
//! (`O=system:masters`, one year), and writes a kubeconfig (0600, atomically) for the kubelet
//! server on the device with the serving certificate's CA and the client pair embedded, so
//! the real `kubectl get pods`, `kubectl exec`, `kubectl port-forward` work against
//! `https://127.0.0.1:10250`. docs/kubelet-server.md, "Local administrator".

#[cfg(feature = "tls")]
pub const USAGE: &str = "Usage: nanolet admin-kubeconfig [flags]

Writes a kubeconfig for a local administrator of this device (run as root): creates the local
client CA <cert-dir>/nanolet-client-ca.crt and .key if absent, signs a client certificate
(O=system:masters, one year) and embeds it with the serving certificate's CA. The kubelet
server trusts the local client CA and allows its users everything.

Flags:
      --out FILE                    the kubeconfig to write, 0600 (default /etc/nanolet/admin.conf)
      --user NAME                   the user's name, the certificate's CN (default nanolet-admin)
      --server URL                  the kubelet server (default https://127.0.0.1:10250)
      --root-dir DIR                as `nanolet run` (default /var/lib/nanolet)
      --cert-dir DIR                as `nanolet run` (default <root-dir>/pki)
      --tls-cert-file FILE          as `nanolet run`: the serving chain; its last certificate is
                                    trusted (default: the self-signed <cert-dir>/kubelet.crt)
      --certificate-authority FILE  trust this CA for the server instead (e.g. with
                                    serverTLSBootstrap, the cluster's CA)
  -h, --help                        this text
";

/// `nanolet admin-kubeconfig ARGS`.
#[cfg(feature = "tls")]
pub fn run(args: &[String]) -> anyhow::Result<()> {
    imp::run(args)
}

/// Without TLS there is no kubelet server to administer.
#[cfg(not(feature = "tls"))]
pub fn run(_args: &[String]) -> anyhow::Result<()> {
    anyhow::bail!("needs a build with the tls feature")
}

#[cfg(feature = "tls")]
mod imp {
    use std::path::{Path, PathBuf};
    use std::time::SystemTime;

    use anyhow::{Context, anyhow, bail};

    use crate::certificate::localca::{self, LocalCa};
    use crate::certificate::pem;
    use crate::certificate::store::{Pair, create_private_dir, write_private};
    use crate::certificate::x509::Certificate;
    use crate::util::flags::{self, Arg, Flag};

    const FLAGS: &[Flag] = &[
        Flag::value("out"),
        Flag::value("user"),
        Flag::value("server"),
        Flag::value("root-dir"),
        Flag::value("cert-dir"),
        Flag::value("tls-cert-file"),
        Flag::value("certificate-authority"),
        Flag::bool("help").short('h'),
    ];

    pub const DEFAULT_OUT: &str = "/etc/nanolet/admin.conf";
    pub const DEFAULT_SERVER: &str = "https://127.0.0.1:10250";

    #[derive(Debug, PartialEq, Eq)]
    pub(super) struct Opts {
        pub out: PathBuf,
        pub user: String,
        pub server: String,
        pub cert_dir: PathBuf,
        pub tls_cert_file: Option<PathBuf>,
        pub certificate_authority: Option<PathBuf>,
        pub help: bool,
    }

    pub(super) fn parse(args: &[String]) -> anyhow::Result<Opts> {
        let mut root_dir = PathBuf::from("/var/lib/nanolet");
        let mut cert_dir = None;
        let mut o = Opts {
            out: PathBuf::from(DEFAULT_OUT),
            user: localca::DEFAULT_USER.to_string(),
            server: DEFAULT_SERVER.to_string(),
            cert_dir: PathBuf::new(),
            tls_cert_file: None,
            certificate_authority: None,
            help: false,
        };
        for arg in flags::lex(FLAGS, args) {
            let (name, value) = match arg? {
                Arg::Flag { spec, value } => (spec.name, value),
                Arg::Positional(p) => bail!("unexpected argument {p:?}\n\n{}", super::USAGE),
                Arg::Rest(r) => bail!("unexpected arguments {r:?}\n\n{}", super::USAGE),
            };
            match name {
                "out" => o.out = PathBuf::from(value),
                "user" => o.user = value,
                "server" => o.server = value,
                "root-dir" => root_dir = PathBuf::from(value),
                "cert-dir" => cert_dir = Some(PathBuf::from(value)),
                "tls-cert-file" => o.tls_cert_file = Some(PathBuf::from(value)),
                "certificate-authority" => o.certificate_authority = Some(PathBuf::from(value)),
                "help" => o.help = value == "true",
                other => bail!("unknown flag: --{other}"),
            }
        }
        if o.user.is_empty() || o.user.chars().any(char::is_control) {
            bail!("--user: {:?} is not a user name", o.user);
        }
        if !(o.server.starts_with("https://") && o.server.len() > "https://".len()) {
            bail!("--server: {:?} is not an https:// URL", o.server);
        }
        o.cert_dir = cert_dir.unwrap_or_else(|| root_dir.join("pki"));
        Ok(o)
    }

    /// The certificates of a PEM file, leaf first.
    fn chain(path: &Path) -> anyhow::Result<Vec<Certificate>> {
        let text = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        let chain = Certificate::parse_pem_chain(&text)
            .with_context(|| format!("{}: certificates", path.display()))?;
        if chain.is_empty() {
            bail!("{}: no certificate in the file", path.display());
        }
        Ok(chain)
    }

    /// The CA the kubeconfig trusts for the server, and the serving leaf when known.
    fn server_trust(o: &Opts) -> anyhow::Result<(Certificate, Option<Certificate>)> {
        if let Some(ca) = &o.certificate_authority {
            let c = chain(ca)?;
            return c
                .into_iter()
                .last()
                .map(|ca| (ca, None))
                .ok_or_else(|| anyhow!("{}: no certificate", ca.display()));
        }
        let file = match &o.tls_cert_file {
            Some(f) => f.clone(),
            None => {
                let (crt, _) = crate::certificate::selfsigned::paths(&o.cert_dir);
                if !crt.exists() {
                    bail!(
                        "{} does not exist yet: start `nanolet run` once (it writes its self-signed serving certificate there), or pass --tls-cert-file or --certificate-authority",
                        crt.display()
                    );
                }
                crt
            }
        };
        let c = chain(&file)?;
        let leaf = c.first().cloned();
        let ca = c
            .into_iter()
            .last()
            .ok_or_else(|| anyhow!("{}: no certificate", file.display()))?;
        Ok((ca, leaf))
    }

    /// The host of an `https://host[:port][/path]` URL (brackets of an IPv6 literal removed).
    pub(super) fn url_host(server: &str) -> &str {
        let rest = server.strip_prefix("https://").unwrap_or(server);
        let authority = rest.split('/').next().unwrap_or(rest);
        if let Some(v6) = authority.strip_prefix('[') {
            return v6.split(']').next().unwrap_or(v6);
        }
        authority.split(':').next().unwrap_or(authority)
    }

    /// `tls-server-name` when the server's host is not a name of the serving certificate (the
    /// self-signed one names only the node, and kubectl talks to 127.0.0.1): its first name.
    pub(super) fn tls_server_name(server: &str, leaf: &Certificate) -> Option<String> {
        let host = url_host(server);
        let named = leaf.dns_names.iter().any(|d| d.eq_ignore_ascii_case(host))
            || host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| leaf.ip_addresses.contains(&ip));
        if named {
            return None;
        }
        leaf.dns_names
            .first()
            .cloned()
            .or_else(|| leaf.ip_addresses.first().map(ToString::to_string))
    }

    /// The kubeconfig text: cluster `nanolet`, the user, context `<user>@nanolet`, current.
    /// Strings are JSON-quoted (valid YAML scalars).
    pub(super) fn kubeconfig(
        server: &str,
        server_name: Option<&str>,
        ca: &Certificate,
        user: &str,
        client: &Pair,
    ) -> String {
        let q = |s: &str| serde_json::Value::from(s).to_string();
        let ca_data =
            crate::util::base64::encode(pem::encode(pem::CERTIFICATE, &ca.der).as_bytes());
        let cert_data = crate::util::base64::encode(&client.cert_pem);
        let key_data = crate::util::base64::encode(client.key.to_pem().as_bytes());
        let name_line = server_name
            .map(|n| format!("    tls-server-name: {}\n", q(n)))
            .unwrap_or_default();
        let context = format!("{user}@nanolet");
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n    certificate-authority-data: {ca_data}\n    server: {server}\n{name_line}  name: nanolet\n\
             contexts:\n- context:\n    cluster: nanolet\n    user: {user_q}\n  name: {context_q}\n\
             current-context: {context_q}\npreferences: {{}}\n\
             users:\n- name: {user_q}\n  user:\n    client-certificate-data: {cert_data}\n    client-key-data: {key_data}\n",
            server = q(server),
            user_q = q(user),
            context_q = q(&context),
        )
    }

    pub fn run(args: &[String]) -> anyhow::Result<()> {
        let o = parse(args)?;
        if o.help {
            print!("{}", super::USAGE);
            return Ok(());
        }
        // The server's CA first: nothing is created when the kubeconfig cannot be complete.
        let (ca_for_server, leaf) = server_trust(&o)?;
        let server_name = leaf.as_ref().and_then(|l| tls_server_name(&o.server, l));
        let (ca, created) = LocalCa::load_or_create(&o.cert_dir)?;
        let (ca_file, _) = localca::paths(&o.cert_dir);
        if created {
            println!("created the local client CA {}", ca_file.display());
        }
        let pair = ca.sign_admin(&o.user, SystemTime::now())?;
        let text = kubeconfig(
            &o.server,
            server_name.as_deref(),
            &ca_for_server,
            &o.user,
            &pair,
        );
        if let Some(dir) = o.out.parent().filter(|d| !d.as_os_str().is_empty()) {
            if !dir.exists() {
                create_private_dir(dir)?;
            }
        }
        write_private(&o.out, text.as_bytes())?;
        tracing::info!(user = %o.user, out = %o.out.display(), "wrote a local administrator kubeconfig");
        println!(
            "wrote {} for user {:?} (group {}, valid until {}); use it with: kubectl --kubeconfig={} get pods",
            o.out.display(),
            o.user,
            localca::ADMIN_GROUP,
            crate::timeutil::rfc3339(pair.leaf.not_after),
            o.out.display()
        );
        Ok(())
    }
}

#[cfg(all(test, feature = "tls"))]
mod tests {
    use super::imp::*;
    use crate::certificate::localca::LocalCa;
    use crate::certificate::x509::Certificate;
    use std::path::PathBuf;
    use std::time::SystemTime;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn flags_and_defaults_as_nanolet_run() {
        let o = parse(&[]).unwrap();
        assert_eq!(o.out, PathBuf::from("/etc/nanolet/admin.conf"));
        assert_eq!(o.user, "nanolet-admin");
        assert_eq!(o.server, "https://127.0.0.1:10250");
        assert_eq!(o.cert_dir, PathBuf::from("/var/lib/nanolet/pki"));
        let o = parse(&args(&["--root-dir=/r", "--user", "ops", "--out=/tmp/x"])).unwrap();
        assert_eq!(
            (o.cert_dir, o.user.as_str(), o.out),
            (PathBuf::from("/r/pki"), "ops", PathBuf::from("/tmp/x"))
        );
        let o = parse(&args(&["--root-dir=/r", "--cert-dir=/c"])).unwrap();
        assert_eq!(o.cert_dir, PathBuf::from("/c"));
        assert!(parse(&args(&["--server=http://x"])).is_err());
        assert!(parse(&args(&["--user="])).is_err());
        assert!(parse(&args(&["stray"])).is_err());
        assert!(parse(&args(&["--nope"])).is_err());
    }

    #[test]
    fn the_server_name_is_set_only_when_the_url_host_is_not_in_the_certificate() {
        let pair = crate::certificate::selfsigned::generate("edge-7", SystemTime::now()).unwrap();
        assert_eq!(url_host("https://127.0.0.1:10250"), "127.0.0.1");
        assert_eq!(url_host("https://[::1]:10250/x"), "::1");
        assert_eq!(url_host("https://edge-7"), "edge-7");
        assert_eq!(
            tls_server_name("https://127.0.0.1:10250", &pair.leaf).as_deref(),
            Some("edge-7")
        );
        assert_eq!(tls_server_name("https://EDGE-7:10250", &pair.leaf), None);
        let ip = crate::certificate::selfsigned::generate("10.1.2.3", SystemTime::now()).unwrap();
        assert_eq!(tls_server_name("https://10.1.2.3:10250", &ip.leaf), None);
        assert_eq!(
            tls_server_name("https://127.0.0.1:10250", &ip.leaf).as_deref(),
            Some("10.1.2.3")
        );
    }

    /// Without a serving certificate nothing is created (no CA, no kubeconfig); with the
    /// self-signed pair, the CA and a 0600 kubeconfig appear, and a second run reuses the CA.
    #[test]
    fn run_needs_the_serving_certificate_then_writes_0600() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("root");
        let out = d.path().join("etc/admin.conf");
        let argv = args(&[
            &format!("--root-dir={}", root.display()),
            &format!("--out={}", out.display()),
        ]);
        let err = run(&argv).unwrap_err().to_string();
        assert!(err.contains("kubelet.crt does not exist yet"), "{err}");
        assert!(!root.join("pki/nanolet-client-ca.key").exists());
        assert!(!out.exists());
        crate::certificate::selfsigned::load_or_generate(&root.join("pki"), "node1").unwrap();
        run(&argv).unwrap();
        let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&out), 0o600);
        assert_eq!(mode(&root.join("pki/nanolet-client-ca.key")), 0o600);
        let ca = std::fs::read(root.join("pki/nanolet-client-ca.crt")).unwrap();
        run(&argv).unwrap();
        assert_eq!(
            std::fs::read(root.join("pki/nanolet-client-ca.crt")).unwrap(),
            ca
        );
    }

    /// The kubeconfig parses as YAML with the fields kubectl reads, and the embedded pair is
    /// the CA's O=system:masters certificate with its key.
    #[test]
    fn the_kubeconfig_embeds_the_server_ca_and_the_client_pair() {
        let serving = crate::certificate::selfsigned::generate("node1", SystemTime::now()).unwrap();
        let chain = Certificate::parse_pem_chain(&serving.cert_pem).unwrap();
        let local = LocalCa::generate(SystemTime::now()).unwrap();
        let client = local.sign_admin("ops", SystemTime::now()).unwrap();
        let text = kubeconfig(
            "https://127.0.0.1:10250",
            Some("node1"),
            &chain[1],
            "ops",
            &client,
        );
        let v = crate::yaml::yaml_to_json(&text).unwrap().value;
        assert_eq!(v["current-context"], "ops@nanolet");
        let cluster = &v["clusters"][0]["cluster"];
        assert_eq!(cluster["server"], "https://127.0.0.1:10250");
        assert_eq!(cluster["tls-server-name"], "node1");
        let b64 = |v: &serde_json::Value| {
            let s = v.as_str().unwrap();
            crate::util::base64::decode(s).unwrap()
        };
        let ca =
            Certificate::parse_pem_chain(&b64(&cluster["certificate-authority-data"])).unwrap();
        assert_eq!(ca[0].der, chain[1].der, "the serving chain's CA");
        let user = &v["users"][0];
        assert_eq!(user["name"], "ops");
        let cert =
            Certificate::parse_pem_chain(&b64(&user["user"]["client-certificate-data"])).unwrap();
        assert_eq!(cert[0].organizations, ["system:masters"]);
        let key = crate::certificate::key::EcKey::from_pem(&b64(&user["user"]["client-key-data"]))
            .unwrap();
        assert!(cert[0].matches_key(&key));
    }
}
