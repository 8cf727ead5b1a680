//! Writes the LocalDisk inventory the pure `inventory::build` decides: create, server-side apply of spec and
//! status with one field manager, delete. A steady state produces no change, hence no request.
//!
//! The inventory is optional: PVs and wipes never wait for it. `poll_when_installed` checks for the LocalDisk
//! CRD; while it is missing the agent runs without the inventory (its store counts as synced and empty, writes
//! answer 404 and count as moot), says so once (log, Node Event, `localpv_node_inventory_available` 0, a line in
//! `/readyz`), and starts listing the LocalDisks as soon as the CRD appears.
//!
//! The LocalDisks are listed, not watched (issue 34): the agent is their only writer but for the annotations an
//! operator sets with `localpv disks` (cordon, drain, clear-health), which then marks the Node the agent watches
//! (`localpv.io/disks-changed`) so the agent lists them at once. What the agent writes goes into its store as the
//! API server answers it, so a steady state still produces no request.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::{Api, ListParams};
use kube::runtime::events::EventType;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::sync::Notify;
use tracing::{debug, info, warn};

/// LocalDisk requests in flight at once.
const IN_FLIGHT: usize = 16;

use crate::contract::{NODE_MANAGER, inventory_manager};
use crate::effects::{self, Applied, Reason, Uncounted, Writer};
use crate::inventory::{Change, LocalDisk, WipeFailures, WipeSample};
use futures::StreamExt;

/// How often the agent looks for the LocalDisk CRD while it is missing.
pub const CRD_POLL: Duration = Duration::from_secs(5);

/// The `/readyz` line while the inventory is off.
pub const NO_CRD_NOTE: &str =
    "inventory: the LocalDisk CRD is not installed; PVs and wipes run without the inventory";

/// `localpv_node_inventory_available`: 1 while the LocalDisk watch runs, 0 while the CRD is missing.
pub fn register_available(reg: &mut Registry) -> Gauge {
    let gauge = Gauge::default();
    reg.sub_registry_with_prefix("localpv_node").register(
        "inventory_available",
        "1 when the LocalDisk CRD is installed and the inventory is kept, 0 while the agent runs without it",
        gauge.clone(),
    );
    gauge
}

/// What `watch_when_installed` needs besides the watch's own inputs.
pub struct Gate {
    pub client: Client,
    pub node: String,
    pub http: super::http::HttpState,
    pub available: Gauge,
}

/// Keeps `store` filled with this node's LocalDisks while the CRD exists, by listing them (from the API server's
/// cache) every `cadence.slow`, and at once when `polled` is poked (`localpv disks` marks the Node after it changes
/// a LocalDisk); the agent's own writes go into the store as they are answered ([`InventoryWriter::apply`]). While
/// the CRD does not exist, marks the store synced and empty, says why once and looks for the CRD every `CRD_POLL`.
/// The first list finds out (a 404), so a start with the CRD installed makes no request of its own for it.
pub async fn poll_when_installed(
    gate: Gate,
    params: ListParams,
    store: Arc<crate::watch::Store<LocalDisk>>,
    (cadence, polled): (crate::watch::Cadence, Arc<crate::watch::Polled>),
    changed: Arc<Notify>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let api: Api<LocalDisk> = Api::all(gate.client.clone());
    let probe = ListParams::default().limit(1);
    let watcher =
        crate::watch::Watcher::new(gate.client.clone(), changed.clone(), shutdown.clone());
    gate.available.set(1);
    loop {
        let objects = crate::watch::objects();
        if watcher
            .poll(
                params.clone(),
                store.clone(),
                objects,
                cadence,
                polled.clone(),
            )
            .await
        {
            return;
        }
        store.set_synced();
        changed.notify_one();
        gate.available.set(0);
        gate.http.set_note(Some(NO_CRD_NOTE.to_string()));
        announce_missing(&gate).await;
        let mut delay = CRD_POLL;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = shutdown.changed() => return,
            }
            match api.list_metadata(&probe).await {
                Ok(_) => break,
                Err(kube::Error::Api(status)) if status.code == 404 => delay = CRD_POLL,
                Err(error) => {
                    warn!(%error, "failed to look for the LocalDisk CRD; retrying");
                    delay = (delay * 2).min(Duration::from_secs(30));
                }
            }
        }
        info!("LocalDisk CRD installed: starting the inventory");
        gate.http.set_note(None);
        gate.available.set(1);
    }
}

/// One Warning Event on the Node, which the writer also logs once: PVs and wipes go on without the inventory.
async fn announce_missing(gate: &Gate) {
    let message = "the LocalDisk CRD is not installed: publishing PVs and wiping without the LocalDisk \
                   inventory; it starts when the CRD is applied (`localpv crd | kubectl apply -f -`)";
    let uid = match Api::<Node>::all(gate.client.clone())
        .get_opt(&gate.node)
        .await
    {
        Ok(node) => node.and_then(|n| n.metadata.uid),
        Err(error) => {
            debug!(%error, "failed to read the Node for the InventoryUnavailable Event");
            None
        }
    };
    let regarding = effects::reference::<Node>(None, &gate.node, uid.as_deref());
    let writer = Writer::new(
        gate.client.clone(),
        NODE_MANAGER,
        &gate.node,
        Arc::new(Uncounted),
    );
    let (warning, reason) = (EventType::Warning, Reason::InventoryUnavailable);
    let _ = writer.event(&regarding, warning, reason, message).await;
}

pub struct InventoryWriter {
    /// Reads of other nodes' objects.
    pub api: Api<LocalDisk>,
    /// One field manager per node: a node's applies never silently take over another node's object.
    writer: Writer,
    /// This node's LocalDisks as last listed: each write's answer goes in, so the next pass sees what it wrote
    /// without a watch (a 404 or a 409 leaves it as listed).
    store: Arc<crate::watch::Store<LocalDisk>>,
    /// Told when an answer changed the store, as a watch event would: the next pass sees it (an annotation an
    /// operator set just before the write comes back in its answer).
    changed: Arc<Notify>,
}

/// What the agent knows about wipes, in the inventory's terms (keyed by host path).
#[derive(Default)]
pub struct WipeFacts {
    pub running: BTreeMap<PathBuf, WipeSample>,
    pub failures: BTreeMap<PathBuf, WipeFailures>,
}

impl InventoryWriter {
    pub fn new(
        client: Client,
        writer: &Writer,
        node: &str,
        (store, changed): (Arc<crate::watch::Store<LocalDisk>>, Arc<Notify>),
    ) -> InventoryWriter {
        InventoryWriter {
            api: Api::all(client),
            writer: writer.with_field_manager(inventory_manager(node)),
            store,
            changed,
        }
    }

    /// Puts what the API server answered into the store (`None`: the object named is gone), unless the store
    /// already holds a later version of it (a list, or another answer, that came back first).
    fn stored(&self, name: &str, now: Option<LocalDisk>) {
        use kube::runtime::watcher::Event;
        let reader = crate::watch::objects::<LocalDisk>();
        let event = match now {
            Some(disk) => {
                let held = self.store.get_shared(name);
                if held.is_some_and(|held| later(&held.metadata, &disk.metadata)) {
                    return;
                }
                Event::Apply(crate::watch::Guarded(Ok(disk)))
            }
            None => {
                let gone = LocalDisk::new(name, Default::default());
                Event::Delete(crate::watch::Guarded(Ok(gone)))
            }
        };
        if crate::watch::apply(&self.store, "LocalDisk", event, &reader) {
            self.changed.notify_one();
        }
    }

    /// Other nodes' objects under names this node would use (cloned disks): fetched by name, `NotFound` skipped.
    pub async fn fetch(&self, names: &[String]) -> Vec<LocalDisk> {
        let results: Vec<Option<LocalDisk>> = futures::stream::iter(names)
            .map(|name| async move {
                match self.api.get_opt(name).await {
                    Ok(found) => found,
                    Err(error) => {
                        let error = crate::logging::error_text(&error);
                        warn!(localdisk = %name, %error, "failed to read LocalDisk");
                        None
                    }
                }
            })
            .buffered(IN_FLIGHT)
            .collect()
            .await;
        results.into_iter().flatten().collect()
    }

    /// Applies the changes; false when one failed in a way worth retrying soon.
    pub async fn apply(&self, changes: Vec<Change>) -> bool {
        // Each change is to its own object, so they go out together (1,000 new disks are not 1,000 round trips);
        // deletions first, in case a name is deleted and created again.
        let (deletes, rest): (Vec<Change>, Vec<Change>) = changes
            .into_iter()
            .partition(|c| matches!(c, Change::Delete(_)));
        let mut ok = true;
        for phase in [deletes, rest] {
            let results: Vec<bool> = futures::stream::iter(phase)
                .map(|change| async move {
                    match change {
                        Change::Create(d) => self.create(&d).await,
                        // NB: forced. These objects are this node's (`spec.node`), and the agent is their only
                        // writer: a field someone else set (`kubectl edit`, a merge patch) would otherwise make
                        // every apply a 409 conflict, and the object would stay wrong for good.
                        Change::Apply(d) | Change::MarkMissing(d) => {
                            self.server_side_apply(&d, true).await
                        }
                        Change::Delete(name) => self.delete(&name).await,
                    }
                })
                .buffer_unordered(IN_FLIGHT)
                .collect()
                .await;
            ok &= results.into_iter().all(|ok| ok);
        }
        ok
    }

    /// Creates through server-side apply, so later applies own (and can drop) every field it set. Without
    /// `force`, another node's object under the same `fs-<uuid>` name is a conflict (409), never a takeover.
    async fn create(&self, disk: &LocalDisk) -> bool {
        self.server_side_apply(disk, false).await
    }

    /// One server-side apply of the whole object: the CRD has no status subresource (the agent is its only
    /// writer), so spec and status go in one request. A 404 (no CRD) or 409 (another node's object) is moot.
    async fn server_side_apply(&self, disk: &LocalDisk, force: bool) -> bool {
        let name = disk.metadata.name.clone().unwrap_or_default();
        match self.writer.apply(&owned(disk), force).await {
            Ok(Applied::Done(applied)) => match leftovers(disk, &applied) {
                Some(patch) => self.clear(&name, &patch).await,
                None => {
                    self.stored(&name, Some(applied));
                    true
                }
            },
            Ok(Applied::Moot) => true,
            Err(_) => false,
        }
    }

    /// Removes fields another writer set that the agent's object leaves out (a JSON merge patch of nulls).
    async fn clear(&self, name: &str, patch: &serde_json::Value) -> bool {
        let result = self
            .writer
            .merge_patch::<LocalDisk>(None, name, patch)
            .await;
        if let Ok(Applied::Done(patched)) = &result {
            self.stored(name, Some(patched.clone()));
        }
        result.is_ok()
    }

    async fn delete(&self, name: &str) -> bool {
        let result = self.writer.delete::<LocalDisk>(None, name, None).await;
        if result.is_ok() {
            self.stored(name, None);
        }
        result.is_ok()
    }
}

/// Whether `held` is a later version of the object than `answer`: resource versions are etcd revisions, which only
/// grow; one that is not a number (never from the API servers we support) counts as not later.
fn later(held: &ObjectMeta, answer: &ObjectMeta) -> bool {
    let version = |m: &ObjectMeta| m.resource_version.as_deref()?.parse::<u64>().ok();
    matches!((version(held), version(answer)), (Some(h), Some(a)) if h > a)
}

/// The object as we own it: name, labels, annotations, spec and status; no server-set metadata.
fn owned(disk: &LocalDisk) -> LocalDisk {
    let meta = ObjectMeta {
        name: disk.metadata.name.clone(),
        labels: disk.metadata.labels.clone(),
        annotations: disk.metadata.annotations.clone(),
        ..Default::default()
    };
    let mut d = LocalDisk::new(meta.name.as_deref().unwrap_or_default(), disk.spec.clone());
    d.metadata = meta;
    d.status = disk.status.clone();
    d
}

/// A merge patch nulling what `applied` holds under `spec` and `status` that `desired` leaves out, or `None` when
/// there is nothing.
///
/// NB: server-side apply leaves alone fields another manager owns (a `kubectl edit` of `status.reason`, say) and
/// a forced apply only takes over the fields it sends; the agent's objects leave unset fields out (they cannot be
/// sent as null: `conditions` and the `volumeMode` enum reject it). Without this, such a field would stay and make
/// every later pass apply again.
fn leftovers(desired: &LocalDisk, applied: &LocalDisk) -> Option<serde_json::Value> {
    fn json<T: serde::Serialize>(value: &T) -> serde_json::Value {
        serde_json::to_value(value).unwrap_or_default()
    }
    let mut patch = serde_json::Map::new();
    let sections = [
        ("spec", json(&desired.spec), json(&applied.spec)),
        ("status", json(&desired.status), json(&applied.status)),
    ];
    for (section, want, have) in sections {
        if let Some(nulls) = nulls(&want, &have) {
            patch.insert(section.to_string(), nulls);
        }
    }
    (!patch.is_empty()).then_some(serde_json::Value::Object(patch))
}

/// Nulls for the keys of `have` missing from `want`, descending into objects both hold.
fn nulls(want: &serde_json::Value, have: &serde_json::Value) -> Option<serde_json::Value> {
    let (serde_json::Value::Object(want), serde_json::Value::Object(have)) = (want, have) else {
        return None;
    };
    let mut out = serde_json::Map::new();
    for (key, value) in have {
        match want.get(key) {
            None => {
                out.insert(key.clone(), serde_json::Value::Null);
            }
            Some(wanted) => {
                if let Some(inner) = nulls(wanted, value) {
                    out.insert(key.clone(), inner);
                }
            }
        }
    }
    (!out.is_empty()).then_some(serde_json::Value::Object(out))
}

/// A running wipe's sample for the inventory.
pub fn sample(started: SystemTime, ctl: &crate::wipe::Control) -> WipeSample {
    let total = ctl.progress.total_bytes();
    WipeSample {
        started,
        bytes_done: ctl.progress.bytes(),
        entries_done: ctl.progress.entries(),
        bytes_total: (total > 0).then_some(total),
    }
}

#[cfg(test)]
mod tests {
    use rstest::rstest;
    use serde_json::{Value, json};

    use super::nulls;

    #[rstest]
    #[case::nothing_extra(json!({"phase": "Available"}), json!({"phase": "Bound"}), None)]
    #[case::a_foreign_key_is_nulled(
        json!({"phase": "Available"}),
        json!({"phase": "Failing", "reason": "EditedByHand"}),
        Some(json!({"reason": null}))
    )]
    #[case::nested_objects_are_descended(
        json!({"wipe": {"bytesDone": 1}}),
        json!({"wipe": {"bytesDone": 2, "bytesPerSecond": 9}}),
        Some(json!({"wipe": {"bytesPerSecond": null}}))
    )]
    #[case::a_whole_foreign_object_is_nulled(
        json!({"phase": "Available"}),
        json!({"phase": "Available", "duplicateUuid": {"node": "n2"}}),
        Some(json!({"duplicateUuid": null}))
    )]
    #[case::arrays_are_not_merged(json!({"conditions": []}), json!({"conditions": [{"type": "X"}]}), None)]
    fn fields_left_by_another_writer_are_nulled(
        #[case] want: Value,
        #[case] have: Value,
        #[case] expected: Option<Value>,
    ) {
        assert_eq!(nulls(&want, &have), expected);
    }

    #[test]
    fn an_answer_older_than_what_the_store_holds_is_not_put_in() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

        use super::later;
        let meta = |rv: Option<&str>| ObjectMeta {
            resource_version: rv.map(str::to_string),
            ..ObjectMeta::default()
        };
        for (held, answer, skip) in [
            (Some("12"), Some("11"), true),
            (Some("12"), Some("12"), false),
            (Some("9"), Some("10"), false),
            (None, Some("10"), false),
            (Some("x"), Some("10"), false),
        ] {
            assert_eq!(
                later(&meta(held), &meta(answer)),
                skip,
                "{held:?} {answer:?}"
            );
        }
    }
}
