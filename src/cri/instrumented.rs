//! A [`Runtime`] decorator that counts every call and every failure per operation into
//! [`Metrics`] (`kubelet_runtime_operations_total` / `_errors_total`), with the kubelet's
//! `operation_type` names (instrumented_services.go).

use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use super::{
    ContainerConfig, ContainerInfo, ContainerStatus, ExecResult, FsUsage, ImageInfo,
    PodSandboxConfig, RegistryAuth, Result, Runtime, RuntimeEvent, RuntimeVersion, SandboxInfo,
    SandboxStatus,
};
use crate::metrics::Metrics;

pub struct InstrumentedRuntime {
    inner: Arc<dyn Runtime>,
    metrics: Arc<Metrics>,
}

impl InstrumentedRuntime {
    pub fn new(inner: Arc<dyn Runtime>, metrics: Arc<Metrics>) -> Self {
        InstrumentedRuntime { inner, metrics }
    }

    fn count<T>(&self, op: &'static str, r: Result<T>) -> Result<T> {
        self.metrics.runtime_operation(op, r.is_err());
        r
    }
}

impl Runtime for InstrumentedRuntime {
    fn version(&self) -> Result<RuntimeVersion> {
        self.count("version", self.inner.version())
    }
    fn run_pod_sandbox(&self, config: &PodSandboxConfig) -> Result<String> {
        self.count("run_podsandbox", self.inner.run_pod_sandbox(config))
    }
    fn stop_pod_sandbox(&self, sandbox_id: &str) -> Result<()> {
        self.count("stop_podsandbox", self.inner.stop_pod_sandbox(sandbox_id))
    }
    fn remove_pod_sandbox(&self, sandbox_id: &str) -> Result<()> {
        self.count(
            "remove_podsandbox",
            self.inner.remove_pod_sandbox(sandbox_id),
        )
    }
    fn pod_sandbox_status(&self, sandbox_id: &str) -> Result<SandboxStatus> {
        self.count(
            "podsandbox_status",
            self.inner.pod_sandbox_status(sandbox_id),
        )
    }
    fn list_pod_sandboxes(&self) -> Result<Vec<SandboxInfo>> {
        self.count("list_podsandbox", self.inner.list_pod_sandboxes())
    }
    fn create_container(
        &self,
        sandbox_id: &str,
        config: &ContainerConfig,
        sandbox_config: &PodSandboxConfig,
    ) -> Result<String> {
        self.count(
            "create_container",
            self.inner
                .create_container(sandbox_id, config, sandbox_config),
        )
    }
    fn start_container(&self, container_id: &str) -> Result<()> {
        self.count("start_container", self.inner.start_container(container_id))
    }
    fn stop_container(&self, container_id: &str, timeout: Duration) -> Result<()> {
        self.count(
            "stop_container",
            self.inner.stop_container(container_id, timeout),
        )
    }
    fn remove_container(&self, container_id: &str) -> Result<()> {
        self.count(
            "remove_container",
            self.inner.remove_container(container_id),
        )
    }
    fn remove_orphan_task(&self, container_id: &str) -> Result<bool> {
        // Not a CRI verb: containerd's tasks API, counted under its own name.
        self.count(
            "remove_orphan_task",
            self.inner.remove_orphan_task(container_id),
        )
    }
    fn list_containers(&self) -> Result<Vec<ContainerInfo>> {
        self.count("list_containers", self.inner.list_containers())
    }
    fn list_pod_sandboxes_of_pod(&self, uid: &str) -> Result<Vec<SandboxInfo>> {
        self.count("list_podsandbox", self.inner.list_pod_sandboxes_of_pod(uid))
    }
    fn list_containers_of_pod(&self, uid: &str) -> Result<Vec<ContainerInfo>> {
        self.count("list_containers", self.inner.list_containers_of_pod(uid))
    }
    fn container_status(&self, container_id: &str) -> Result<ContainerStatus> {
        self.count(
            "container_status",
            self.inner.container_status(container_id),
        )
    }
    fn image_status(&self, image: &str) -> Result<Option<ImageInfo>> {
        self.count("image_status", self.inner.image_status(image))
    }
    fn pull_image(&self, image: &str) -> Result<String> {
        self.count("pull_image", self.inner.pull_image(image))
    }
    fn pull_image_with_auth(&self, image: &str, auth: Option<&RegistryAuth>) -> Result<String> {
        self.count("pull_image", self.inner.pull_image_with_auth(image, auth))
    }
    fn list_images(&self) -> Result<Vec<ImageInfo>> {
        self.count("list_images", self.inner.list_images())
    }
    fn remove_image(&self, image: &str) -> Result<()> {
        self.count("remove_image", self.inner.remove_image(image))
    }
    fn sandbox_image(&self) -> Option<String> {
        self.inner.sandbox_image()
    }
    fn status(&self, verbose: bool) -> Result<super::RuntimeStatus> {
        self.count("status", self.inner.status(verbose))
    }
    fn image_fs_info(&self) -> Result<Vec<FsUsage>> {
        self.count("image_fs_info", self.inner.image_fs_info())
    }
    fn exec_sync(
        &self,
        container_id: &str,
        cmd: &[String],
        timeout: Duration,
    ) -> Result<ExecResult> {
        self.count(
            "exec_sync",
            self.inner.exec_sync(container_id, cmd, timeout),
        )
    }
    fn exec(&self, req: &super::ExecRequest) -> Result<String> {
        self.count("exec", self.inner.exec(req))
    }
    fn attach(&self, req: &super::AttachRequest) -> Result<String> {
        self.count("attach", self.inner.attach(req))
    }
    fn port_forward(&self, sandbox_id: &str, ports: &[u16]) -> Result<String> {
        self.count("port_forward", self.inner.port_forward(sandbox_id, ports))
    }
    fn list_container_stats(&self) -> Result<Vec<super::ContainerStats>> {
        self.count("list_container_stats", self.inner.list_container_stats())
    }
    fn update_runtime_config(&self, pod_cidr: &str) -> Result<()> {
        self.count(
            "update_runtime_config",
            self.inner.update_runtime_config(pod_cidr),
        )
    }
    fn reopen_container_log(&self, container_id: &str) -> Result<()> {
        self.count(
            "reopen_container_log",
            self.inner.reopen_container_log(container_id),
        )
    }
    fn subscribe_events(&self) -> Result<mpsc::Receiver<RuntimeEvent>> {
        self.count("subscribe_events", self.inner.subscribe_events())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cri::fake::FakeRuntime;

    #[test]
    fn counts_calls_and_errors() {
        let metrics = Arc::new(Metrics::new());
        let rt = InstrumentedRuntime::new(Arc::new(FakeRuntime::new()), metrics.clone());
        assert!(rt.list_containers().is_ok());
        assert!(rt.list_containers().is_ok());
        assert!(rt.start_container("nope").is_err());
        assert_eq!(metrics.runtime_operations("list_containers"), (2, 0));
        assert_eq!(metrics.runtime_operations("start_container"), (1, 1));
    }
}
