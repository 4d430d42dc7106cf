//! The kubelet's RuntimeClass informer in API-server mode: `GET
//! /apis/node.k8s.io/v1/runtimeclasses` (the Node authorizer lets a node list and watch them),
//! then a watch from the list's resourceVersion ([`crate::apiobjects::watch::follow`]); a watch
//! the server ends resumes from the last resourceVersion, `410 Gone` and errors relist
//! (back-off 1 s doubling to 30 s). Objects that fail validation are skipped with a warning.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tracing::{debug, info, warn};

use crate::apiclient::client::{ApiClient, ApiError};
use crate::apiobjects::watch::{End, follow};

use super::{RuntimeClasses, parse};

/// The list of all RuntimeClasses.
pub const PATH: &str = "/apis/node.k8s.io/v1/runtimeclasses";

/// Starts the reflector thread `watch-runtimeclasses` filling `classes` from `client`.
pub fn start(classes: &Arc<RuntimeClasses>, client: &Arc<ApiClient>) {
    let (classes, client) = (classes.clone(), client.clone());
    let spawned = std::thread::Builder::new()
        .name("watch-runtimeclasses".into())
        .spawn(move || run(&classes, &client));
    if let Err(e) = spawned {
        warn!(error = %e, "starting the RuntimeClass reflector");
    }
}

/// The classes of a list answer (invalid ones skipped, said once per list).
pub fn from_list(list: &Value) -> BTreeMap<String, super::RuntimeClass> {
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|o| {
            // List items carry no kind/apiVersion: the list's type gives them.
            let mut o = o.clone();
            o["kind"] = "RuntimeClass".into();
            o["apiVersion"] = "node.k8s.io/v1".into();
            match parse(&o, "api") {
                Ok(rc) => Some((rc.name.clone(), rc)),
                Err(e) => {
                    warn!(error = %e, "skipping RuntimeClass from the API");
                    None
                }
            }
        })
        .collect()
}

/// One watch event (`ADDED`, `MODIFIED`, `DELETED`) into `classes`.
pub fn apply(classes: &RuntimeClasses, event: &str, obj: &Value) {
    let mut o = obj.clone();
    o["kind"] = "RuntimeClass".into();
    o["apiVersion"] = "node.k8s.io/v1".into();
    match parse(&o, "api") {
        Ok(rc) => {
            debug!(event, runtime_class = %rc.name, handler = %rc.handler, "RuntimeClass changed");
            classes.apply_api(event == "DELETED", rc);
        }
        Err(e) => warn!(event, error = %e, "skipping RuntimeClass from the API"),
    }
}

fn relist(classes: &RuntimeClasses, client: &ApiClient) -> Result<String, ApiError> {
    let v = client.get(PATH)?;
    let items = from_list(&v);
    info!(runtime_classes = items.len(), "RuntimeClasses listed");
    classes.set_api(items);
    Ok(v["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default()
        .to_string())
}

/// List, then watch; relist on 410 and errors, for the process's life.
fn run(classes: &RuntimeClasses, client: &ApiClient) {
    let mut backoff = Duration::from_secs(1);
    let mut rv: Option<String> = None;
    loop {
        let from = match rv.take() {
            Some(r) => r,
            None => match relist(classes, client) {
                Ok(r) => r,
                Err(e) => {
                    warn!(error = %e, "listing RuntimeClasses");
                    std::thread::sleep(backoff);
                    backoff = (backoff * 2).min(Duration::from_secs(30));
                    continue;
                }
            },
        };
        match follow(client, PATH, &from, &|| false, &mut |t, o| {
            apply(classes, t, o)
        }) {
            Ok(End::Resume(r)) => {
                backoff = Duration::from_secs(1);
                rv = Some(r);
            }
            Ok(End::Relist | End::Stop) => {}
            Err(e) => {
                debug!(error = %e, "RuntimeClass watch failed; relisting");
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(Duration::from_secs(30));
            }
        }
    }
}
