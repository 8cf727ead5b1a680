//! Lease-based leader election (coordination.k8s.io/v1), so exactly one extender replica does cluster-level
//! clean-up: the shell around the pure `crate::lease` decision. The holder renews every tick; a Lease not renewed
//! for `duration` may be taken over. Writes carry the resourceVersion read, so two candidates racing for an
//! expired Lease cannot both win. NB: the Lease is written with `Api` directly, not through `crate::effects`: its
//! writes are the election itself (a 409 is "not leader", not "already done"), and they are counted by the
//! `localpv_controller_leader` gauge rather than as writes.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, PostParams};

use crate::lease::{decide, next_spec};

pub struct Elector {
    api: Api<Lease>,
    name: String,
    identity: String,
    duration: Duration,
}

impl Elector {
    pub fn new(
        client: Client,
        namespace: &str,
        name: &str,
        identity: &str,
        duration: Duration,
    ) -> Elector {
        Elector {
            api: Api::namespaced(client, namespace),
            name: name.to_string(),
            identity: identity.to_string(),
            duration,
        }
    }

    /// Tries to hold the Lease for another `duration` (`crate::lease::decide`). Ok(true) when this replica is the
    /// leader now.
    pub async fn try_acquire_or_renew(&self) -> Result<bool, kube::Error> {
        let now = Timestamp::now();
        let seconds = self.duration.as_secs().clamp(1, i32::MAX as u64) as i32;
        let current = self.api.get_opt(&self.name).await?;
        let spec = current.as_ref().and_then(|l| l.spec.as_ref());
        let step = decide(spec, &self.identity, now);
        if !step.writes() {
            return Ok(false);
        }
        let next = next_spec(spec, &step, &self.identity, seconds, now);
        let written = match current {
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.name.clone()),
                        ..Default::default()
                    },
                    spec: Some(next),
                };
                self.api.create(&PostParams::default(), &lease).await
            }
            Some(mut lease) => {
                lease.spec = Some(next);
                // NB: replace carries metadata.resourceVersion: a concurrent taker makes this a 409, not a second
                // leader.
                self.api
                    .replace(&self.name, &PostParams::default(), &lease)
                    .await
            }
        };
        match written {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }
}
