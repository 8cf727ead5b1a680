//! The configuration while the agent runs: read again every `--config-poll`, taken when it is new and valid, a
//! rejected one said once per error (log, metric, a Warning on the Node) while the last good one runs on; and the
//! mount watcher on the configuration's directories.

use std::path::PathBuf;

use kube::runtime::events::EventType as KubeEventType;
use tracing::{info, warn};

use super::Agent;
use crate::agent::load_config;
use crate::agent::metrics::{OutcomeLabels, StepOutcome};
use crate::config::Config;
use crate::effects::Reason;
use crate::host::wake::MountWatcher;

/// What one read of the configuration means for the running one.
#[derive(Debug, PartialEq)]
enum Reload {
    /// The same as the running one.
    Same,
    /// New and valid: taken.
    Take(Config),
    /// Invalid: the last good one runs on. `news` when the error is not the one last said, which is said once.
    Rejected { text: String, news: bool },
}

fn reload(running: &Config, read: anyhow::Result<Config>, last_error: Option<&str>) -> Reload {
    match read {
        Ok(config) if config == *running => Reload::Same,
        Ok(config) => Reload::Take(config),
        Err(error) => {
            let text = format!("{error:#}");
            let news = last_error != Some(text.as_str());
            Reload::Rejected { text, news }
        }
    }
}

impl Agent {
    pub(super) fn mount_watcher(&self) -> Option<MountWatcher> {
        let dirs: Vec<PathBuf> = self
            .s
            .config
            .classes
            .iter()
            .map(|c| c.mount_dir.clone())
            .collect();
        match MountWatcher::new(&dirs) {
            Ok(w) => Some(w),
            Err(error) => {
                warn!(error = %crate::host::error_chain(&error), "cannot watch mounts; relying on the periodic resync");
                None
            }
        }
    }

    /// Re-reads the configuration. True when a new valid configuration was taken.
    pub(super) async fn reload_config(&mut self) -> bool {
        let read = load_config(&self.s.opts.config).and_then(|config| {
            config.check_state_dir(&self.s.opts.state_dir)?;
            Ok(config)
        });
        let text = match reload(&self.s.config, read, self.last_config_error.as_deref()) {
            Reload::Same => {
                self.last_config_error = None;
                return false;
            }
            Reload::Take(config) => {
                info!(classes = config.classes.len(), "configuration reloaded");
                self.count_reload(StepOutcome::Ok);
                self.s.config = config;
                self.last_config_error = None;
                return true;
            }
            Reload::Rejected { news: false, .. } => return false,
            Reload::Rejected { text, news: true } => text,
        };
        warn!(error = %text, "new configuration rejected; keeping the last good one");
        self.count_reload(StepOutcome::Error);
        let uid = self.s.nodes.get(&self.s.node).and_then(|n| n.metadata.uid);
        let message = format!("configuration rejected, still running on the last good one: {text}");
        let (node, warning) = (&self.s.node, KubeEventType::Warning);
        self.writer
            .on_node(
                node,
                uid.as_deref(),
                warning,
                Reason::ConfigRejected,
                &message,
            )
            .await;
        self.last_config_error = Some(text);
        false
    }

    fn count_reload(&self, outcome: StepOutcome) {
        let reloads = &self.s.metrics.config_reloads;
        reloads.get_or_create(&OutcomeLabels { outcome }).inc();
    }
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;

    fn changed() -> Config {
        Config {
            wipe_concurrency: Config::default().wipe_concurrency + 1,
            ..Config::default()
        }
    }

    #[rstest]
    #[case::same(Ok(Config::default()), None, Reload::Same)]
    #[case::same_after_an_error(Ok(Config::default()), Some("bad"), Reload::Same)]
    #[case::new(Ok(changed()), None, Reload::Take(changed()))]
    #[case::rejected(Err("bad"), None, Reload::Rejected { text: "bad".into(), news: true })]
    #[case::rejected_again(Err("bad"), Some("bad"), Reload::Rejected { text: "bad".into(), news: false })]
    #[case::rejected_otherwise(Err("worse"), Some("bad"), Reload::Rejected { text: "worse".into(), news: true })]
    fn a_rejected_configuration_is_said_once_per_error_and_a_new_valid_one_taken(
        #[case] read: Result<Config, &str>,
        #[case] last_error: Option<&str>,
        #[case] want: Reload,
    ) {
        let read = read.map_err(|e| anyhow::anyhow!(e.to_string()));
        assert_eq!(reload(&Config::default(), read, last_error), want);
    }
}
