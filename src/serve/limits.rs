//! The bounds every HTTP server of ours enforces, and the flags that set them.

use std::time::Duration;

/// What one server accepts at most. Both components use the same shape with their own defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Open connections at most; at the cap, the longest-idle connection is closed for a new one, and when every
    /// connection is busy the new one is closed at once. Keeps descriptors (RLIMIT_NOFILE) for the real work.
    pub max_connections: usize,
    /// Requests handled at once; more get 503 at once.
    pub max_requests: usize,
    /// Largest request body, in bytes (413 above).
    pub body_limit: usize,
    /// Request bodies held in memory at once, all requests together, with what the handlers charge for decoding
    /// them (`guard::Charge`), in bytes (503 when a new one would exceed it).
    pub body_budget: usize,
    /// A request's headers must arrive within this time of the connection or the previous request.
    pub header_timeout: Duration,
    /// A request's body must arrive within this time once its headers have (408 otherwise).
    pub body_timeout: Duration,
    /// A connection with no request in flight is closed after this long without one.
    pub idle_timeout: Duration,
}

impl Limits {
    /// The extender: kube-scheduler keeps a few connections and sends requests of up to tens of MiB (a 5,000-Node
    /// list is about 40 MiB). A request is charged its body and what decoding and answering it may cost: a
    /// 5,000-Node list of label-heavy nodes about 3.3 times its body, some 134 MB. The budget lets one such request
    /// in, or two of ordinary nodes, and fits the chart's 512 MiB limit with the idle process (about 110 MiB at
    /// 5,000 nodes and 50,000 PVs) and the buffers kept between requests (at most 128 MiB, `warm`).
    pub fn extender() -> Limits {
        Limits {
            max_connections: 1024,
            max_requests: 16,
            body_limit: 64 << 20,
            body_budget: 192 << 20,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(90),
        }
    }

    /// The node agent: probes and scrapes only, no request bodies; its descriptors belong to disks and watches.
    pub fn agent() -> Limits {
        Limits {
            max_connections: 128,
            max_requests: 8,
            body_limit: 16 << 10,
            body_budget: 256 << 10,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(90),
        }
    }
}

/// Flags overriding a component's `Limits` (same names for both components; each has its own defaults).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct LimitArgs {
    /// Open HTTP connections at most (extender 1024, node agent 128).
    #[arg(long, env = "LOCALPV_HTTP_MAX_CONNECTIONS")]
    pub http_max_connections: Option<usize>,
    /// HTTP requests handled at once; more get 503 (extender 16, node agent 8).
    #[arg(long, env = "LOCALPV_HTTP_MAX_REQUESTS")]
    pub http_max_requests: Option<usize>,
    /// Request bodies held at once, all requests together, in bytes; more get 503 (extender 192 MiB, node agent
    /// 256 KiB).
    #[arg(long, env = "LOCALPV_HTTP_BODY_BUDGET")]
    pub http_body_budget: Option<usize>,
    /// Milliseconds a client has to send a request's headers (10000).
    #[arg(long, env = "LOCALPV_HTTP_HEADER_TIMEOUT_MS")]
    pub http_header_timeout_ms: Option<u64>,
    /// Milliseconds a client has to send a request's body once the headers arrived; 408 after (10000).
    #[arg(long, env = "LOCALPV_HTTP_BODY_TIMEOUT_MS")]
    pub http_body_timeout_ms: Option<u64>,
    /// Milliseconds an idle keep-alive connection stays open (90000).
    #[arg(long, env = "LOCALPV_HTTP_IDLE_TIMEOUT_MS")]
    pub http_idle_timeout_ms: Option<u64>,
}

impl LimitArgs {
    /// `defaults` with every flag that was given applied.
    pub fn apply(&self, defaults: Limits) -> Limits {
        let ms = Duration::from_millis;
        Limits {
            max_connections: self
                .http_max_connections
                .unwrap_or(defaults.max_connections)
                .max(1),
            max_requests: self
                .http_max_requests
                .unwrap_or(defaults.max_requests)
                .max(1),
            body_limit: defaults.body_limit,
            body_budget: self.http_body_budget.unwrap_or(defaults.body_budget),
            header_timeout: self
                .http_header_timeout_ms
                .map_or(defaults.header_timeout, ms),
            body_timeout: self.http_body_timeout_ms.map_or(defaults.body_timeout, ms),
            idle_timeout: self.http_idle_timeout_ms.map_or(defaults.idle_timeout, ms),
        }
    }
}
