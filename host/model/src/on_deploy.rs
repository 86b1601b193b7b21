//! `on_deploy`, as voodu documents it: webhooks fired after a deployment's
//! rollout settles, the `success` targets when it converged and the
//! `failure` targets when it failed. Each target is one HTTP request,
//! delivered on its own with a few attempts, never holding the rollout up.
//!
//! The request's body is the target's `body` (its `{{field}}`s filled in),
//! or voodu's default payload ([`DeployReport::payload`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::WorkloadId;

/// A deployment's webhooks.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OnDeploy {
    /// Fired when a rollout converged.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub success: Vec<Webhook>,
    /// Fired when a rollout failed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failure: Vec<Webhook>,
}

/// The HTTP method of a webhook.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    strum::EnumString,
    strum::IntoStaticStr,
)]
pub enum WebhookMethod {
    /// `POST`, the default.
    #[default]
    #[serde(rename = "POST")]
    #[strum(serialize = "POST")]
    Post,
    /// `PUT`.
    #[serde(rename = "PUT")]
    #[strum(serialize = "PUT")]
    Put,
    /// `PATCH`.
    #[serde(rename = "PATCH")]
    #[strum(serialize = "PATCH")]
    Patch,
    /// `DELETE`.
    #[serde(rename = "DELETE")]
    #[strum(serialize = "DELETE")]
    Delete,
}

/// One webhook target.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Webhook {
    /// `http://` or `https://` URL.
    pub url: String,
    /// The method (default POST).
    #[serde(default)]
    pub method: WebhookMethod,
    /// Extra headers; `Content-Type: application/json` unless one is set
    /// here.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// The body to send instead of the default payload; its strings'
    /// `{{field}}`s are filled in when it fires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<Value>,
}

/// Whether a rollout converged or failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr)]
pub enum DeployStatus {
    /// It converged.
    #[strum(serialize = "success")]
    Success,
    /// It failed.
    #[strum(serialize = "failure")]
    Failure,
}

/// What a webhook tells of one rollout.
#[derive(Debug, Clone, PartialEq)]
pub struct DeployReport {
    /// The deployment.
    pub workload: WorkloadId,
    /// The revision rolled out, voodu's `release_id`.
    pub revision: i64,
    /// Its image.
    pub image: String,
    /// How it ended.
    pub status: DeployStatus,
    /// Why it failed; empty when it converged.
    pub error: String,
    /// When the rollout was asked for, RFC 3339.
    pub started_at: String,
    /// When it settled, RFC 3339.
    pub completed_at: String,
}

impl DeployReport {
    /// The value of `{{field}}`, as voodu names the fields.
    fn field(&self, name: &str) -> Option<String> {
        Some(match name {
            "kind" => self.workload.kind.as_str().to_owned(),
            "scope" => self.workload.scope.clone(),
            "name" => self.workload.name.clone(),
            "release_id" => self.revision.to_string(),
            "image" => self.image.clone(),
            "status" => <&str>::from(self.status).to_owned(),
            "error" => self.error.clone(),
            "started_at" => self.started_at.clone(),
            "completed_at" => self.completed_at.clone(),
            _ => return None,
        })
    }

    /// voodu's default payload.
    pub fn payload(&self) -> Value {
        json!({
            "kind": self.workload.kind.as_str(),
            "scope": self.workload.scope,
            "name": self.workload.name,
            "release_id": self.revision.to_string(),
            "image": self.image,
            "status": <&str>::from(self.status),
            "error": self.error,
            "started_at": self.started_at,
            "completed_at": self.completed_at,
        })
    }

    /// What `hook` sends: its body with every string's `{{field}}`s filled
    /// in (unknown ones left as written), or the default payload.
    pub fn body_for(&self, hook: &Webhook) -> Value {
        match &hook.body {
            None => self.payload(),
            Some(body) => self.filled(body),
        }
    }

    fn filled(&self, value: &Value) -> Value {
        match value {
            Value::String(text) => Value::String(self.fill(text)),
            Value::Array(items) => {
                Value::Array(items.iter().map(|item| self.filled(item)).collect())
            }
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(key, item)| (key.clone(), self.filled(item)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }

    fn fill(&self, text: &str) -> String {
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(start) = rest.find("{{") {
            out.push_str(&rest[..start]);
            let after = &rest[start + 2..];
            match after.find("}}") {
                Some(end) => match self.field(after[..end].trim()) {
                    Some(value) => {
                        out.push_str(&value);
                        rest = &after[end + 2..];
                    }
                    None => {
                        out.push_str("{{");
                        rest = after;
                    }
                },
                None => {
                    out.push_str(&rest[start..]);
                    rest = "";
                }
            }
        }
        out.push_str(rest);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use voodu_plugin_abi::messages::WorkloadKind;

    fn report() -> DeployReport {
        DeployReport {
            workload: WorkloadId::new(WorkloadKind::Deployment, "prod", "api"),
            revision: 7,
            image: "api:1.7".into(),
            status: DeployStatus::Failure,
            error: "replica a1f3 did not become ready".into(),
            started_at: "2026-12-06T10:00:00Z".into(),
            completed_at: "2026-12-06T10:00:11Z".into(),
        }
    }

    #[test]
    fn the_default_payload_has_voodus_fields() {
        assert_eq!(
            report().payload(),
            json!({"kind": "deployment", "scope": "prod", "name": "api", "release_id": "7", "image": "api:1.7", "status": "failure", "error": "replica a1f3 did not become ready", "started_at": "2026-12-06T10:00:00Z", "completed_at": "2026-12-06T10:00:11Z"})
        );
    }

    #[test]
    fn a_body_s_fields_are_filled_in_everywhere_and_unknown_ones_kept() {
        let hook = Webhook {
            url: "https://hooks.example.com".into(),
            method: WebhookMethod::Post,
            headers: BTreeMap::new(),
            body: Some(
                json!({"text": "{{scope}}/{{name}} {{ status }}: {{error}} {{nope}} {{", "blocks": [{"id": "{{release_id}}"}], "n": 1}),
            ),
        };
        assert_eq!(
            report().body_for(&hook),
            json!({"text": "prod/api failure: replica a1f3 did not become ready {{nope}} {{", "blocks": [{"id": "7"}], "n": 1})
        );
    }
}
