//! Typed readers over raw YAML values: each reports its own problem (with the key path) and returns `None`
//! on failure, so one pass collects every problem.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::NodeSelectorTerm;
use serde_yaml_ng::Value;

use super::ConfigReader;
use crate::config::PvNaming;
use crate::config::values::{go_duration, label_key_problem, label_value_problem, yaml11_bool};
use crate::contract::NODE_LABEL;
use crate::disk::VolumeMode;

impl ConfigReader {
    /// String-keyed entries of a mapping; a null value means "not set" and is dropped.
    pub(super) fn entries<'v>(
        &mut self,
        key: &str,
        value: &'v Value,
        child_prefix: &str,
    ) -> Vec<(String, &'v Value)> {
        let value = plain(value);
        if value.is_null() {
            return Vec::new();
        }
        let Some(map) = value.as_mapping() else {
            self.problem(key, format!("expected a mapping, found {}", show(value)));
            return Vec::new();
        };
        let mut entries = Vec::new();
        for (k, v) in map {
            match scalar_text(k) {
                Some(name) if !plain(v).is_null() => entries.push((name, v)),
                Some(_) => {}
                None => self.problem(
                    &format!("{child_prefix}{}", show(k)),
                    "keys must be strings",
                ),
            }
        }
        entries
    }

    pub(super) fn string(&mut self, key: &str, value: &Value) -> Option<String> {
        let text = scalar_text(value);
        if text.is_none() {
            self.problem(key, format!("expected a string, found {}", show(value)));
        }
        text
    }

    pub(super) fn bool(&mut self, key: &str, value: &Value) -> Option<bool> {
        match plain(value) {
            Value::Bool(b) => Some(*b),
            Value::String(s) if yaml11_bool(s.trim()).is_some() => yaml11_bool(s.trim()),
            other => {
                self.problem(
                    key,
                    format!("{} is not a boolean (use true or false)", show(other)),
                );
                None
            }
        }
    }

    /// A whole number in `min..=max` (YAML 1.1 style: quoted numbers are accepted too).
    pub(super) fn count(&mut self, key: &str, value: &Value, min: u64, max: u64) -> Option<u64> {
        let n = match plain(value) {
            Value::Number(n) => n.as_u64(),
            Value::String(s) => s.trim().parse().ok(),
            _ => None,
        };
        match n {
            Some(n) if (min..=max).contains(&n) => Some(n),
            _ => {
                self.problem(
                    key,
                    format!("{} is not a whole number from {min} to {max}", show(value)),
                );
                None
            }
        }
    }

    pub(super) fn duration(&mut self, key: &str, value: &Value) -> Option<Duration> {
        let Value::String(text) = plain(value) else {
            let message = format!(
                "{} is not a duration (use Go syntax such as 30s, 5m or 1h30m)",
                show(value)
            );
            self.problem(key, message);
            return None;
        };
        go_duration(text)
            .map_err(|message| self.problem(key, message))
            .ok()
    }

    pub(super) fn one_of(&mut self, key: &str, value: &Value, allowed: &[&str]) -> Option<String> {
        let text = self.string(key, value)?;
        if allowed.contains(&text.as_str()) {
            return Some(text);
        }
        self.problem(
            key,
            format!("{text:?} is not one of {}", allowed.join(", ")),
        );
        None
    }

    pub(super) fn volume_mode(&mut self, key: &str, value: &Value) -> Option<VolumeMode> {
        match self.one_of(key, value, &["Filesystem", "Block"])?.as_str() {
            "Block" => Some(VolumeMode::Block),
            _ => Some(VolumeMode::Filesystem),
        }
    }

    pub(super) fn pv_naming(&mut self, key: &str, value: &Value) -> Option<PvNaming> {
        match self.one_of(key, value, &["localpv", "reference"])?.as_str() {
            "reference" => Some(PvNaming::Reference),
            _ => Some(PvNaming::Localpv),
        }
    }

    pub(super) fn abs_path(&mut self, key: &str, value: &Value) -> Option<PathBuf> {
        let text = self.string(key, value)?;
        let path = Path::new(&text);
        if text.is_empty() {
            self.problem(key, "must not be empty");
        } else if !path.is_absolute() {
            self.problem(
                key,
                format!("{text:?} is relative; an absolute path is required"),
            );
        } else if path.components().any(|c| c == Component::ParentDir) {
            self.problem(key, format!("{text:?} contains \"..\""));
        } else {
            // Drops `.` components, repeated and trailing slashes.
            return Some(path.components().collect());
        }
        None
    }

    pub(super) fn strings(&mut self, key: &str, value: &Value) -> Option<Vec<String>> {
        let Some(items) = plain(value).as_sequence() else {
            self.problem(key, format!("expected a list, found {}", show(value)));
            return None;
        };
        let texts: Vec<_> = items
            .iter()
            .enumerate()
            .map(|(i, v)| self.string(&format!("{key}[{i}]"), v))
            .collect();
        texts.into_iter().collect()
    }

    pub(super) fn argv(&mut self, key: &str, value: &Value) -> Option<Vec<String>> {
        // A single string is taken as a program without arguments.
        let argv = match plain(value) {
            Value::String(program) => vec![program.clone()],
            _ => self.strings(key, value)?,
        };
        if argv.first().is_none_or(String::is_empty) {
            self.problem(
                key,
                "must name a program (a non-empty list: program, then arguments)",
            );
            return None;
        }
        Some(argv)
    }

    pub(super) fn name_patterns(&mut self, key: &str, value: &Value) -> Option<Vec<String>> {
        let text = self.string(key, value)?;
        let patterns: Vec<String> = text
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(str::to_string)
            .collect();
        for pattern in &patterns {
            if let Err(err) = crate::discover::pattern::validate(pattern) {
                self.problem(
                    key,
                    format!("{pattern:?} is not a valid glob: {}", err.problem),
                );
            }
        }
        Some(if patterns.is_empty() {
            vec!["*".to_string()]
        } else {
            patterns
        })
    }

    pub(super) fn selector(&mut self, key: &str, value: &Value) -> Vec<NodeSelectorTerm> {
        match serde_yaml_ng::from_value::<Vec<NodeSelectorTerm>>(plain(value).clone()) {
            Ok(terms) => {
                for (i, term) in terms.iter().enumerate() {
                    let empty = term.match_expressions.as_ref().is_none_or(Vec::is_empty)
                        && term.match_fields.as_ref().is_none_or(Vec::is_empty);
                    if empty {
                        self.problem(&format!("{key}[{i}]"), "an empty term matches no node");
                    }
                }
                terms
            }
            Err(err) => {
                self.problem(
                    key,
                    format!("expected a list of node selector terms: {err}"),
                );
                Vec::new()
            }
        }
    }

    pub(super) fn label_keys(&mut self, key: &str, value: &Value) -> Option<Vec<String>> {
        let keys = self.strings(key, value)?;
        for (i, label) in keys.iter().enumerate() {
            if let Some(problem) = label_key_problem(label) {
                self.problem(&format!("{key}[{i}]"), problem);
            }
        }
        Some(keys)
    }

    pub(super) fn labels(&mut self, key: &str, value: &Value) -> Option<BTreeMap<String, String>> {
        let mut labels = BTreeMap::new();
        for (name, v) in self.entries(key, value, &format!("{key}.")) {
            let path = format!("{key}.{name}");
            let problem = label_key_problem(&name).or_else(|| {
                (name == NODE_LABEL).then(|| format!("{NODE_LABEL} is set by localpv itself"))
            });
            if let Some(problem) = problem {
                self.problem(&path, problem);
            }
            if let Some(text) = self.string(&path, v) {
                if let Some(problem) = label_value_problem(&text) {
                    self.problem(&path, problem);
                }
                labels.insert(name, text);
            }
        }
        Some(labels)
    }
}

/// A value without its YAML tag (`!!str x` -> `x`).
pub(super) fn plain(value: &Value) -> &Value {
    match value {
        Value::Tagged(tagged) => plain(&tagged.value),
        other => other,
    }
}

/// Text of a scalar; numbers and booleans become their YAML spelling.
pub(super) fn scalar_text(value: &Value) -> Option<String> {
    match plain(value) {
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// A short rendering of a value for messages: strings quoted, other kinds by name.
pub(super) fn show(value: &Value) -> String {
    match plain(value) {
        Value::Null => "null".to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => format!("{s:?}"),
        Value::Sequence(_) => "a list".to_string(),
        Value::Mapping(_) => "a mapping".to_string(),
        Value::Tagged(_) => "a tagged value".to_string(),
    }
}
