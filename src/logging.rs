//! How errors read in logs: one line of plain text. kube's API error prints the whole `Status` struct with Rust's
//! debug formatting (`ApiError: ... (Status { status: Some(Failure), .. })`); operators and log queries want its
//! message and HTTP code.

use std::error::Error;

/// `error` and its sources as one line (`outer: inner: ...`, a source already quoted by its parent is not
/// repeated), with kube API errors reduced to their message, reason and HTTP code.
pub fn error_text(error: &(dyn Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut current: Option<&(dyn Error + 'static)> = Some(error);
    while let Some(e) = current {
        let own = e.to_string();
        if !text.contains(&own) {
            text.push_str(": ");
            text.push_str(&own);
        }
        if let Some(kube::Error::Api(status)) = e.downcast_ref::<kube::Error>() {
            text = text.replace(
                &format!(" ({status:?})"),
                &format!(" (HTTP {})", status.code),
            );
        }
        current = e.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kube_api_error_reads_without_rust_debug_text() {
        let status = kube::core::Status {
            message: "pods \"x\" is forbidden".into(),
            reason: "Forbidden".into(),
            code: 403,
            ..kube::core::Status::default()
        };
        let error = kube::Error::Api(Box::new(status));
        let text = error_text(&error);
        assert_eq!(
            text,
            "ApiError: pods \"x\" is forbidden: Forbidden (HTTP 403)"
        );
        let wrapped = kube::runtime::watcher::Error::InitialListFailed(error);
        let text = error_text(&wrapped);
        assert!(
            !text.contains("Status {") && !text.contains("Some("),
            "{text}"
        );
        assert!(text.ends_with("Forbidden (HTTP 403)"), "{text}");
    }

    #[test]
    fn sources_not_quoted_by_their_parent_are_appended_once() {
        #[derive(Debug, thiserror::Error)]
        #[error("failed to read /x")]
        struct Outer(#[source] std::io::Error);
        let error = Outer(std::io::Error::other("disk on fire"));
        assert_eq!(error_text(&error), "failed to read /x: disk on fire");
    }
}
