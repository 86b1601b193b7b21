//! `on_deploy` webhooks ([`voodu_model::on_deploy`]): fired when a rollout
//! that an apply, a rollback or a restart asked for settles — the
//! `success` targets when a pass converged at its revision, the `failure`
//! targets when a pass of it failed. Each target is delivered on a task of
//! its own, up to [`ATTEMPTS`] times with a doubling wait, within
//! [`ATTEMPT_TIMEOUT`] each; the rollout never waits for one, and each
//! delivery is recorded as a `webhook` event naming the target by its
//! scheme and host (its path can hold a token).
//!
//! Which rollouts are awaited is kept in memory by the controller that
//! took the request: a controller restarted mid-rollout sends nothing for
//! it (delivery is best-effort, as in voodu).

use std::collections::HashMap;
use std::time::{Duration, SystemTime};
use voodu_model::EventReason;

use bytes::Bytes;
use parking_lot::Mutex;
use voodu_model::on_deploy::{DeployReport, DeployStatus, Webhook};
use voodu_model::WorkloadId;
use voodu_store::EventLevel;

use super::http::{send, system_tls, HttpRequest};
use super::{event, Reconciler};

/// How often a webhook is tried.
pub const ATTEMPTS: u32 = 3;
/// How long one attempt may take.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);
/// The wait after a first failed attempt; it doubles.
const FIRST_RETRY: Duration = Duration::from_secs(1);

/// The rollouts awaited, by workload: the revision and when it was asked.
#[derive(Debug, Default)]
pub struct AwaitedRollouts {
    by_workload: Mutex<HashMap<WorkloadId, (i64, SystemTime)>>,
}

impl Reconciler {
    /// A rollout of `revision` was asked for now: when it settles, the
    /// workload's `on_deploy` webhooks fire (a later request replaces an
    /// earlier one not settled yet).
    pub fn await_rollout(&self, workload: &WorkloadId, revision: i64) {
        self.rollouts
            .by_workload
            .lock()
            .insert(workload.clone(), (revision, SystemTime::now()));
    }

    /// A pass of `revision` that began at `began` settled as `status`:
    /// fires the webhooks of an awaited rollout of that revision, once. A
    /// pass that began before the rollout was asked for (one running when
    /// `vd restart` marked the same revision) settles nothing.
    pub(super) fn rollout_settled(
        &self,
        workload: &WorkloadId,
        revision: i64,
        began: SystemTime,
        status: DeployStatus,
        error: &str,
    ) {
        let started = {
            let mut awaited = self.rollouts.by_workload.lock();
            match awaited.get(workload) {
                Some((awaited_revision, started))
                    if *awaited_revision == revision && began >= *started =>
                {
                    let started = *started;
                    awaited.remove(workload);
                    started
                }
                _ => return,
            }
        };
        let Ok(Some(stored)) = self.store.workload(workload) else {
            return;
        };
        let Some(on_deploy) = stored.core_spec.on_deploy else {
            return;
        };
        let hooks = match status {
            DeployStatus::Success => on_deploy.success,
            DeployStatus::Failure => on_deploy.failure,
        };
        let report = DeployReport {
            workload: workload.clone(),
            revision,
            image: stored.core_spec.image.unwrap_or_default(),
            status,
            error: error.to_owned(),
            started_at: humantime::format_rfc3339_seconds(started).to_string(),
            completed_at: humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
        };
        for hook in hooks {
            let Some(me) = self.me.upgrade() else {
                return;
            };
            let report = report.clone();
            tokio::spawn(async move {
                let outcome = deliver(&hook, &report).await;
                let slot: &str = status.into();
                let (level, message) = match outcome {
                    Ok((code, attempts)) => (
                        EventLevel::Info,
                        format!(
                            "on_deploy {slot} webhook to {}: answered {code} (attempt {attempts} of {ATTEMPTS})",
                            target_of(&hook.url)
                        ),
                    ),
                    Err(failure) => (
                        EventLevel::Warning,
                        format!(
                            "on_deploy {slot} webhook to {} was not delivered after {ATTEMPTS} attempts: {failure}; the rollout stands",
                            target_of(&hook.url)
                        ),
                    ),
                };
                me.record(&[event(
                    &report.workload,
                    level,
                    EventReason::Webhook,
                    message,
                )]);
            });
        }
    }
}

/// A webhook's target as messages name it: its scheme, host and port,
/// never its path (a Slack or Telegram URL holds its token there) nor a
/// `user:password@`.
fn target_of(url: &str) -> String {
    match url.parse::<hyper::Uri>() {
        Ok(uri) => {
            let port = uri
                .port_u16()
                .map(|port| format!(":{port}"))
                .unwrap_or_default();
            format!(
                "{}://{}{port}",
                uri.scheme_str().unwrap_or("http"),
                uri.host().unwrap_or("?")
            )
        }
        Err(_) => "an unreadable URL".to_owned(),
    }
}

/// Delivers one webhook: the answer's code and the attempt it took, or
/// the last failure. A 2xx answer is delivered.
async fn deliver(hook: &Webhook, report: &DeployReport) -> Result<(u16, u32), String> {
    let uri: hyper::Uri = hook
        .url
        .parse()
        .map_err(|error| format!("{:?} is not a URL: {error}", target_of(&hook.url)))?;
    let https = match uri.scheme_str() {
        Some("https") => true,
        Some("http") => false,
        other => return Err(format!("the scheme {other:?} is not http or https")),
    };
    let host = uri
        .host()
        .ok_or_else(|| "the URL names no host".to_owned())?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
    let path = uri
        .path_and_query()
        .map_or("/", |path| path.as_str())
        .to_owned();
    let tls = if https { Some(system_tls()?) } else { None };
    let mut headers = hook.headers.clone();
    if !headers
        .keys()
        .any(|name| name.eq_ignore_ascii_case("content-type"))
    {
        headers.insert("Content-Type".into(), "application/json".into());
    }
    // voodu's User-Agent, whatever the target's headers say.
    headers.retain(|name, _| !name.eq_ignore_ascii_case("user-agent"));
    headers.insert("User-Agent".into(), "voodu-deploy-webhook".into());
    let body = Bytes::from(report.body_for(hook).to_string());
    let mut wait = FIRST_RETRY;
    let mut last = String::new();
    for attempt in 1..=ATTEMPTS {
        let request = HttpRequest {
            method: <&str>::from(hook.method),
            host: &host,
            port,
            path: &path,
            headers: &headers,
            body: body.clone(),
            tls: tls.as_ref(),
        };
        last = match tokio::time::timeout(ATTEMPT_TIMEOUT, send(request)).await {
            Ok(Ok(code)) if (200..300).contains(&code) => return Ok((code, attempt)),
            Ok(Ok(code)) => format!("answered {code}"),
            Ok(Err(error)) => error,
            Err(_) => format!(
                "no answer within {}",
                humantime::format_duration(ATTEMPT_TIMEOUT)
            ),
        };
        if attempt < ATTEMPTS {
            tokio::time::sleep(wait).await;
            wait *= 2;
        }
    }
    Err(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_target_is_named_without_its_path() {
        assert_eq!(
            target_of("https://hooks.slack.com/services/T0/B0/secret"),
            "https://hooks.slack.com"
        );
        assert_eq!(
            target_of("http://127.0.0.1:8080/hook?token=x"),
            "http://127.0.0.1:8080"
        );
        assert_eq!(
            target_of("https://bot:t0ken@api.telegram.org/send"),
            "https://api.telegram.org"
        );
    }
}
