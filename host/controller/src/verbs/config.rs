//! `config set|unset|get|list`: voodu's config buckets. A change is stored
//! with an event for each workload that takes the bucket (its `env_from`,
//! or its own bucket), naming the variables and never their values, and
//! queues those workloads: their env changed, so their replicas roll,
//! surge-first, through the usual drain. With `--no-restart` the change
//! keeps, in the same transaction, a hold of each such workload's
//! replicas as they run ([`voodu_store::config::ConfigHold`]): no pass
//! replaces them for the new env until the workload's next `vd restart`
//! or an apply that changes it; replicas made meanwhile take it.

use std::collections::BTreeMap;

use voodu_api::{ConfigChange, ConfigListing, ConfigVariable, Failure, Response};
use voodu_model::config::{key_problem, Bucket, BucketName, ConfigValue};
use voodu_model::WorkloadId;
use voodu_store::config::{ConfigHold, HoldChange};
use voodu_store::{EventLevel, NewEvent};

use super::store_failure;
use crate::Controller;

/// Sets `values` in `bucket`.
pub(crate) fn set(
    controller: &Controller,
    bucket: BucketName,
    values: BTreeMap<String, String>,
    secret: bool,
    no_restart: bool,
) -> Result<Response, Failure> {
    if values.is_empty() {
        return Err(Failure::new(format!(
            "vd config set {bucket}: nothing to set — name at least one KEY=VALUE"
        )));
    }
    check_keys(&bucket, values.keys())?;
    let set: Bucket = values
        .into_iter()
        .map(|(key, value)| (key, ConfigValue { value, secret }))
        .collect();
    change(controller, bucket, set, Vec::new(), no_restart)
}

/// Removes `keys` from `bucket`; a key it does not hold is refused.
pub(crate) fn unset(
    controller: &Controller,
    bucket: BucketName,
    keys: Vec<String>,
    no_restart: bool,
) -> Result<Response, Failure> {
    check_keys(&bucket, keys.iter())?;
    let held = controller
        .store
        .config_bucket(&bucket)
        .map_err(store_failure)?;
    if let Some(missing) = keys.iter().find(|key| !held.contains_key(*key)) {
        return Err(no_such_variable(&bucket, missing, &held));
    }
    change(controller, bucket, Bucket::new(), keys, no_restart)
}

/// One variable; a secret's value only when `reveal`.
pub(crate) fn get(
    controller: &Controller,
    bucket: BucketName,
    key: &str,
    reveal: bool,
) -> Result<Response, Failure> {
    let held = controller
        .store
        .config_bucket(&bucket)
        .map_err(store_failure)?;
    let Some(value) = held.get(key) else {
        return Err(no_such_variable(&bucket, key, &held));
    };
    Ok(Response::ConfigValue {
        variable: variable(key, value, reveal),
        bucket,
    })
}

/// A bucket's variables, secrets hidden unless `reveal`, only those whose
/// names contain `matching` (in any case) when given; or every bucket's
/// name.
pub(crate) fn list(
    controller: &Controller,
    bucket: Option<BucketName>,
    matching: Option<&str>,
    reveal: bool,
) -> Result<Response, Failure> {
    let store = &*controller.store;
    Ok(Response::Config(match bucket {
        None => ConfigListing {
            bucket: None,
            buckets: store.config_buckets().map_err(store_failure)?,
            variables: Vec::new(),
        },
        Some(bucket) => {
            let held = store.config_bucket(&bucket).map_err(store_failure)?;
            let pattern = matching.map(str::to_lowercase);
            let variables: Vec<ConfigVariable> = held
                .iter()
                .filter(|(key, _)| {
                    pattern
                        .as_ref()
                        .is_none_or(|pattern| key.to_lowercase().contains(pattern))
                })
                .map(|(key, value)| variable(key, value, reveal))
                .collect();
            if let (Some(pattern), true) = (matching, variables.is_empty()) {
                let names: Vec<&str> = held.keys().map(String::as_str).collect();
                return Err(Failure::new(match names.as_slice() {
                    [] => format!("config {bucket} has no variables"),
                    _ => format!(
                        "config {bucket}: no variable's name contains {pattern:?} — it has {}",
                        names.join(", ")
                    ),
                }));
            }
            ConfigListing {
                variables,
                bucket: Some(bucket),
                buckets: Vec::new(),
            }
        }
    }))
}

fn variable(key: &str, value: &ConfigValue, reveal: bool) -> ConfigVariable {
    ConfigVariable {
        key: key.to_owned(),
        value: (!value.secret || reveal).then(|| value.value.clone()),
        secret: value.secret,
    }
}

fn check_keys<'a>(
    bucket: &BucketName,
    keys: impl Iterator<Item = &'a String>,
) -> Result<(), Failure> {
    for key in keys {
        if let Some(problem) = key_problem(key) {
            return Err(Failure::new(format!("config {bucket}: {problem}")));
        }
    }
    Ok(())
}

fn no_such_variable(bucket: &BucketName, key: &str, held: &Bucket) -> Failure {
    let names: Vec<&str> = held.keys().map(String::as_str).collect();
    Failure::new(match names.as_slice() {
        [] => format!(
            "config {bucket} has no variables — set one with vd config set {bucket} {key}=VALUE"
        ),
        _ => format!(
            "config {bucket} has no variable {key} — it has {}",
            names.join(", ")
        ),
    })
}

/// Stores a change, with an event for each workload that takes the
/// bucket, and queues those workloads; with `no_restart`, with a hold of
/// each one's replicas as they run now.
fn change(
    controller: &Controller,
    bucket: BucketName,
    set: Bucket,
    unset: Vec<String>,
    no_restart: bool,
) -> Result<Response, Failure> {
    let _writes = controller.lock_writes()?;
    let store = &*controller.store;
    let taking: Vec<voodu_store::StoredWorkload> = store
        .workloads(None)
        .map_err(store_failure)?
        .into_iter()
        .filter(|workload| workload.core_spec.buckets(&workload.id).contains(&bucket))
        .collect();
    let holds = if no_restart {
        // The hash their replicas carry now: the env before this change.
        let kept = taking
            .iter()
            .map(|workload| {
                let core =
                    voodu_reconcile::resolved_core(store, workload).map_err(store_failure)?;
                let hash = voodu_reconcile::replica_hash(&core, workload.restarted_ms);
                Ok(ConfigHold::of(workload, hash))
            })
            .collect::<Result<Vec<_>, Failure>>()?;
        HoldChange::Keep(kept)
    } else {
        // Only those that hold any: each release is an operation of the
        // change's transaction, which etcd bounds.
        let mut holding = Vec::new();
        for workload in &taking {
            if !store
                .config_holds(&workload.id)
                .map_err(store_failure)?
                .is_empty()
            {
                holding.push(workload.id.clone());
            }
        }
        HoldChange::Release(holding)
    };
    let rolling: Vec<WorkloadId> = taking.into_iter().map(|workload| workload.id).collect();
    let set_keys: Vec<String> = set.keys().cloned().collect();
    let mut what = Vec::new();
    if !set_keys.is_empty() {
        what.push(format!("set {}", set_keys.join(", ")));
    }
    if !unset.is_empty() {
        what.push(format!("unset {}", unset.join(", ")));
    }
    let consequence = if no_restart {
        "its replicas keep the env they run with (--no-restart) until vd restart or an apply that changes it"
    } else {
        "its replicas roll to the new env"
    };
    let events: Vec<NewEvent> = rolling
        .iter()
        .map(|workload| NewEvent {
            workload: workload.clone(),
            level: EventLevel::Info,
            reason: voodu_model::EventReason::ConfigChanged,
            message: format!(
                "config {bucket} changed ({}); {consequence}",
                what.join("; ")
            ),
        })
        .collect();
    store
        .change_config(&bucket, &set, &unset, &events, &holds)
        .map_err(store_failure)?;
    if let Some(reconciler) = controller.reconciler() {
        for workload in &rolling {
            reconciler.enqueue(workload);
        }
    }
    Ok(Response::ConfigChanged(ConfigChange {
        bucket,
        set: set_keys,
        unset,
        rolling,
        kept: no_restart,
    }))
}

/// Seals every secret anew under the controller's first secrets key
/// (`vd config rotate-key`): after a new key was put first, before the old
/// one goes. No value changes, so no workload rolls.
pub(crate) fn rotate_key(controller: &Controller) -> Result<Response, Failure> {
    let Some(keys) = controller.secrets.clone() else {
        return Err(Failure::new(
            "config rotate-key: this controller has no secrets key — start it with --secrets-key NEW.key (made by `vd keys new secrets NEW.key`), followed by --secrets-key of the key in use now, then run this again",
        ));
    };
    let _writes = controller.lock_writes()?;
    let resealed = controller
        .store
        .reseal_secrets(voodu_store::sealing::Reseal::NotUnderFirstKey)
        .map_err(store_failure)?;
    let ids = keys.ids();
    tracing::info!(resealed, key = %keys.first(), "secrets sealed anew under the first key");
    Ok(Response::SecretsResealed {
        resealed,
        key: keys.first().to_string(),
        retired: ids[1..].iter().map(ToString::to_string).collect(),
    })
}
