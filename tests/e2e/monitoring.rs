//! What an operator watches at run time, on real processes: the logs of a node agent writing to a pipe (no colour
//! escapes, no Rust debug text, JSON lines with unique keys, one warning per unusable entry), and every query of
//! the shipped Grafana dashboard and Prometheus alert rules evaluated by a real Prometheus server scraping a real
//! agent and extender through a bind/wipe cycle.
//!
//! With `LOCALPV_METRICS_PANELS=<file>`, the dashboard's series over the run are written there as JSON
//! (`scripts/metrics-picture.sh` turns them into `docs/metrics-dashboard.png`).

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::fs;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use crate::node_agent::{local_storage_class, pvs_of, wait_pvs};
use crate::packaging::{READY, agent_args, bind_app, plane_calling_an_extender, release_app, root};
use crate::support::agent::{http_get, install_crd, localpv_bin, wait_answering};
use crate::support::cluster::{ControlPlane, free_port};
use crate::support::disks::Mount;
use crate::support::eventually;
use crate::support::nodes::create_node;
use crate::support::proc::Component;

/// Any JSON value; fails to deserialise when an object repeats a key (serde_json would keep the last one).
struct UniqueKeys;

impl<'de> Deserialize<'de> for UniqueKeys {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(UniqueKeys)
    }
}

impl<'de> Visitor<'de> for UniqueKeys {
    type Value = UniqueKeys;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<UniqueKeys, A::Error> {
        let mut seen = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if !seen.insert(key.clone()) {
                return Err(de::Error::custom(format!("duplicate key {key:?}")));
            }
            map.next_value::<UniqueKeys>()?;
        }
        Ok(UniqueKeys)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<UniqueKeys, A::Error> {
        while seq.next_element::<UniqueKeys>()?.is_some() {}
        Ok(UniqueKeys)
    }
    fn visit_bool<E>(self, _: bool) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }
    fn visit_i64<E>(self, _: i64) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }
    fn visit_u64<E>(self, _: u64) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }
    fn visit_f64<E>(self, _: f64) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }
    fn visit_str<E>(self, _: &str) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }
    fn visit_unit<E>(self) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }
}

/// A `localpv` process whose stderr goes to a file (a pipe to kubelet in a pod: never a terminal).
fn spawn(cp: &ControlPlane, name: &str, args: &[String], env: &[(&str, &str)]) -> Component {
    let kubeconfig = cp.admin_kubeconfig.to_str().expect("utf-8 path");
    let mut all = vec![("KUBECONFIG", kubeconfig), ("RUST_LOG", "info")];
    all.extend_from_slice(env);
    Component::spawn_with_env(name, &localpv_bin(), args, &all, &cp.log_dir(), cp.reaper())
}

/// A Prometheus server on loopback scraping `targets` (address, node label) every second.
struct Prometheus {
    process: Component,
    port: u16,
}

impl Prometheus {
    fn start(cp: &ControlPlane, targets: &[(String, &str)]) -> Prometheus {
        let program = which("prometheus").unwrap_or_else(|| {
            panic!("missing prerequisite: prometheus not found on PATH; install the Debian package prometheus (scripts/prereqs.sh)")
        });
        let dir = cp.dir.join("prometheus");
        fs::create_dir_all(&dir).expect("prometheus dir");
        let mut config = String::from(
            "global: {scrape_interval: 1s, evaluation_interval: 1s}\nscrape_configs:\n- job_name: localpv\n  static_configs:\n",
        );
        for (address, node) in targets {
            config.push_str(&format!(
                "  - targets: ['{address}']\n    labels: {{node: '{node}'}}\n"
            ));
        }
        let rules = root().join("charts/localpv/files/prometheus-rules.yaml");
        config.push_str(&format!("rule_files: ['{}']\n", rules.display()));
        fs::write(dir.join("prometheus.yml"), config).expect("config written");
        let port = free_port();
        let args = vec![
            format!("--config.file={}", dir.join("prometheus.yml").display()),
            format!("--storage.tsdb.path={}", dir.join("data").display()),
            format!("--web.listen-address=127.0.0.1:{port}"),
        ];
        let process = Component::spawn("prometheus", &program, &args, &cp.log_dir(), cp.reaper());
        Prometheus { process, port }
    }

    fn get(&self, path: &str, params: &[(&str, &str)]) -> Value {
        let query: Vec<String> = params
            .iter()
            .map(|(k, v)| format!("{k}={}", urlencode(v)))
            .collect();
        let path = format!("{path}?{}", query.join("&"));
        let (code, body) = http_get(self.port, &path)
            .unwrap_or_else(|| panic!("prometheus does not answer:\n{}", self.process.tail(30)));
        let value: Value = serde_json::from_str(&body)
            .unwrap_or_else(|e| panic!("prometheus answered {code} with non-JSON ({e}): {body}"));
        value
    }

    /// An instant query; panics on any error (a query that does not parse, or that names unknown functions).
    fn query(&self, expr: &str) -> Vec<Value> {
        let v = self.get("/api/v1/query", &[("query", expr)]);
        assert_eq!(v["status"], "success", "query failed: {expr}\n{v}");
        v["data"]["result"].as_array().cloned().unwrap_or_default()
    }
}

fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .chain([PathBuf::from("/usr/bin").join(name)])
        .find(|p| p.is_file())
}

fn urlencode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// (title, expr) of every panel target of the shipped dashboard.
fn dashboard_queries() -> Vec<(String, String)> {
    let path = root().join("charts/localpv/files/grafana-dashboard.json");
    let text = fs::read_to_string(&path).expect("the dashboard exists");
    let dashboard: Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    let mut out = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        let title = panel["title"].as_str().unwrap_or_default();
        for target in panel["targets"].as_array().expect("targets") {
            let expr = target["expr"].as_str().expect("expr");
            out.push((title.to_string(), expr.replace("$__rate_interval", "10s")));
        }
    }
    out
}

fn rule_queries() -> Vec<(String, String)> {
    let path = root().join("charts/localpv/files/prometheus-rules.yaml");
    let status = Command::new(
        which("promtool").expect("missing prerequisite: promtool (Debian package prometheus)"),
    )
    .args(["check", "rules"])
    .arg(&path)
    .status()
    .expect("promtool runs");
    assert!(
        status.success(),
        "promtool check rules failed on {}",
        path.display()
    );
    let text = fs::read_to_string(&path).expect("the rules exist");
    let rules: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).expect("the rules are YAML");
    let mut out = Vec::new();
    for group in rules["groups"].as_sequence().expect("groups") {
        for rule in group["rules"].as_sequence().expect("rules") {
            let name = rule["alert"].as_str().unwrap_or_default();
            out.push((
                name.to_string(),
                rule["expr"].as_str().expect("expr").to_string(),
            ));
        }
    }
    out
}

/// Metric names an expression reads (ours and the process family).
fn metric_names(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let bytes = expr.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let rest = &expr[i..];
        let starts = (rest.starts_with("localpv_") || rest.starts_with("process_"))
            && (i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_'));
        if starts {
            let len = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            out.push(rest[..len].to_string());
            i += len;
        } else {
            i += 1;
        }
    }
    out
}

fn assert_clean_text_log(log: &str, what: &str) {
    assert!(
        !log.contains('\u{1b}'),
        "{what}: ANSI escapes in a log written to a pipe:\n{log}"
    );
    for bad in ["Some(", "Status {", "None,"] {
        assert!(
            !log.contains(bad),
            "{what}: Rust debug text {bad:?} in the log:\n{log}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn logs_and_dashboard_queries_hold_on_a_real_agent_and_extender() {
    let (cp, extender_port) = plane_calling_an_extender().await;
    let client = cp.client();
    install_crd(&cp).await;
    local_storage_class(&client, "local-storage", "Delete").await;
    let ns = cp.namespace("monitoring").await;

    // node-1 logs JSON, node-2 text; both to files. Each has one disk and two entries it cannot use.
    let mut agents = Vec::new();
    let mut mounts = Vec::new();
    for (node, format) in [("node-1", "json"), ("node-2", "text")] {
        create_node(&client, node, &[]).await;
        let port = free_port();
        let (args, disks) = agent_args(&cp, node, port);
        mounts.push(Mount::tmpfs(&disks.join("vol1"), "64M", cp.reaper()));
        fs::create_dir_all(disks.join("stray")).expect("stray dir");
        fs::write(disks.join("notes.txt"), "not a disk").expect("stray file");
        let env = [("LOCALPV_LOG_FORMAT", format)];
        let process = spawn(&cp, &format!("localpv-node-{node}"), &args, &env);
        agents.push((process, port, disks, node));
    }
    let mut extender = spawn(
        &cp,
        "localpv-extender",
        &[
            "extender".into(),
            format!("--listen=127.0.0.1:{extender_port}"),
            "--lease-namespace=default".into(),
            "--identity=localpv-extender-0".into(),
        ],
        &[],
    );
    for (process, port, _, _) in agents.iter_mut() {
        wait_answering(process, *port, "/readyz", READY, || true).await;
    }
    wait_answering(&mut extender, extender_port, "/readyz", READY, || true).await;
    let mut targets: Vec<(String, &str)> = agents
        .iter()
        .map(|(_, port, _, node)| (format!("127.0.0.1:{port}"), *node))
        .collect();
    targets.push((format!("127.0.0.1:{extender_port}"), ""));
    let prometheus = Prometheus::start(&cp, &targets);
    let path = |i: usize| agents[i].2.join("vol1").display().to_string();
    wait_pvs(&client, "node-1", &[path(0)], "Available").await;
    let node2 = wait_pvs(&client, "node-2", &[path(1)], "Available").await;
    let node2_pv = node2[&path(1)].metadata.name.clone().expect("named");

    // Bind through the extender, then release: a wipe, a new PV.
    tokio::time::sleep(Duration::from_secs(8)).await;
    bind_app(&client, &ns, "node-2", "10Mi", &node2_pv).await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    fs::write(agents[1].2.join("vol1/data.bin"), vec![7u8; 4 << 20]).expect("pod data written");
    release_app(&client, &ns).await;
    eventually(
        "node-2's disk to come back",
        Duration::from_secs(60),
        || async {
            let pvs = pvs_of(&client, "node-2").await;
            match pvs.get(&path(1)) {
                Some(pv)
                    if pv.metadata.uid != node2[&path(1)].metadata.uid
                        && crate::node_agent::phase(pv) == "Available" =>
                {
                    Ok(())
                }
                other => Err(format!("{:?}", other.map(crate::node_agent::phase))),
            }
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(8)).await;

    // Every query Prometheus evaluates without error; dashboard panels have data; names are ones we export.
    let mut scraped = String::new();
    for (_, port, _, _) in &agents {
        scraped.push_str(&http_get(*port, "/metrics").expect("agent metrics").1);
    }
    scraped.push_str(
        &http_get(extender_port, "/metrics")
            .expect("extender metrics")
            .1,
    );
    let mut panels = BTreeMap::new();
    for (title, expr) in dashboard_queries() {
        let result = prometheus.query(&expr);
        assert!(
            !result.is_empty(),
            "dashboard panel {title:?} has no data: {expr}"
        );
        let end = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_secs();
        let (start, end) = ((end - 120).to_string(), end.to_string());
        let range = prometheus.get(
            "/api/v1/query_range",
            &[
                ("query", &expr),
                ("start", &start),
                ("end", &end),
                ("step", "1"),
            ],
        );
        panels.insert(title, range["data"]["result"].clone());
    }
    for (alert, expr) in rule_queries() {
        prometheus.query(&expr);
        let names = metric_names(&expr);
        assert!(
            !names.is_empty(),
            "alert {alert} reads none of our metrics: {expr}"
        );
        for name in names {
            let exported = scraped.lines().any(|l| {
                l.strip_prefix(name.as_str())
                    .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
            });
            assert!(
                exported,
                "alert {alert} reads {name}, which no component exports"
            );
        }
    }
    let rules = prometheus.get("/api/v1/rules", &[]);
    let health: Vec<&Value> = rules["data"]["groups"][0]["rules"]
        .as_array()
        .expect("rules loaded")
        .iter()
        .filter(|r| r["health"] != "ok")
        .collect();
    assert!(
        health.is_empty(),
        "rules Prometheus could not evaluate: {health:?}"
    );
    if let Ok(out) = std::env::var("LOCALPV_METRICS_PANELS") {
        fs::write(&out, serde_json::to_string_pretty(&panels).expect("JSON"))
            .expect("panels written");
    }

    // Logs: node-1's JSON lines each parse, with unique keys; node-2's text has no escapes or debug text; both
    // warned once per unusable entry though many passes ran.
    let json_log = fs::read_to_string(&agents[0].0.log).expect("node-1 log");
    let mut warned = Vec::new();
    for line in json_log.lines().filter(|l| !l.trim().is_empty()) {
        serde_json::from_str::<UniqueKeys>(line)
            .unwrap_or_else(|e| panic!("a JSON log line is invalid ({e}): {line}"));
        let v: Value = serde_json::from_str(line).expect("valid JSON");
        if v["fields"]["message"] == "entry not usable" {
            warned.push(
                v["fields"]["reason"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            );
        }
    }
    assert_clean_text_log(&json_log, "node-1 (JSON)");
    warned.sort();
    assert_eq!(
        warned,
        ["NotADiskEntry", "NotAMountPoint"],
        "one warning per unusable entry:\n{json_log}"
    );
    let text_log = fs::read_to_string(&agents[1].0.log).expect("node-2 log");
    assert_clean_text_log(&text_log, "node-2 (text)");
    assert_eq!(
        text_log.matches("entry not usable").count(),
        2,
        "one warning per unusable entry:\n{text_log}"
    );
    assert!(
        text_log.contains(r#"reason="NotAMountPoint""#),
        "{text_log}"
    );
    assert_clean_text_log(
        &fs::read_to_string(&extender.log).expect("extender log"),
        "extender",
    );
    drop(mounts);
}
