//! The kubelet's certificates (issue 19): keys, CSRs, X.509, the file store, the self-signed
//! serving pair, and the certificate manager (TLS bootstrap, rotation of the client and
//! serving certificates). Built only with the `tls` feature (ring signs, rustls serves).
//!
//! - [`der`], [`pem`]: our own minimal DER writer/reader and PEM.
//! - [`key`]: ECDSA P-256 keys (ring); [`csr`]: PKCS#10; [`x509`]: certificates read and signed.
//! - [`store`]: client-go's FileStore layout; [`selfsigned`]: certutil.GenerateSelfSignedCertKey.
//! - [`localca`]: the device's local client CA for `nanolet admin-kubeconfig`.
//! - [`manager`]: bootstrap and rotation (upstream pkg/kubelet/certificate and client-go
//!   util/certificate); [`serving`]: the serving certificate as a rustls resolver.
//!
//! Keys and tokens never appear in Debug output, errors or logs; paths do.

use std::path::PathBuf;

pub mod csr;
pub mod der;
pub mod key;
pub mod localca;
pub mod manager;
pub mod pem;
pub mod selfsigned;
pub mod serving;
pub mod store;
#[cfg(test)]
pub(crate) mod testutil;
pub mod x509;

pub use manager::{Bootstrap, ClientRotation};
pub use serving::ServingCertificate;

#[derive(Debug, thiserror::Error)]
pub enum CertificateError {
    #[error("malformed DER: {0}")]
    Der(String),
    #[error("PEM: {0}")]
    Pem(String),
    #[error("private key: {0}")]
    Key(String),
    #[error("certificate: {0}")]
    Certificate(String),
    #[error("{}: {reason}", path.display())]
    File { path: PathBuf, reason: String },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Kubeconfig(#[from] crate::apiclient::kubeconfig::KubeconfigError),
    #[error(transparent)]
    Api(#[from] crate::apiclient::client::ApiError),
    /// The CSR was denied or failed (its condition's reason and message); client-go's
    /// WaitForCertificate texts, with the CSR's name.
    #[error(
        "certificate signing request {name:?} {}, reason: {reason}, message: {message}",
        if *denied { "is denied" } else { "failed" }
    )]
    Refused {
        name: String,
        denied: bool,
        reason: String,
        message: String,
    },
    #[error("certificate signing request {name}: {reason}")]
    Csr { name: String, reason: String },
    #[error("stopped")]
    Stopped,
}
