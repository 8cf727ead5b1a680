//! Uninstalling as documented, on a real control plane: after the documented install and an extender that took
//! its clean-up Lease, `helm uninstall` as written leaves exactly what docs/uninstall.md's table lists, and the
//! documented clean-up commands remove that too.

use std::collections::BTreeSet;
use std::fs;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams};
use kube::{Client, Resource};

use crate::chart_docs::{fenced_blocks, shell_commands};
use crate::chart_scheduler::{run_documented, run_documented_install};
use crate::packaging::{NAMESPACE, root};
use crate::support::agent::localpv_bin;
use crate::support::cluster::{ControlPlane, Options, free_port};
use crate::support::eventually;
use crate::support::proc::Component;

/// `kind/name` of every object of `K` in the namespace (or cluster), minus what Kubernetes itself adds.
async fn names<K>(api: Api<K>) -> Vec<String>
where
    K: Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let kind = K::kind(&()).to_string();
    api.list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|o| o.meta().name.clone())
        .filter(|n| !["kube-root-ca.crt", "default"].contains(&n.as_str()))
        .map(|n| format!("{kind}/{n}"))
        .collect()
}

/// What the release's namespace and the cluster hold of localpv's.
async fn left_over(client: &Client) -> BTreeSet<String> {
    let ns = |c: &Client| c.clone();
    let mut all = Vec::new();
    all.extend(names::<Secret>(Api::namespaced(ns(client), NAMESPACE)).await);
    all.extend(names::<Lease>(Api::namespaced(ns(client), NAMESPACE)).await);
    all.extend(names::<ConfigMap>(Api::namespaced(ns(client), NAMESPACE)).await);
    all.extend(names::<ServiceAccount>(Api::namespaced(ns(client), NAMESPACE)).await);
    all.extend(names::<Service>(Api::namespaced(ns(client), NAMESPACE)).await);
    all.extend(names::<Deployment>(Api::namespaced(ns(client), NAMESPACE)).await);
    all.extend(names::<DaemonSet>(Api::namespaced(ns(client), NAMESPACE)).await);
    all.extend(
        names::<ClusterRole>(Api::all(ns(client)))
            .await
            .into_iter()
            .filter(|n| n.contains("localpv")),
    );
    all.extend(
        names::<ClusterRoleBinding>(Api::all(ns(client)))
            .await
            .into_iter()
            .filter(|n| n.contains("localpv")),
    );
    all.extend(names::<StorageClass>(Api::all(ns(client))).await);
    all.extend(
        names::<CustomResourceDefinition>(Api::all(ns(client)))
            .await
            .into_iter()
            .filter(|n| n.contains("localpv")),
    );
    all.into_iter().collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn documented_uninstall_leaves_what_the_docs_list_and_their_commands_remove_it() {
    let cp = ControlPlane::start(Options {
        controller_manager: true,
        ..Options::default()
    })
    .await;
    let client = cp.client();
    run_documented_install(&cp);

    // An extender replica as the chart runs it: it takes the clean-up Lease in the release namespace.
    let port = free_port();
    let mut extender = Component::spawn_with_env(
        "localpv-extender",
        &localpv_bin(),
        &[
            "extender".into(),
            format!("--listen=127.0.0.1:{port}"),
            format!("--lease-namespace={NAMESPACE}"),
            "--identity=localpv-extender-0".into(),
        ],
        &[("KUBECONFIG", cp.admin_kubeconfig.to_str().expect("utf-8"))],
        &cp.log_dir(),
        cp.reaper(),
    );
    let leases: Api<Lease> = Api::namespaced(client.clone(), NAMESPACE);
    eventually(
        "the extender to take its Lease",
        Duration::from_secs(60),
        || async {
            leases
                .get_opt("localpv-cleanup")
                .await
                .ok()
                .flatten()
                .map(|_| ())
                .ok_or_else(|| "no Lease yet".to_string())
        },
    )
    .await;
    extender.kill();

    let text = fs::read_to_string(root().join("docs/uninstall.md")).expect("docs/uninstall.md");
    let blocks: Vec<Vec<Vec<String>>> = fenced_blocks(&text)
        .into_iter()
        .filter(|(info, _)| info == "sh")
        .map(|(_, b)| shell_commands(&b))
        .collect();
    let uninstall = blocks
        .iter()
        .find(|b| b.iter().any(|c| c[..2] == ["helm", "uninstall"]))
        .expect("docs/uninstall.md shows helm uninstall");
    for command in uninstall {
        run_documented(&cp, command);
    }
    let left = left_over(&client).await;
    let expected: BTreeSet<String> = [
        "Secret/localpv-extender-tls",
        "Secret/localpv-scheduler-client",
        "Lease/localpv-cleanup",
        "CustomResourceDefinition/localdisks.localpv.io",
    ]
    .map(String::from)
    .into();
    assert_eq!(left, expected, "what helm uninstall leaves behind");
    for name in &left {
        let name = name.split('/').nth(1).expect("kind/name");
        assert!(
            text.contains(name),
            "docs/uninstall.md does not mention {name}"
        );
    }

    let cleanup = blocks
        .iter()
        .find(|b| b.iter().any(|c| c.contains(&"lease".to_string())))
        .expect("docs/uninstall.md shows how to remove what stays");
    for command in cleanup {
        run_documented(&cp, command);
    }
    let namespaces: Api<Namespace> = Api::all(client.clone());
    eventually(
        "the namespace to be gone",
        Duration::from_secs(60),
        || async {
            match namespaces.get_opt(NAMESPACE).await {
                Ok(None) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    let left = left_over(&client).await;
    assert!(
        left.is_empty(),
        "left after the documented clean-up: {left:?}"
    );
}
