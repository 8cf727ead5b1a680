//! The documented chart commands, taken from the docs at test time and rendered exactly as written: every
//! `helm install`/`helm template`/`helm upgrade` line of README.md and docs/*.md, and every values file shown in
//! a ```yaml block, must produce the StorageClasses and the agent ConfigMap the text promises. A doc edit that
//! breaks a command fails here. Cross-references between the docs and the chart's NOTES must resolve.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use serde_json::Value;

use crate::packaging::{documents, root, run, tool};

/// Markdown files whose commands an operator copies.
const DOCS: &[&str] = &[
    "README.md",
    "docs/install.md",
    "docs/migration.md",
    "docs/uninstall.md",
    "charts/localpv/README.md",
];

/// The fenced blocks of a markdown text with their info string (`sh`, `yaml`...).
pub(crate) fn fenced_blocks(text: &str) -> Vec<(String, String)> {
    let mut blocks = Vec::new();
    let mut current: Option<(String, String, usize)> = None;
    for line in text.lines() {
        let trimmed = line.trim_start();
        match current.take() {
            None => {
                if let Some(info) = trimmed.strip_prefix("```") {
                    let indent = line.len() - trimmed.len();
                    current = Some((info.trim().to_string(), String::new(), indent));
                }
            }
            Some((info, body, indent)) => {
                if trimmed.starts_with("```") {
                    blocks.push((info, body));
                } else {
                    let line = line.get(indent..).unwrap_or(line.trim_start());
                    current = Some((info, format!("{body}{line}\n"), indent));
                }
            }
        }
    }
    blocks
}

/// The shell commands of a block: continuation lines joined, comments dropped, split on `&&`, `;` and `|`.
pub(crate) fn shell_commands(block: &str) -> Vec<Vec<String>> {
    let joined = block.replace("\\\n", " ");
    let mut commands = Vec::new();
    for line in joined.lines() {
        let words = shlex::split(line)
            .unwrap_or_else(|| panic!("a documented command does not parse as shell: {line}"));
        let mut command = Vec::new();
        for word in words {
            if word.starts_with('#') {
                break;
            }
            if ["&&", ";", "|", "||"].contains(&word.as_str()) {
                commands.push(std::mem::take(&mut command));
            } else {
                command.push(word);
            }
        }
        commands.push(command);
    }
    commands.retain(|c| !c.is_empty());
    commands
}

/// Every documented helm command that renders the chart, with the file it came from.
pub(crate) fn documented_helm_commands() -> Vec<(String, Vec<String>)> {
    let mut found = Vec::new();
    for doc in DOCS {
        let text = fs::read_to_string(root().join(doc)).unwrap_or_else(|e| panic!("{doc}: {e}"));
        for (info, body) in fenced_blocks(&text) {
            if info != "sh" {
                continue;
            }
            for command in shell_commands(&body) {
                let renders = command.first().map(String::as_str) == Some("helm")
                    && matches!(
                        command.get(1).map(String::as_str),
                        Some("install" | "template" | "upgrade")
                    );
                if renders {
                    found.push((doc.to_string(), command));
                }
            }
        }
    }
    found
}

/// Flags of `helm install`/`upgrade` that `helm template` does not take, and that do not change the rendering.
const NOT_FOR_TEMPLATE: &[&str] = &[
    "--reuse-values",
    "--reset-values",
    "--reset-then-reuse-values",
    "--install",
    "--atomic",
    "--wait",
];

/// `helm template` arguments equal to a documented install/upgrade command.
fn as_template(command: &[String]) -> Vec<String> {
    let mut args = vec!["template".to_string()];
    args.extend(
        command[2..]
            .iter()
            .filter(|a| !NOT_FOR_TEMPLATE.contains(&a.as_str()))
            .cloned(),
    );
    args
}

/// Values files the docs name that an operator brings: `lsp-values.yaml` is the reference chart's own default
/// values.yaml (from its source tarball). Other `-f` files must be in the repository. A released chart
/// (`oci://.../charts/localpv`) stands for charts/localpv: a release packages it with only the image values changed
/// (tests/realnode/release.rs installs the OCI artifact itself).
fn with_stand_ins(command: &[String], dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for (i, arg) in command.iter().enumerate() {
        if arg.starts_with("oci://") && arg.ends_with("/charts/localpv") {
            out.push("charts/localpv".to_string());
            continue;
        }
        let is_file = i > 0 && ["-f", "--values"].contains(&command[i - 1].as_str());
        if !is_file || root().join(arg).exists() {
            out.push(arg.clone());
            continue;
        }
        assert_eq!(
            arg, "lsp-values.yaml",
            "a documented values file is neither in the repository nor a known stand-in"
        );
        let files = crate::chart_reference_values::reference_values_files(dir);
        let values = files
            .into_iter()
            .find(|f| f.ends_with("provisioner/values.yaml"))
            .expect("the reference chart's values.yaml");
        out.push(values.display().to_string());
    }
    out
}

/// What a command's values promise: the classes (name -> (hostDir, has a StorageClass)), or None when it says
/// `classes=null`; and the ConfigMap it names instead of rendering one.
#[derive(Debug, Default)]
struct Promise {
    classes: Option<BTreeMap<String, (Option<String>, bool)>>,
    existing_config_map: Option<String>,
}

fn promise_of_values(values: &Value) -> Promise {
    let mut promise = Promise {
        classes: Some(BTreeMap::new()),
        ..Promise::default()
    };
    if let Some(name) = values["existingConfigMap"]
        .as_str()
        .filter(|s| !s.is_empty())
    {
        promise.existing_config_map = Some(name.to_string());
    }
    match &values["classes"] {
        Value::Array(classes) => {
            for c in classes {
                let name = c["name"].as_str().expect("a class has a name").to_string();
                let host_dir = c["hostDir"].as_str().map(str::to_string);
                promise
                    .classes
                    .as_mut()
                    .expect("set above")
                    .insert(name, (host_dir, c["storageClass"] != Value::Bool(false)));
            }
        }
        Value::Null if values.get("classes").is_some() => promise.classes = None,
        _ => {}
    }
    promise
}

/// The helm flags the docs use that take the next word as their value.
const TAKES_VALUE: &[&str] = &[
    "-f",
    "--values",
    "--set",
    "--set-string",
    "-n",
    "--namespace",
];

/// The promise of a command line: its `-f` files, then its `--set` flags (only the keys the docs use).
fn promise_of_command(args: &[String]) -> Promise {
    let defaults: Value = serde_yaml_ng::from_str(
        &fs::read_to_string(root().join("charts/localpv/values.yaml")).expect("values.yaml"),
    )
    .expect("values.yaml parses");
    let mut promise = promise_of_values(&defaults);
    let mut set_classes: BTreeMap<usize, (Option<String>, Option<String>, bool)> = BTreeMap::new();
    let mut i = 0;
    while i < args.len() {
        let (flag, value) = match args[i].split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), v.to_string()),
            _ if TAKES_VALUE.contains(&args[i].as_str()) => {
                i += 1;
                (
                    args[i - 1].clone(),
                    args.get(i).cloned().unwrap_or_default(),
                )
            }
            _ => (args[i].clone(), String::new()),
        };
        i += 1;
        match flag.as_str() {
            "-f" | "--values" => {
                let text = fs::read_to_string(root().join(&value))
                    .unwrap_or_else(|e| panic!("values file {value}: {e}"));
                let values: Value = serde_yaml_ng::from_str(&text).expect("values file parses");
                let from_file = promise_of_values(&values);
                if values.get("classes").is_some() {
                    promise.classes = from_file.classes;
                }
                if from_file.existing_config_map.is_some() {
                    promise.existing_config_map = from_file.existing_config_map;
                }
            }
            "--set" | "--set-string" => {
                for assignment in value.split(',') {
                    let (key, v) = assignment.split_once('=').expect("key=value");
                    if key == "classes" && v == "null" {
                        promise.classes = None;
                    } else if key == "existingConfigMap" {
                        promise.existing_config_map = Some(v.to_string());
                    } else if let Some(rest) = key.strip_prefix("classes[") {
                        let (index, field) = rest.split_once("].").expect("classes[N].field");
                        let entry = set_classes
                            .entry(index.parse().expect("an index"))
                            .or_insert((None, None, true));
                        match field {
                            "name" => entry.0 = Some(v.to_string()),
                            "hostDir" => entry.1 = Some(v.to_string()),
                            "storageClass" => entry.2 = v != "false",
                            _ => {}
                        }
                    }
                }
            }
            _ => {}
        }
    }
    // NB: helm replaces the whole list when one `classes[N]` is set: the defaults' entries are gone.
    if !set_classes.is_empty() {
        promise.classes = Some(
            set_classes
                .into_values()
                .map(|(name, dir, sc)| (name.expect("classes[N].name is set"), (dir, sc)))
                .collect(),
        );
    }
    promise
}

/// Renders with `args` (a `helm template` command line) and checks what `promise` says.
fn assert_rendering_keeps(what: &str, args: &[String], promise: &Promise) {
    let out = run(
        &tool("helm"),
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    assert!(
        out.status.success(),
        "{what}: helm {} failed:\n{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    let docs = documents(&String::from_utf8_lossy(&out.stdout));
    let classes: Vec<&str> = docs
        .iter()
        .filter(|d| d["kind"] == "StorageClass")
        .filter_map(|d| d["metadata"]["name"].as_str())
        .collect();
    let config: Option<Value> = docs
        .iter()
        .find(|d| d["kind"] == "ConfigMap" && d["data"].get("storageClassMap").is_some())
        .map(|d| {
            serde_yaml_ng::from_str(d["data"]["storageClassMap"].as_str().unwrap_or_default())
                .expect("storageClassMap parses")
        });
    match &promise.existing_config_map {
        Some(name) => {
            assert!(config.is_none(), "{what}: renders no ConfigMap of its own");
            let ds = docs
                .iter()
                .find(|d| d["kind"] == "DaemonSet")
                .unwrap_or_else(|| panic!("{what}: no DaemonSet"));
            let mounted = ds["spec"]["template"]["spec"]["volumes"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|v| v["configMap"]["name"] == name.as_str());
            assert!(mounted, "{what}: the DaemonSet mounts ConfigMap {name}");
        }
        None => assert!(config.is_some(), "{what}: no agent ConfigMap rendered"),
    }
    let Some(promised) = &promise.classes else {
        assert!(
            classes.is_empty(),
            "{what}: classes=null renders no StorageClass: {classes:?}"
        );
        return;
    };
    assert!(!promised.is_empty(), "{what}: promises no class at all");
    for (name, (host_dir, has_class)) in promised {
        assert_eq!(
            classes.contains(&name.as_str()),
            *has_class,
            "{what}: StorageClass {name} (rendered: {classes:?})"
        );
        if let Some(config) = &config {
            assert_eq!(
                config[name.as_str()]["hostDir"].as_str(),
                host_dir.as_deref(),
                "{what}: class {name} in the ConfigMap: {config}"
            );
        }
    }
}

#[test]
fn every_documented_helm_command_renders_the_classes_it_promises() {
    let commands = documented_helm_commands();
    assert!(
        commands.iter().any(|(doc, _)| doc == "docs/install.md")
            && commands.iter().any(|(doc, _)| doc == "docs/migration.md"),
        "the install and migration docs show helm commands: {commands:?}"
    );
    let dir = tempfile::tempdir().expect("temp dir");
    for (doc, command) in &commands {
        let what = format!("{doc}: `{}`", command.join(" "));
        let command = &with_stand_ins(command, dir.path());
        let promise = promise_of_command(command);
        assert_rendering_keeps(&what, &as_template(command), &promise);
    }
}

#[test]
fn every_documented_values_file_renders_the_classes_it_promises() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut checked = 0;
    for doc in DOCS {
        let text = fs::read_to_string(root().join(doc)).expect("doc readable");
        for (n, (info, body)) in fenced_blocks(&text).into_iter().enumerate() {
            let values: Value = match serde_yaml_ng::from_str(&body) {
                Ok(v) if info == "yaml" => v,
                _ => continue,
            };
            if values.get("classes").is_none() {
                continue;
            }
            let file = dir.path().join(format!("{n}.yaml"));
            fs::write(&file, &body).expect("written");
            let args: Vec<String> = ["template", "localpv", "charts/localpv", "-f"]
                .iter()
                .map(|s| s.to_string())
                .chain([file.display().to_string()])
                .collect();
            assert_rendering_keeps(
                &format!("{doc}: values block {n}"),
                &args,
                &promise_of_values(&values),
            );
            checked += 1;
        }
    }
    assert!(checked > 0, "docs/install.md shows a values file");
}

/// `[text](file.md#anchor)` links and `docs/file.md#anchor` mentions, in the docs and the chart.
fn section_links(text: &str) -> Vec<(String, String)> {
    let mut links = Vec::new();
    for (i, _) in text.match_indices(".md#") {
        let start = text[..i]
            .rfind(|c: char| c == '(' || c.is_whitespace())
            .map_or(0, |s| s + 1);
        let end = text[i + 4..]
            .find(|c: char| !(c.is_alphanumeric() || c == '-' || c == '_'))
            .map_or(text.len(), |e| i + 4 + e);
        let file = &text[start..i + 3];
        links.push((file.to_string(), text[i + 4..end].to_string()));
    }
    links
}

/// GitHub's anchor of a heading: lowercase, punctuation dropped, spaces to dashes.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(file: &Path) -> Vec<String> {
    let text = fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    text.lines()
        .filter_map(|l| l.strip_prefix('#'))
        .map(|l| anchor(l.trim_start_matches('#')))
        .collect()
}

#[test]
fn section_pointers_in_the_docs_and_the_chart_notes_resolve() {
    let mut sources: Vec<(String, String)> = Vec::new();
    for doc in DOCS {
        sources.push((
            doc.to_string(),
            fs::read_to_string(root().join(doc)).expect("doc"),
        ));
    }
    let notes = "charts/localpv/templates/NOTES.txt";
    sources.push((
        notes.into(),
        fs::read_to_string(root().join(notes)).expect("NOTES"),
    ));
    let mut checked = 0;
    for (source, text) in &sources {
        assert!(
            !text.contains("REFERENCE section"),
            "{source} points at a REFERENCE file that is not in the repository"
        );
        assert!(
            !text.contains(".md, \""),
            "{source} names a section by its title, which drifts: link file.md#anchor instead"
        );
        let base = root().join(source);
        let base = base.parent().expect("has a directory");
        for (file, section) in section_links(text) {
            let target = if file.starts_with("docs/") {
                root().join(&file)
            } else {
                base.join(&file)
            };
            assert!(
                anchors(&target).contains(&section),
                "{source}: {file}#{section} names no section of {}",
                target.display()
            );
            checked += 1;
        }
    }
    assert!(checked > 0, "no section pointers found");
}

#[test]
fn shell_commands_are_split_as_a_shell_would() {
    let block = "helm install a charts/localpv \\\n  --set 'classes[0].name=x' # comment\nkubectl get pv | tee f\n";
    assert_eq!(
        shell_commands(block),
        vec![
            vec![
                "helm",
                "install",
                "a",
                "charts/localpv",
                "--set",
                "classes[0].name=x"
            ],
            vec!["kubectl", "get", "pv"],
            vec!["tee", "f"],
        ]
    );
}
