//! grpc.health.v1 `Health/Check` for grpc probes. Lives beside the CRI client because it is
//! the only other place that speaks gRPC (tokio stays inside `runtime`). Each check runs on a
//! short-lived current-thread tokio runtime: probes are rare (seconds apart) and this keeps no
//! thread or connection around between them.

use std::time::Duration;

mod pb {
    tonic::include_proto!("grpc.health.v1");
}

/// Returns the ServingStatus number (1 = SERVING) or an error message in the kubelet's words.
pub fn check(host: &str, port: u16, service: &str, timeout: Duration) -> Result<i32, String> {
    let host_part = if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_string()
    };
    let uri = format!("http://{host_part}:{port}");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("starting the gRPC client: {e}"))?;
    rt.block_on(async move {
        let endpoint = tonic::transport::Endpoint::from_shared(uri.clone())
            .map_err(|e| format!("invalid address {uri}: {e}"))?
            .connect_timeout(timeout)
            .timeout(timeout);
        let channel = tokio::time::timeout(timeout, endpoint.connect())
            .await
            .map_err(|_| {
                format!(
                    "timeout: failed to connect service {host_part}:{port} within {}s",
                    timeout.as_secs()
                )
            })?
            .map_err(|e| format!("failed to connect service {host_part}:{port}: {e}"))?;
        let mut client = pb::health_client::HealthClient::new(channel);
        let req = pb::HealthCheckRequest {
            service: service.to_string(),
        };
        match tokio::time::timeout(timeout, client.check(req)).await {
            Err(_) => Err(format!(
                "timeout: health rpc did not complete within {}s",
                timeout.as_secs()
            )),
            Ok(Err(status)) => Err(format!(
                "health rpc failed: {}: {}",
                status.code(),
                status.message()
            )),
            Ok(Ok(resp)) => Ok(resp.into_inner().status),
        }
    })
}
