//! A `localpv extender` process for the e2e tests and the benchmarks: on a loopback port fixed when it is made (so
//! it can be stopped and started again at the same URL), ready once `/readyz` answers 200 (its caches synced), and
//! read through its `/metrics`.

use std::time::Duration;

use super::agent::{http_get, localpv_bin, wait_answering};
use super::cluster::{ControlPlane, free_port};
use super::proc::Component;

pub struct ExtenderProcess {
    pub port: u16,
    name: String,
    args: Vec<String>,
    env: Vec<(String, String)>,
    process: Option<Component>,
}

impl ExtenderProcess {
    /// Prepares (does not start) `localpv extender` on a free loopback port with the admin kubeconfig, logging as
    /// the chart deploys it (`RUST_LOG=info`).
    pub fn new(cp: &ControlPlane) -> ExtenderProcess {
        let port = free_port();
        ExtenderProcess {
            port,
            name: "localpv-extender".into(),
            args: vec!["extender".into(), format!("--listen=127.0.0.1:{port}")],
            env: vec![
                (
                    "KUBECONFIG".into(),
                    cp.admin_kubeconfig.display().to_string(),
                ),
                ("RUST_LOG".into(), "info".into()),
            ],
            process: None,
        }
    }

    /// The component's name: its log file is `<name>.log` in the plane's log directory.
    pub fn name(mut self, name: &str) -> Self {
        self.name = name.into();
        self
    }

    pub fn arg(mut self, arg: &str) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Sets an environment variable (replacing one set before, `RUST_LOG` included).
    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.retain(|(k, _)| k != key);
        self.env.push((key.into(), value.into()));
        self
    }

    /// Starts it and waits until it is ready, failing with its log if it exits or is not ready `within`.
    pub async fn start(&mut self, cp: &ControlPlane, within: Duration) {
        let port = self.port;
        let process = self.spawn(cp);
        wait_answering(process, port, "/readyz", within, || true).await;
    }

    /// Starts it without waiting (over TLS, where `/readyz` is not plain HTTP).
    pub fn spawn(&mut self, cp: &ControlPlane) -> &mut Component {
        let env: Vec<(&str, &str)> = self
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        self.process.insert(Component::spawn_with_env(
            &self.name,
            &localpv_bin(),
            &self.args,
            &env,
            &cp.log_dir(),
            cp.reaper(),
        ))
    }

    /// Whether it is still running.
    pub fn running(&mut self) -> bool {
        self.process.as_mut().is_some_and(Component::running)
    }

    /// SIGTERM, then SIGKILL after `grace`.
    pub fn stop(&mut self, grace: Duration) {
        if let Some(mut p) = self.process.take() {
            p.stop(grace);
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn pid(&self) -> Option<u32> {
        self.process.as_ref().and_then(Component::pid)
    }

    /// The last lines of its log.
    pub fn log(&self) -> String {
        self.process
            .as_ref()
            .map(|p| p.tail(60))
            .unwrap_or_default()
    }

    /// Its `/metrics` now, as text (read several series of one moment with [`super::metric_sum`]).
    pub fn metrics(&self) -> String {
        let Some((200, text)) = http_get(self.port, "/metrics") else {
            panic!("{} does not serve /metrics:\n{}", self.name, self.log());
        };
        text
    }

    /// The samples of `name` whose labels contain every one of `having`, summed.
    pub fn metric(&self, name: &str, having: &[&str]) -> f64 {
        super::metric_sum(&self.metrics(), name, having)
    }
}

impl Drop for ExtenderProcess {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("----- {} (last lines) -----\n{}", self.name, self.log());
        }
    }
}
