//! Lease-based leader election (coordination.k8s.io/v1), so exactly one extender replica does cluster-level
//! clean-up. The holder renews every `renew` interval; a Lease not renewed for `duration` may be taken over.
//! Writes carry the resourceVersion read, so two candidates racing for an expired Lease cannot both win.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Client;
use kube::api::{Api, PostParams};

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

    /// Tries to hold the Lease for another `duration`. Ok(true) when this replica is the leader now.
    pub async fn try_acquire_or_renew(&self) -> Result<bool, kube::Error> {
        let now = Timestamp::now();
        let seconds = self.duration.as_secs().clamp(1, i32::MAX as u64) as i32;
        let Some(current) = self.api.get_opt(&self.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.identity.clone()),
                    lease_duration_seconds: Some(seconds),
                    acquire_time: Some(MicroTime(now)),
                    renew_time: Some(MicroTime(now)),
                    ..Default::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(e),
            };
        };
        let held = current.spec.clone().unwrap_or_default();
        let mine = held.holder_identity.as_deref() == Some(self.identity.as_str());
        let expired = match (&held.renew_time, held.lease_duration_seconds) {
            (Some(MicroTime(t)), Some(d)) => *t + SignedDuration::from_secs(i64::from(d)) < now,
            _ => true,
        };
        if !mine && !expired {
            return Ok(false);
        }
        let mut next = current;
        let mut s = held;
        if !mine {
            s.acquire_time = Some(MicroTime(now));
            s.lease_transitions = Some(s.lease_transitions.unwrap_or(0) + 1);
        }
        s.holder_identity = Some(self.identity.clone());
        s.lease_duration_seconds = Some(seconds);
        s.renew_time = Some(MicroTime(now));
        next.spec = Some(s);
        // NB: replace carries metadata.resourceVersion: a concurrent taker makes this a 409, not a second leader.
        match self
            .api
            .replace(&self.name, &PostParams::default(), &next)
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }
}
