//! Reading the API server's audit log (`<plane dir>/logs/audit.log`, one JSON event per line at Metadata level):
//! the one parser behind every test that counts or checks requests by user.

use std::fs;
use std::path::Path;

use serde_json::Value;

/// Every event in the log, in order (an unreadable log is empty: nothing was recorded yet).
pub fn entries(audit_log: &Path) -> Vec<Value> {
    let text = fs::read_to_string(audit_log).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Events for requests that got their answer (`ResponseComplete`); open watches are not among them.
pub fn completed(audit_log: &Path) -> Vec<Value> {
    entries(audit_log)
        .into_iter()
        .filter(|e| e["stage"] == "ResponseComplete")
        .collect()
}

/// A string field of an event, "" when absent.
pub fn text(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

/// The requesting user's name.
pub fn user(e: &Value) -> &str {
    e["user"]["username"].as_str().unwrap_or_default()
}
