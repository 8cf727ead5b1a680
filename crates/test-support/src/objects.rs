//! The API objects tests and benchmarks make by hand, built one way: a chained builder per kind, so a test says
//! only what is particular about its object (`Pv::local("pv-a", "n1").capacity("10Gi").available().build()`).

use k8s_openapi::api::core::v1::PersistentVolume;
use serde_json::{Value, json};

/// A local PV as a static provisioner (or someone by hand) writes it.
#[derive(Clone, Debug)]
pub struct Pv(Value);

impl Pv {
    /// PV `name` on `node`: 1Gi, ReadWriteOnce, Filesystem, reclaim policy Delete, class `local-storage`, a local
    /// volume at `/mnt/disks/<name>`, affine to the node's `kubernetes.io/hostname`; no labels, annotations, claim
    /// or status.
    pub fn local(name: &str, node: &str) -> Pv {
        Pv(json!({
            "metadata": {"name": name},
            "spec": {
                "capacity": {"storage": "1Gi"}, "volumeMode": "Filesystem", "accessModes": ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": "Delete", "storageClassName": "local-storage",
                "local": {"path": format!("/mnt/disks/{name}")},
                "nodeAffinity": {"required": {"nodeSelectorTerms": [on_host(node)]}},
            },
        }))
    }

    pub fn uid(mut self, uid: &str) -> Pv {
        self.0["metadata"]["uid"] = json!(uid);
        self
    }

    pub fn resource_version(mut self, version: &str) -> Pv {
        self.0["metadata"]["resourceVersion"] = json!(version);
        self
    }

    pub fn capacity(mut self, storage: &str) -> Pv {
        self.0["spec"]["capacity"]["storage"] = json!(storage);
        self
    }

    pub fn class(mut self, class: &str) -> Pv {
        self.0["spec"]["storageClassName"] = json!(class);
        self
    }

    pub fn reclaim(mut self, policy: &str) -> Pv {
        self.0["spec"]["persistentVolumeReclaimPolicy"] = json!(policy);
        self
    }

    /// The local volume's path.
    pub fn path(mut self, path: &str) -> Pv {
        self.0["spec"]["local"] = json!({"path": path});
        self
    }

    /// A `hostPath` volume at `path` instead of a local one.
    pub fn host_path(mut self, path: &str) -> Pv {
        let spec = self.0["spec"].as_object_mut().expect("a spec");
        spec.remove("local");
        spec.insert("hostPath".into(), json!({"path": path}));
        self
    }

    pub fn label(mut self, key: &str, value: &str) -> Pv {
        self.0["metadata"]["labels"][key] = json!(value);
        self
    }

    pub fn annotation(mut self, key: &str, value: &str) -> Pv {
        self.0["metadata"]["annotations"][key] = json!(value);
        self
    }

    /// `pv.kubernetes.io/provisioned-by`: who the PV controller leaves a Released PV to.
    pub fn provisioned_by(self, provisioner: &str) -> Pv {
        self.annotation("pv.kubernetes.io/provisioned-by", provisioner)
    }

    /// Node affinity with these node selector terms instead of the node's hostname.
    pub fn terms(mut self, terms: Value) -> Pv {
        self.0["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"] = terms;
        self
    }

    /// Bound to claim `namespace/name` (UID `uid-<name>`).
    pub fn claim(mut self, namespace: &str, name: &str) -> Pv {
        self.0["spec"]["claimRef"] = json!({"kind": "PersistentVolumeClaim", "namespace": namespace,
                                             "name": name, "uid": format!("uid-{name}")});
        self.phase("Bound")
    }

    /// The bound claim's UID (after [`Pv::claim`]).
    pub fn claim_uid(mut self, uid: &str) -> Pv {
        self.0["spec"]["claimRef"]["uid"] = json!(uid);
        self
    }

    /// The status phase, as the PV controller would set it (an object in memory, not one created).
    pub fn phase(mut self, phase: &str) -> Pv {
        self.0["status"] = json!({"phase": phase});
        self
    }

    pub fn available(self) -> Pv {
        self.phase("Available")
    }

    pub fn json(self) -> Value {
        self.0
    }

    pub fn build(self) -> PersistentVolume {
        serde_json::from_value(self.0).expect("the builder writes a valid PV")
    }
}

/// A node selector term matching the node whose `kubernetes.io/hostname` is `node`.
pub fn on_host(node: &str) -> Value {
    json!({"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]})
}
