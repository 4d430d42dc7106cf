//! grpc.health.v1 `Health/Check` for grpc probes. Lives beside the CRI client because it is
//! the only other place that speaks gRPC (tokio stays inside `runtime`). Each check runs on a
//! short-lived current-thread tokio runtime: probes are rare (seconds apart) and this keeps no
//! thread or connection around between them.

use std::time::Duration;

mod pb {
    tonic::include_proto!("grpc.health.v1");
}

/// Why a health check got no status; the messages are the kubelet's.
#[derive(Debug, thiserror::Error)]
pub enum HealthCheckError {
    #[error("starting the gRPC client: {0}")]
    Client(std::io::Error),
    #[error("invalid address {uri}: {source}")]
    Address {
        uri: String,
        source: tonic::transport::Error,
    },
    #[error("timeout: failed to connect service {addr} within {}s", timeout.as_secs())]
    ConnectTimeout { addr: String, timeout: Duration },
    #[error("failed to connect service {addr}: {source}")]
    Connect {
        addr: String,
        source: tonic::transport::Error,
    },
    #[error("timeout: health rpc did not complete within {}s", .0.as_secs())]
    RpcTimeout(Duration),
    #[error("health rpc failed: {}: {}", .0.code(), .0.message())]
    Rpc(tonic::Status),
}

/// Returns the ServingStatus number (1 = SERVING).
pub fn check(
    host: &str,
    port: u16,
    service: &str,
    timeout: Duration,
) -> Result<i32, HealthCheckError> {
    let host_part = if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_string()
    };
    let uri = format!("http://{host_part}:{port}");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(HealthCheckError::Client)?;
    rt.block_on(async move {
        let endpoint = tonic::transport::Endpoint::from_shared(uri.clone())
            .map_err(|source| HealthCheckError::Address {
                uri: uri.clone(),
                source,
            })?
            .connect_timeout(timeout)
            .timeout(timeout);
        let channel = tokio::time::timeout(timeout, endpoint.connect())
            .await
            .map_err(|_| HealthCheckError::ConnectTimeout {
                addr: format!("{host_part}:{port}"),
                timeout,
            })?
            .map_err(|source| HealthCheckError::Connect {
                addr: format!("{host_part}:{port}"),
                source,
            })?;
        let mut client = pb::health_client::HealthClient::new(channel);
        let req = pb::HealthCheckRequest {
            service: service.to_string(),
        };
        match tokio::time::timeout(timeout, client.check(req)).await {
            Err(_) => Err(HealthCheckError::RpcTimeout(timeout)),
            Ok(Err(status)) => Err(HealthCheckError::Rpc(status)),
            Ok(Ok(resp)) => Ok(resp.into_inner().status),
        }
    })
}
