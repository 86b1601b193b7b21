//! `config set|unset|get|list`: voodu's config buckets. A change is stored
//! with an event for each workload that takes the bucket (its `env_from`,
//! or its own bucket), naming the variables and never their values, and
//! queues those workloads: their env changed, so their replicas roll,
//! surge-first, through the usual drain.

use std::collections::BTreeMap;

use voodu_api::{ConfigChange, ConfigListing, ConfigVariable, Failure, Response};
use voodu_model::config::{key_problem, Bucket, BucketName, ConfigValue};
use voodu_model::WorkloadId;
use voodu_store::{EventLevel, NewEvent};

use super::store_failure;
use crate::Controller;

/// Sets `values` in `bucket`.
pub(crate) fn set(
    controller: &Controller,
    bucket: BucketName,
    values: BTreeMap<String, String>,
    secret: bool,
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
    change(controller, bucket, set, Vec::new())
}

/// Removes `keys` from `bucket`; a key it does not hold is refused.
pub(crate) fn unset(
    controller: &Controller,
    bucket: BucketName,
    keys: Vec<String>,
) -> Result<Response, Failure> {
    check_keys(&bucket, keys.iter())?;
    let held = controller
        .store
        .config_bucket(&bucket)
        .map_err(store_failure)?;
    if let Some(missing) = keys.iter().find(|key| !held.contains_key(*key)) {
        return Err(no_such_variable(&bucket, missing, &held));
    }
    change(controller, bucket, Bucket::new(), keys)
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

/// A bucket's variables, secrets hidden; or every bucket's name.
pub(crate) fn list(
    controller: &Controller,
    bucket: Option<BucketName>,
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
            ConfigListing {
                variables: held
                    .iter()
                    .map(|(key, value)| variable(key, value, false))
                    .collect(),
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
/// bucket, and queues those workloads.
fn change(
    controller: &Controller,
    bucket: BucketName,
    set: Bucket,
    unset: Vec<String>,
) -> Result<Response, Failure> {
    let _writes = controller.lock_writes()?;
    let store = &*controller.store;
    let rolling: Vec<WorkloadId> = store
        .workloads(None)
        .map_err(store_failure)?
        .into_iter()
        .filter(|workload| workload.core_spec.buckets(&workload.id).contains(&bucket))
        .map(|workload| workload.id)
        .collect();
    let set_keys: Vec<String> = set.keys().cloned().collect();
    let mut what = Vec::new();
    if !set_keys.is_empty() {
        what.push(format!("set {}", set_keys.join(", ")));
    }
    if !unset.is_empty() {
        what.push(format!("unset {}", unset.join(", ")));
    }
    let events: Vec<NewEvent> = rolling
        .iter()
        .map(|workload| NewEvent {
            workload: workload.clone(),
            level: EventLevel::Info,
            reason: "config-changed".into(),
            message: format!(
                "config {bucket} changed ({}); its replicas roll to the new env",
                what.join("; ")
            ),
        })
        .collect();
    store
        .change_config(&bucket, &set, &unset, &events)
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
    }))
}
