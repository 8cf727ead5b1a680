//! The benchmark's own watch on PVs: when each local path first had a PV and an Available PV, and every change in
//! order, stamped when the watch saw it. One watch serves every provisioner on the plane (their paths differ), so
//! it watches all PVs and keeps only those whose local path is under the plane's directory.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::PersistentVolume;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use tokio::task::JoinHandle;

#[derive(Default)]
pub struct Seen {
    synced: bool,
    /// First time each local path had a PV, and an Available PV.
    pub created: BTreeMap<String, Instant>,
    pub available: BTreeMap<String, Instant>,
    /// Every change, in order.
    pub changes: Vec<Change>,
}

pub struct Change {
    pub at: Instant,
    pub name: String,
    pub uid: String,
    pub path: String,
    pub phase: String,
    pub deleted: bool,
}

/// Aborted on drop, so it never outlives its API server.
pub struct Watch {
    seen: Arc<Mutex<Seen>>,
    task: JoinHandle<()>,
}

impl Watch {
    pub async fn start(client: kube::Client, under: &str) -> Watch {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let task = tokio::spawn(record(client, under.to_string(), seen.clone()));
        let w = Watch { seen, task };
        w.until(
            "the benchmark's PV watch to sync",
            Duration::from_secs(30),
            |s| s.synced.then_some(()),
        )
        .await;
        w
    }

    /// Polls what was seen every 2 ms until `check` answers, panicking after `timeout`.
    pub async fn until<T>(
        &self,
        what: &str,
        timeout: Duration,
        check: impl Fn(&Seen) -> Option<T>,
    ) -> T {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(v) = check(&self.seen.lock().expect("seen lock")) {
                return v;
            }
            assert!(
                Instant::now() < deadline,
                "timed out after {timeout:?} waiting for {what}"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// Like `until`, but `None` after `timeout` instead of a panic.
    pub async fn within<T>(
        &self,
        timeout: Duration,
        check: impl Fn(&Seen) -> Option<T>,
    ) -> Option<T> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(v) = check(&self.seen.lock().expect("seen lock")) {
                return Some(v);
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// When the last of `paths` first had a PV (`available`: an Available PV).
    pub async fn all(&self, paths: &[String], available: bool, timeout: Duration) -> Instant {
        let what = format!("{} PVs (available: {available})", paths.len());
        self.until(&what, timeout, |s| {
            let map = if available { &s.available } else { &s.created };
            paths
                .iter()
                .map(|p| map.get(p).copied())
                .collect::<Option<Vec<_>>>()?
                .into_iter()
                .max()
        })
        .await
    }

    /// The current PV (name, uid, phase) for `path`, if it has one.
    pub fn current(&self, path: &str) -> Option<(String, String, String)> {
        let s = self.seen.lock().expect("seen lock");
        let last = s.changes.iter().rev().find(|c| c.path == path)?;
        (!last.deleted).then(|| (last.name.clone(), last.uid.clone(), last.phase.clone()))
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn record(client: kube::Client, under: String, seen: Arc<Mutex<Seen>>) {
    let api: Api<PersistentVolume> = Api::all(client);
    let mut stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    while let Ok(Some(event)) = stream.try_next().await {
        let now = Instant::now();
        let (pv, deleted) = match event {
            watcher::Event::Apply(pv) | watcher::Event::InitApply(pv) => (pv, false),
            watcher::Event::Delete(pv) => (pv, true),
            watcher::Event::InitDone => {
                seen.lock().expect("seen lock").synced = true;
                continue;
            }
            watcher::Event::Init => continue,
        };
        let Some(path) = pv
            .spec
            .as_ref()
            .and_then(|s| s.local.as_ref())
            .map(|l| l.path.clone())
            .filter(|p| p.starts_with(&under))
        else {
            continue;
        };
        let phase = pv.status.and_then(|s| s.phase).unwrap_or_default();
        let mut s = seen.lock().expect("seen lock");
        if !deleted {
            s.created.entry(path.clone()).or_insert(now);
            if phase == "Available" {
                s.available.entry(path.clone()).or_insert(now);
            }
        }
        s.changes.push(Change {
            at: now,
            name: pv.metadata.name.unwrap_or_default(),
            uid: pv.metadata.uid.unwrap_or_default(),
            path,
            phase,
            deleted,
        });
    }
}
