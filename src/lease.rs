//! Leader election as a pure decision (issue 35, point 3): from the Lease as read (or its absence), this replica's
//! identity and the time, what to write, and the Lease's spec to write. The shell (`controller::lease`) reads,
//! calls [`decide`], and writes with the resourceVersion it read, so two replicas racing for an expired Lease
//! cannot both win: the second write is a 409.
//!
//! ```text
//!  Lease (holder, renewTime, duration, transitions) or none ─┐
//!  me, now, duration ────────────────────────────────────────┴─> decide ─> Create | Renew | TakeOver | Follow
//! ```
//!
//! Rules:
//! - no Lease: create it, holding it;
//! - held by me: renew it (even past its expiry: nobody took it, or the write is a 409);
//! - held by another and not expired (renewTime + duration >= now): follow, until it expires;
//! - held by another and expired, or held by nobody, or without a renewTime or duration: take it over, counting a
//!   transition.

use k8s_openapi::api::coordination::v1::LeaseSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

#[cfg(test)]
mod tests;

/// What this replica does with the Lease now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaseStep {
    /// There is no Lease: create it, holding it.
    Create,
    /// It is mine: renew it.
    Renew,
    /// Another's has expired (or nobody holds it): take it over.
    TakeOver,
    /// Another holds it until `until`: do nothing.
    Follow {
        holder: String,
        until: Option<Timestamp>,
    },
}

impl LeaseStep {
    /// Whether this step writes (and, written, makes this replica the leader).
    pub fn writes(&self) -> bool {
        !matches!(self, LeaseStep::Follow { .. })
    }
}

/// Decides from the Lease's spec as read (`None`: no Lease object).
pub fn decide(current: Option<&LeaseSpec>, me: &str, now: Timestamp) -> LeaseStep {
    let Some(spec) = current else {
        return LeaseStep::Create;
    };
    let holder = spec.holder_identity.as_deref().filter(|h| !h.is_empty());
    if holder == Some(me) {
        return LeaseStep::Renew;
    }
    let until = match (&spec.renew_time, spec.lease_duration_seconds) {
        (Some(MicroTime(t)), Some(d)) if d > 0 => {
            Some(*t + SignedDuration::from_secs(i64::from(d)))
        }
        _ => None,
    };
    match (holder, until) {
        (Some(holder), Some(until)) if until >= now => LeaseStep::Follow {
            holder: holder.to_string(),
            until: Some(until),
        },
        _ => LeaseStep::TakeOver,
    }
}

/// The spec to write for `step` (which must write): held by `me` for `duration_secs` from `now`; a take-over
/// counts a transition and sets the acquire time.
pub fn next_spec(
    current: Option<&LeaseSpec>,
    step: &LeaseStep,
    me: &str,
    duration_secs: i32,
    now: Timestamp,
) -> LeaseSpec {
    let mut spec = current.cloned().unwrap_or_default();
    match step {
        LeaseStep::Create => {
            spec.acquire_time = Some(MicroTime(now));
        }
        LeaseStep::TakeOver => {
            spec.acquire_time = Some(MicroTime(now));
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        }
        LeaseStep::Renew | LeaseStep::Follow { .. } => {}
    }
    spec.holder_identity = Some(me.to_string());
    spec.lease_duration_seconds = Some(duration_secs.max(1));
    spec.renew_time = Some(MicroTime(now));
    spec
}
