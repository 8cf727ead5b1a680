//! What one pass of the node agent decides about running its plan and about the next pass (pure; issue 35,
//! point 2). The shell (`agent::pass`) gathers, calls these, and executes.
//!
//! ```text
//!  classes, raw devices found last pass ── lists_host (every entry, or only what events named)
//!  index complete? narrow? ── stands_in ──> plan ── needs_cluster_list ──> fill: use it / check the policy /
//!                                            │                             list every PV / wait for the watch
//!                                            v
//!  plan.actions ── runs (ledger states and creates batched) ── Step per run ── RunSoFar: after a halt only Events
//!  volume id stored this pass and the last ── tagging (publish at once / did not read back)
//!  pass ended clean? ── untaint_allowed ── taint::all_published
//!  a wipe's failures ── wipe_backoff ── wipe_due;  held-out wipes ── nearest_backoff ─┐
//!  every reason to come back ──────────────────────────────────────────── next_pass
//! ```

use std::time::{Duration, Instant};

use crate::disk::{Discovery, DiscoveryClass, UnusableReason, VolumeMode};
use crate::plan::Action;

/// Whether a pass lists every entry of the host, not only those a mount or directory event named. NB: block
/// entries may change with no event in their directory (a symlink's target device appearing, a raw device of a
/// Filesystem class mounted in another mount namespace): a configuration with a Block class, or whose last pass
/// found a raw device ([`found_raw`]), lists the host in every pass.
pub fn lists_host(classes: &[DiscoveryClass], raw_found_last: bool) -> bool {
    raw_found_last || classes.iter().any(|c| c.mode == VolumeMode::Block)
}

/// Whether `found` holds a raw device: a Block disk, or an entry in use as a device (`DeviceInUse`).
pub fn found_raw(found: &Discovery) -> bool {
    found.disks.iter().any(|d| d.mode == VolumeMode::Block)
        || found
            .unusable
            .iter()
            .any(|u| u.reason == UnusableReason::DeviceInUse)
}

/// Whether the PV index may stand in for a list of every PV before the plan: complete, and wide (a narrow index
/// only after the admission policy is checked, which only a plan that writes asks for).
pub fn stands_in(complete: bool, narrow: bool) -> bool {
    complete && !narrow
}

/// How a plan that asked for every PV (`Plan::needs_cluster_list`) gets them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fill {
    /// The plan had them, or asked for none.
    Planned,
    /// A complete narrow index: check the admission policy, then plan again on the index.
    CheckPolicy,
    /// A PV the agent created has been missing from the watch too long: list every PV, plan again on the list.
    ListEvery,
    /// The index completes with a watch event, which wakes the loop: no wipe and no new PV this pass.
    Wait,
}

pub fn fill(
    needs_cluster_list: bool,
    had_cluster: bool,
    complete: bool,
    narrow: bool,
    overdue: bool,
) -> Fill {
    match () {
        _ if !needs_cluster_list || had_cluster => Fill::Planned,
        _ if complete && narrow => Fill::CheckPolicy,
        _ if overdue => Fill::ListEvery,
        _ => Fill::Wait,
    }
}

/// One step of running a plan.
#[derive(Debug, PartialEq)]
pub enum Run {
    One(Action),
    /// A run of ledger states and creates (one disk's state always comes before its create): one ledger write,
    /// then the creates in parallel.
    Batch(Vec<Action>),
}

impl Run {
    /// After a step that halted (a ledger change that could not be stored must not be acted on), only Events run.
    pub fn runs_after_halt(&self) -> bool {
        matches!(self, Run::One(Action::Event(_)))
    }
}

fn batched(a: &Action) -> bool {
    matches!(a, Action::CreatePv(_) | Action::SetDiskState { .. })
}

/// The plan's actions as steps, in order.
pub fn runs(actions: Vec<Action>) -> Vec<Run> {
    let mut out: Vec<Run> = Vec::new();
    for action in actions {
        match out.last_mut() {
            Some(Run::Batch(batch)) if batched(&action) => batch.push(action),
            _ if batched(&action) => out.push(Run::Batch(vec![action])),
            _ => out.push(Run::One(action)),
        }
    }
    out
}

/// How executing one step went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    Done,
    /// Failed in a way the next pass should retry soon.
    Retry,
    /// The ledger could not be written: nothing after it in this plan may run.
    Halt,
}

impl Step {
    /// After an API write (or a wipe start, a volume id stored): a failure is retried by a pass soon.
    pub fn api(ok: bool) -> Step {
        if ok { Step::Done } else { Step::Retry }
    }

    /// After a ledger write: a failure halts the plan (an unpersisted ledger change must not be acted on).
    pub fn ledger(ok: bool) -> Step {
        if ok { Step::Done } else { Step::Halt }
    }

    /// After a batch: its creates (`created_all`: none failed), then the owners recorded in one ledger write.
    pub fn batch(created_all: bool, recorded: bool) -> Step {
        match () {
            _ if !recorded => Step::Halt,
            _ if !created_all => Step::Retry,
            _ => Step::Done,
        }
    }
}

/// How running a plan's steps goes so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunSoFar {
    /// A step failed (or the list before them): plan again soon.
    pub retry: bool,
    /// A ledger write failed: only Events run after it (`Run::runs_after_halt`).
    pub halted: bool,
}

impl RunSoFar {
    /// Whether `run` runs now.
    pub fn runs(&self, run: &Run) -> bool {
        !self.halted || run.runs_after_halt()
    }

    pub fn record(&mut self, step: Step) {
        match step {
            Step::Done => {}
            Step::Retry => self.retry = true,
            Step::Halt => {
                self.retry = true;
                self.halted = true;
            }
        }
    }
}

/// What storing a volume id this pass (`tagged`) means, after the last pass did too or not (`tagged_before`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tagging {
    /// Plan again at once: the next pass measures that entry again and publishes its disk.
    pub again: bool,
    /// Stored twice in a row: the id did not read back (a filesystem that takes the attribute and loses it);
    /// trying again at once would spin, so back off as after any failed step.
    pub unconfirmed: bool,
}

pub fn tagging(tagged: bool, tagged_before: bool) -> Tagging {
    let unconfirmed = tagged && tagged_before;
    Tagging {
        again: tagged && !unconfirmed,
        unconfirmed,
    }
}

/// How a pass ended, for the startup taint and for when to come back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ended {
    /// A write failed (or a list): try again soon.
    pub retry: bool,
    pub tagging: Option<Tagging>,
    /// The plan wanted every PV and did not get them: no new PV this pass.
    pub held_back: bool,
}

impl Ended {
    fn again(&self) -> bool {
        self.tagging.is_some_and(|t| t.again)
    }

    fn unconfirmed(&self) -> bool {
        self.tagging.is_some_and(|t| t.unconfirmed)
    }
}

/// Whether this pass may count as having published every disk it can (then `taint::all_published` decides): not
/// when a write failed, a disk waits for its volume id, or the plan was held back for want of every PV.
pub fn untaint_allowed(ended: Ended) -> bool {
    !(ended.retry || ended.again() || ended.unconfirmed() || ended.held_back)
}

/// Every reason to plan again, each as how long until then.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Wakes {
    /// The plan's own (a held-out disk's retry, a grace period).
    pub plan: Option<Duration>,
    pub health: Option<Duration>,
    pub inventory: Option<Duration>,
    /// The nearest backoff still running out (one already out was tried by this pass).
    pub backoff: Option<Duration>,
    /// A wipe runs: its progress reaches the inventory.
    pub progress: Option<Duration>,
    /// The admission policy, while wide.
    pub scope: Option<Duration>,
    /// The startup taint's patch failed or met a changed Node.
    pub untaint_again: bool,
}

/// After a failed step.
pub const FIRST_BACKOFF: Duration = Duration::from_secs(5);

/// The longest a failed wipe waits before it is tried again.
pub const MAX_WIPE_BACKOFF: Duration = Duration::from_secs(600);

/// How long a wipe that failed `failures` times in a row waits before the next try: doubling per failure from
/// twice [`FIRST_BACKOFF`], capped at [`MAX_WIPE_BACKOFF`].
pub fn wipe_backoff(failures: u32) -> Duration {
    FIRST_BACKOFF
        .saturating_mul(1 << failures.min(8))
        .min(MAX_WIPE_BACKOFF)
}

/// Whether a planned wipe starts now: not while one runs on the disk (`running`), nor before its backoff after a
/// failure ran out (`not_before`). NB: either way the step counts as done: the running wipe's end, or the backoff's
/// wake-up, plans again.
pub fn wipe_due(running: bool, not_before: Option<Instant>, now: Instant) -> bool {
    !running && not_before.is_none_or(|at| now >= at)
}

/// The wait until the nearest held-out wipe may be tried again (`not_before` of each), for [`Wakes::backoff`].
/// NB: only backoffs still running out: one already out was tried by this pass (or its wipe is no longer planned),
/// and counting it would plan again at once, forever.
pub fn nearest_backoff(
    not_before: impl IntoIterator<Item = Instant>,
    now: Instant,
) -> Option<Duration> {
    not_before
        .into_iter()
        .filter(|at| *at > now)
        .map(|at| at - now)
        .min()
}

/// When to plan again: the nearest reason; at once after storing a volume id, soon after a failure.
pub fn next_pass(ended: Ended, wakes: Wakes) -> Option<Duration> {
    let soon = ended.retry || ended.unconfirmed() || wakes.untaint_again;
    [
        wakes.plan,
        wakes.health,
        wakes.inventory,
        wakes.backoff,
        wakes.progress,
        wakes.scope,
        soon.then_some(FIRST_BACKOFF),
        ended.again().then_some(Duration::ZERO),
    ]
    .into_iter()
    .flatten()
    .min()
}

#[cfg(test)]
#[path = "cadence/tests.rs"]
mod tests;
