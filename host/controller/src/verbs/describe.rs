//! `describe`: one workload as stored (its core spec and normalised
//! blocks), its live replicas on every node and its rollout status, the endpoint sets its
//! current blocks last published, and its recent events.

use std::collections::BTreeMap;

use voodu_api::{Description, EnvVariable, Failure, Response};
use voodu_model::core_spec::not_acted_on_message;
use voodu_model::WorkloadId;

use super::store_failure;
use crate::{not_found, wire, Controller};

/// Describes `workload`, with its newest `events`.
pub(crate) fn handle(
    controller: &Controller,
    workload: &WorkloadId,
    events: usize,
    show_env: bool,
) -> Result<Response, Failure> {
    let store = &controller.store;
    let Some(stored) = store.workload(workload).map_err(store_failure)? else {
        return Err(not_found(workload));
    };
    let events = store.events(workload, events).map_err(store_failure)?;
    let publications = store.publications(workload).map_err(store_failure)?;
    let ((replicas, unanswered), status, figures) = match controller.reconciler() {
        Some(reconciler) => (
            super::pods::everywhere(controller, Some(workload))?,
            reconciler.status(workload).map(|(status, _)| status),
            reconciler.block_figures(workload),
        ),
        None => ((Vec::new(), Vec::new()), None, Vec::new()),
    };
    let not_acted_on = stored
        .core_spec
        .blocks_not_acted_on()
        .into_iter()
        .map(not_acted_on_message)
        .collect();
    let described = wire::stored_workload(&stored);
    let env = if show_env {
        Some(replica_env(controller, &stored, &described.core_spec)?)
    } else {
        None
    };
    Ok(Response::Described(Box::new(Description {
        not_acted_on,
        env,
        workload: described,
        replicas,
        unanswered,
        waiting: controller
            .cluster()
            .map(|cluster| {
                crate::everywhere::held_now(
                    &cluster.store,
                    store.as_ref(),
                    std::slice::from_ref(workload),
                )
                .into_iter()
                .map(|held| held.message)
                .collect()
            })
            .unwrap_or_default(),
        // A block a later revision dropped was told to forget its set,
        // which the store then marked forgotten.
        publications: publications
            .iter()
            .filter(|publication| publication.forgotten_at.is_none())
            .map(|publication| wire::publication(publication, &figures))
            .collect(),
        events: events.iter().map(wire::event).collect(),
        status: status.as_ref().map(wire::status),
    })))
}

/// The env `stored`'s replicas run with: the manifest's `env` (as
/// `shown`, its secrets redacted) with its config buckets laid over it in
/// order, each variable named with its bucket; a secret's value never.
fn replica_env(
    controller: &Controller,
    stored: &voodu_store::StoredWorkload,
    shown: &voodu_model::core_spec::CoreSpec,
) -> Result<Vec<EnvVariable>, Failure> {
    let mut env: BTreeMap<String, EnvVariable> = shown
        .env
        .iter()
        .map(|(key, value)| {
            let variable = EnvVariable {
                key: key.clone(),
                value: Some(value.clone()),
                from: None,
            };
            (key.clone(), variable)
        })
        .collect();
    for bucket in stored.core_spec.buckets(&stored.id) {
        let held = controller
            .store
            .config_bucket(&bucket)
            .map_err(store_failure)?;
        for (key, value) in held {
            let variable = EnvVariable {
                key: key.clone(),
                value: (!value.secret).then_some(value.value),
                from: Some(bucket.clone()),
            };
            env.insert(key, variable);
        }
    }
    Ok(env.into_values().collect())
}
