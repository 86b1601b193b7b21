//! The `workloads` and `blocks` tables: each workload's current revision,
//! core spec and normalised blocks in order; storing an apply, reading and
//! deleting workloads.

use rusqlite::{params, OptionalExtension, Transaction};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use voodu_model::{parse_kind_exact, EventLevel, NormalisedBlock, WorkloadId};

use crate::claims::{claims_of_blocks, ports_of, settle, HeldClaim};
use crate::events::insert_event;
use crate::*;

/// One workload to store in an apply.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkloadInput {
    /// Which workload.
    pub id: WorkloadId,
    /// Its core spec as JSON.
    pub core_spec: CoreSpec,
    /// Its plugin blocks, normalised, in source order.
    pub blocks: Vec<NormalisedBlock>,
    /// Where it was declared (`file:line:column`).
    pub source: Option<String>,
    /// Where each of its blocks was written, by position; empty (or
    /// short) when the caller does not know (a rollback, a plugin's
    /// replace), and the claims keep the locations they had.
    pub block_locations: Vec<voodu_model::workload::Location>,
}

/// What storing one workload changed.
#[derive(Debug, Clone, PartialEq)]
pub enum StoreChange {
    /// The workload is new; its first revision is stored.
    Created {
        /// The new revision (1).
        revision: i64,
    },
    /// The workload changed; a new revision is stored.
    Updated {
        /// The new revision.
        revision: i64,
        /// The blocks of the revision it replaced.
        previous_blocks: Vec<NormalisedBlock>,
    },
    /// Nothing changed; no revision was stored.
    Unchanged {
        /// The current revision.
        revision: i64,
    },
}

/// A stored workload, as of its current revision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredWorkload {
    /// Which workload.
    pub id: WorkloadId,
    /// Its current revision, from 1.
    pub revision: i64,
    /// The SHA-256 of its core spec and blocks, which identifies the spec.
    pub spec_hash: String,
    /// Its core spec.
    pub core_spec: CoreSpec,
    /// Its normalised plugin blocks, in source order.
    pub blocks: Vec<NormalisedBlock>,
    /// Where it was last declared.
    pub source: Option<String>,
    /// When it was first applied, RFC 3339.
    pub created_at: String,
    /// When its current revision was applied, RFC 3339.
    pub updated_at: String,
    /// When `vd restart` last asked for its replicas to be replaced, in
    /// Unix milliseconds; `None` when never. An apply keeps it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restarted_ms: Option<i64>,
    /// The replicas `vd stop` froze: passes leave them stopped, neither
    /// restarted nor replaced, until `vd start`. An apply keeps them.
    #[serde(default, skip_serializing_if = "std::collections::BTreeSet::is_empty")]
    pub frozen: std::collections::BTreeSet<String>,
}

/// What `vd stop` or `vd start` changes of a workload's frozen replicas.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Freeze {
    /// `vd stop`: these are frozen too.
    Add(std::collections::BTreeSet<String>),
    /// `vd start`: these are no longer frozen; `None`: none is.
    Remove(Option<std::collections::BTreeSet<String>>),
}

impl Freeze {
    /// The frozen set after this change to `frozen`.
    pub fn applied_to(
        &self,
        mut frozen: std::collections::BTreeSet<String>,
    ) -> std::collections::BTreeSet<String> {
        match self {
            Freeze::Add(more) => frozen.extend(more.iter().cloned()),
            Freeze::Remove(None) => frozen.clear(),
            Freeze::Remove(Some(thawed)) => frozen.retain(|id| !thawed.contains(id)),
        }
        frozen
    }
}

/// The SHA-256 (hex) of a core spec and its blocks: equal specs, equal hash.
/// Object keys keep their written order (serde_json's `preserve_order`),
/// which plugins see, so the order is part of the hash.
pub fn spec_hash(core_spec: &CoreSpec, blocks: &[NormalisedBlock]) -> String {
    let canonical = serde_json::json!({ "core": core_spec, "blocks": blocks }).to_string();
    hex::encode(Sha256::digest(canonical.as_bytes()))
}

fn store_workload(
    transaction: &Transaction<'_>,
    workload: &WorkloadInput,
    at: i64,
    recorded: &mut Vec<(WorkloadId, Event)>,
) -> Result<StoreChange, StoreError> {
    let id = &workload.id;
    let key = params![id.kind.as_str(), id.scope, id.name];
    // Applied again: whatever an unfinished deletion left is converged to
    // the new revision instead.
    transaction
        .prepare_cached("DELETE FROM deletions WHERE kind = ?1 AND scope = ?2 AND name = ?3")?
        .execute(key)?;
    let hash = spec_hash(&workload.core_spec, &workload.blocks);
    let current: Option<(i64, String)> = transaction
        .prepare_cached(
            "SELECT revision, spec_hash FROM workloads WHERE kind = ?1 AND scope = ?2 AND name = ?3",
        )?
        .query_row(key, |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()?;
    let core_spec = to_json(&workload.core_spec);

    let change =
        match &current {
            Some((revision, current_hash)) if *current_hash == hash => {
                transaction
                .prepare_cached(
                    "UPDATE workloads SET source = ?4 WHERE kind = ?1 AND scope = ?2 AND name = ?3",
                )?
                .execute(params![id.kind.as_str(), id.scope, id.name, workload.source])?;
                return Ok(StoreChange::Unchanged {
                    revision: *revision,
                });
            }
            Some((revision, _)) => {
                let previous_blocks = previous_blocks(transaction, id)?;
                transaction
                    .prepare_cached(
                        "UPDATE workloads SET revision = ?4, spec_hash = ?5, core_spec = ?6,
                     source = ?7, updated_ms = ?8 WHERE kind = ?1 AND scope = ?2 AND name = ?3",
                    )?
                    .execute(params![
                        id.kind.as_str(),
                        id.scope,
                        id.name,
                        revision + 1,
                        hash,
                        core_spec,
                        workload.source,
                        at
                    ])?;
                transaction
                    .prepare_cached(
                        "DELETE FROM blocks WHERE kind = ?1 AND scope = ?2 AND name = ?3",
                    )?
                    .execute(key)?;
                StoreChange::Updated {
                    revision: revision + 1,
                    previous_blocks,
                }
            }
            None => {
                // A workload deleted and applied again continues its
                // revisions, and was first applied with the first of them.
                let (last, first_ms): (i64, Option<i64>) = transaction
                    .prepare_cached(
                        "SELECT COALESCE(MAX(revision), 0), MIN(applied_ms) FROM revisions
                     WHERE kind = ?1 AND scope = ?2 AND name = ?3",
                    )?
                    .query_row(key, |row| Ok((row.get(0)?, row.get(1)?)))?;
                transaction
                    .prepare_cached(
                        "INSERT INTO workloads (kind, scope, name, revision, spec_hash, core_spec,
                     source, created_ms, updated_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                    )?
                    .execute(params![
                        id.kind.as_str(),
                        id.scope,
                        id.name,
                        last + 1,
                        hash,
                        core_spec,
                        workload.source,
                        first_ms.unwrap_or(at),
                        at
                    ])?;
                StoreChange::Created { revision: last + 1 }
            }
        };
    let revision = match &change {
        StoreChange::Created { revision } | StoreChange::Updated { revision, .. } => *revision,
        StoreChange::Unchanged { revision } => *revision,
    };
    let recreated = matches!(change, StoreChange::Created { revision } if revision > 1);

    let mut insert_block = transaction.prepare_cached(
        "INSERT INTO blocks (kind, scope, name, position, block_type, labels, spec, endpoints,
         claims) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
    )?;
    for (position, block) in workload.blocks.iter().enumerate() {
        insert_block.execute(params![
            id.kind.as_str(),
            id.scope,
            id.name,
            i64::try_from(position).unwrap_or(i64::MAX),
            block.block_type,
            to_json(&block.labels),
            to_json(&block.spec),
            to_json(&block.endpoints),
            to_json(&block.claims)
        ])?;
    }
    transaction
        .prepare_cached(
            "INSERT INTO revisions (kind, scope, name, revision, spec_hash, core_spec, blocks,
             applied_ms, recreated) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        )?
        .execute(params![
            id.kind.as_str(),
            id.scope,
            id.name,
            revision,
            hash,
            core_spec,
            to_json(&workload.blocks),
            at,
            recreated
        ])?;
    // Only the newest `keep_releases` revisions are kept.
    let keep = i64::from(workload.core_spec.releases_kept());
    transaction
        .prepare_cached(
            "DELETE FROM revisions WHERE kind = ?1 AND scope = ?2 AND name = ?3 AND revision <= ?4",
        )?
        .execute(params![
            id.kind.as_str(),
            id.scope,
            id.name,
            revision - keep
        ])?;
    let verb = match change {
        StoreChange::Created { .. } if recreated => "created again, after a delete, as",
        StoreChange::Created { .. } => "created",
        _ => "updated",
    };
    recorded.push(insert_event(
        transaction,
        &NewEvent {
            workload: id.clone(),
            level: EventLevel::Info,
            reason: voodu_model::EventReason::Applied,
            message: format!("{verb} revision {revision}"),
        },
        at,
    )?);
    Ok(change)
}

/// Replaces the applied workloads' rows in `claims` with their new
/// claims, or fails with every conflict ([`crate::claims::settle`]).
fn settle_claims(
    transaction: &Transaction<'_>,
    workloads: &[WorkloadInput],
) -> Result<(), StoreError> {
    let mut previous = Vec::new();
    {
        let mut select = transaction.prepare_cached(
            "SELECT held FROM claims WHERE kind = ?1 AND scope = ?2 AND name = ?3",
        )?;
        let mut delete = transaction
            .prepare_cached("DELETE FROM claims WHERE kind = ?1 AND scope = ?2 AND name = ?3")?;
        for workload in workloads {
            let key = params![
                workload.id.kind.as_str(),
                workload.id.scope,
                workload.id.name
            ];
            for held in select.query_map(key, |row| row.get::<_, String>(0))? {
                previous.push(from_json::<HeldClaim>(&held?, "claim")?);
            }
            delete.execute(key)?;
        }
    }
    let asked: Vec<HeldClaim> = workloads
        .iter()
        .flat_map(|input| claims_of_blocks(&input.id, &input.blocks, &input.block_locations))
        .collect();
    if asked.is_empty() {
        return Ok(());
    }
    let mut held = Vec::new();
    {
        let mut on_port = transaction
            .prepare_cached("SELECT held FROM claims WHERE protocol = ?1 AND port = ?2")?;
        for (protocol, port) in ports_of(&asked) {
            for row in on_port.query_map(params![protocol.as_str(), port], |row| {
                row.get::<_, String>(0)
            })? {
                held.push(from_json::<HeldClaim>(&row?, "claim")?);
            }
        }
    }
    let accepted = settle(&held, &previous, workloads).map_err(StoreError::ClaimsConflict)?;
    let mut insert = transaction.prepare_cached(
        "INSERT INTO claims (protocol, port, kind, scope, name, held) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?;
    for claim in &accepted {
        let (protocol, port) = claim.claim.port_key();
        let workload = &claim.holder.workload;
        insert.execute(params![
            protocol.as_str(),
            port,
            workload.kind.as_str(),
            workload.scope,
            workload.name,
            to_json(claim)
        ])?;
    }
    Ok(())
}

fn previous_blocks(
    transaction: &Transaction<'_>,
    id: &WorkloadId,
) -> Result<Vec<NormalisedBlock>, StoreError> {
    let blocks: String = transaction
        .prepare_cached(
            "SELECT blocks FROM revisions WHERE kind = ?1 AND scope = ?2 AND name = ?3
             ORDER BY revision DESC LIMIT 1",
        )?
        .query_row(params![id.kind.as_str(), id.scope, id.name], |row| {
            row.get(0)
        })
        .optional()?
        .unwrap_or_else(|| "[]".into());
    from_json(&blocks, "revision blocks")
}

impl Store {
    /// Stores every workload, and the events given, in one transaction: all
    /// of it or none. A workload whose spec hash is unchanged gets no new
    /// revision.
    pub fn apply(
        &mut self,
        workloads: &[WorkloadInput],
        extra_events: &[NewEvent],
    ) -> Result<Vec<StoreChange>, StoreError> {
        let stored = self.apply_then(workloads, extra_events, || Ok::<(), StoreError>(()))?;
        stored.map(|(changes, ())| changes)
    }

    /// Like [`Store::apply`], but runs `before_commit` once everything is
    /// written and before the commit: if it fails, nothing is stored and
    /// its error is returned inside `Ok`. The outer error is the store's.
    /// Used to make a change outside the database (a plugin going live)
    /// part of the same all-or-nothing step.
    pub fn apply_then<T, E>(
        &mut self,
        workloads: &[WorkloadInput],
        extra_events: &[NewEvent],
        before_commit: impl FnOnce() -> Result<T, E>,
    ) -> Result<Result<(Vec<StoreChange>, T), E>, StoreError> {
        let at = now_ms();
        let transaction = self.connection.transaction()?;
        let mut changes = Vec::with_capacity(workloads.len());
        let mut recorded = Vec::new();
        // Claims first: a conflict stores nothing, and dropping the
        // transaction rolls back what was written.
        settle_claims(&transaction, workloads)?;
        for workload in workloads {
            changes.push(store_workload(&transaction, workload, at, &mut recorded)?);
        }
        for event in extra_events {
            recorded.push(insert_event(&transaction, event, at)?);
        }
        let outcome = match before_commit() {
            Ok(outcome) => outcome,
            // Dropping the transaction rolls it back.
            Err(error) => return Ok(Err(error)),
        };
        transaction.commit()?;
        self.emit(&recorded);
        Ok(Ok((changes, outcome)))
    }

    /// One workload as of its current revision.
    pub fn workload(&self, id: &WorkloadId) -> Result<Option<StoredWorkload>, StoreError> {
        let row = self
            .connection
            .query_row(
                "SELECT revision, spec_hash, core_spec, source, created_ms, updated_ms,
                        restarted_ms, frozen
                 FROM workloads WHERE kind = ?1 AND scope = ?2 AND name = ?3",
                params![id.kind.as_str(), id.scope, id.name],
                |row| {
                    Ok((
                        (
                            row.get::<_, i64>(0)?,
                            row.get::<_, String>(1)?,
                            row.get::<_, String>(2)?,
                            row.get::<_, Option<String>>(3)?,
                        ),
                        (
                            row.get::<_, i64>(4)?,
                            row.get::<_, i64>(5)?,
                            row.get::<_, Option<i64>>(6)?,
                            row.get::<_, String>(7)?,
                        ),
                    ))
                },
            )
            .optional()?;
        let Some((
            (revision, spec_hash, core_spec, source),
            (created_ms, updated_ms, restarted_ms, frozen),
        )) = row
        else {
            return Ok(None);
        };
        Ok(Some(StoredWorkload {
            id: id.clone(),
            revision,
            spec_hash,
            core_spec: from_json(&core_spec, "core spec")?,
            blocks: self.blocks(id)?,
            source,
            created_at: rfc3339(created_ms),
            updated_at: rfc3339(updated_ms),
            restarted_ms,
            frozen: from_json(&frozen, "frozen replicas")?,
        }))
    }

    /// Changes a workload's frozen replicas (`vd stop`, `vd start`), with
    /// `events`, in one transaction. Returns the frozen set now, or `None`
    /// when no such workload is stored.
    pub fn freeze(
        &mut self,
        id: &WorkloadId,
        change: &Freeze,
        events: &[NewEvent],
    ) -> Result<Option<std::collections::BTreeSet<String>>, StoreError> {
        let at = now_ms();
        let transaction = self.connection.transaction()?;
        let stored: Option<String> = transaction
            .query_row(
                "SELECT frozen FROM workloads WHERE kind = ?1 AND scope = ?2 AND name = ?3",
                params![id.kind.as_str(), id.scope, id.name],
                |row| row.get(0),
            )
            .optional()?;
        let Some(stored) = stored else {
            return Ok(None);
        };
        let frozen = change.applied_to(from_json(&stored, "frozen replicas")?);
        let written = serde_json::to_string(&frozen).map_err(|source| StoreError::Corrupt {
            what: "frozen replicas",
            source,
        })?;
        transaction
            .prepare_cached(
                "UPDATE workloads SET frozen = ?4 WHERE kind = ?1 AND scope = ?2 AND name = ?3",
            )?
            .execute(params![id.kind.as_str(), id.scope, id.name, written])?;
        let mut recorded = Vec::with_capacity(events.len());
        for event in events {
            recorded.push(insert_event(&transaction, event, at)?);
        }
        transaction.commit()?;
        self.emit(&recorded);
        Ok(Some(frozen))
    }

    /// Marks a workload restarted now (`vd restart`), with `events`, in one
    /// transaction; its spec and revision stay. Returns the time it marks,
    /// or `None` when no such workload is stored.
    pub fn restart(
        &mut self,
        id: &WorkloadId,
        events: &[NewEvent],
    ) -> Result<Option<i64>, StoreError> {
        let at = now_ms();
        let transaction = self.connection.transaction()?;
        let marked = transaction
            .prepare_cached(
                "UPDATE workloads SET restarted_ms = ?4
                 WHERE kind = ?1 AND scope = ?2 AND name = ?3",
            )?
            .execute(params![id.kind.as_str(), id.scope, id.name, at])?;
        if marked == 0 {
            return Ok(None);
        }
        let mut recorded = Vec::with_capacity(events.len());
        for event in events {
            recorded.push(insert_event(&transaction, event, at)?);
        }
        transaction.commit()?;
        self.emit(&recorded);
        Ok(Some(at))
    }

    fn blocks(&self, id: &WorkloadId) -> Result<Vec<NormalisedBlock>, StoreError> {
        let mut statement = self.connection.prepare_cached(
            "SELECT block_type, labels, spec, endpoints, claims FROM blocks
             WHERE kind = ?1 AND scope = ?2 AND name = ?3 ORDER BY position",
        )?;
        let rows = statement.query_map(params![id.kind.as_str(), id.scope, id.name], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, String>(2)?,
                row.get::<_, String>(3)?,
                row.get::<_, String>(4)?,
            ))
        })?;
        let mut blocks = Vec::new();
        for row in rows {
            let (block_type, labels, spec, endpoints, claims) = row?;
            blocks.push(NormalisedBlock {
                block_type,
                labels: from_json(&labels, "block labels")?,
                spec: from_json(&spec, "block spec")?,
                endpoints: from_json(&endpoints, "block endpoints")?,
                claims: from_json(&claims, "block claims")?,
            });
        }
        Ok(blocks)
    }

    /// Every stored workload, by kind, scope and name; only those of `kind`
    /// when given.
    pub fn workloads(
        &self,
        kind: Option<voodu_plugin_abi::messages::WorkloadKind>,
    ) -> Result<Vec<StoredWorkload>, StoreError> {
        let ids = self.workload_ids_where(
            "SELECT kind, scope, name FROM workloads
             WHERE ?1 IS NULL OR kind = ?1 ORDER BY kind, scope, name",
            kind.map(|kind| kind.as_str()),
        )?;
        let mut workloads = Vec::with_capacity(ids.len());
        for id in ids {
            if let Some(workload) = self.workload(&id)? {
                workloads.push(workload);
            }
        }
        Ok(workloads)
    }

    /// The ids of every stored workload.
    pub fn workload_ids(&self) -> Result<Vec<WorkloadId>, StoreError> {
        self.workload_ids_where(
            "SELECT kind, scope, name FROM workloads WHERE ?1 IS NULL ORDER BY kind, scope, name",
            None,
        )
    }

    /// The workloads that have a block of `block_type`, by id.
    pub fn workloads_with_block_type(
        &self,
        block_type: &str,
    ) -> Result<Vec<WorkloadId>, StoreError> {
        self.workload_ids_where(
            "SELECT DISTINCT kind, scope, name FROM blocks WHERE block_type = ?1
             ORDER BY kind, scope, name",
            Some(block_type),
        )
    }

    /// Runs a query selecting `kind, scope, name` with one parameter.
    pub(crate) fn workload_ids_where(
        &self,
        sql: &str,
        parameter: Option<&str>,
    ) -> Result<Vec<WorkloadId>, StoreError> {
        let mut statement = self.connection.prepare_cached(sql)?;
        let rows = statement.query_map(params![parameter], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, String>(2)?,
            ))
        })?;
        let mut ids = Vec::new();
        for row in rows {
            let (kind, scope, name) = row?;
            if let Some(kind) = parse_kind_exact(&kind) {
                ids.push(WorkloadId::new(kind, scope, name));
            }
        }
        Ok(ids)
    }

    /// Deletes a workload and its blocks (its revisions and events stay),
    /// records a `deleted` event, and leaves a deletion for the reconciler
    /// to finish ([`Store::deletion`]), in one transaction. Returns what was
    /// deleted, or `None` if there was no such workload.
    pub fn delete(&mut self, id: &WorkloadId) -> Result<Option<StoredWorkload>, StoreError> {
        let Some(workload) = self.workload(id)? else {
            return Ok(None);
        };
        let at = now_ms();
        let transaction = self.connection.transaction()?;
        transaction.execute(
            "DELETE FROM workloads WHERE kind = ?1 AND scope = ?2 AND name = ?3",
            params![id.kind.as_str(), id.scope, id.name],
        )?;
        transaction.execute(
            "INSERT INTO deletions (kind, scope, name, core_spec, blocks, at_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)
             ON CONFLICT (kind, scope, name) DO UPDATE SET
             core_spec = excluded.core_spec, blocks = excluded.blocks, at_ms = excluded.at_ms,
             finished_ms = NULL",
            params![
                id.kind.as_str(),
                id.scope,
                id.name,
                to_json(&workload.core_spec),
                to_json(&workload.blocks),
                at
            ],
        )?;
        let deleted = insert_event(
            &transaction,
            &NewEvent {
                workload: id.clone(),
                level: EventLevel::Info,
                reason: voodu_model::EventReason::Deleted,
                message: format!("deleted at revision {}", workload.revision),
            },
            at,
        )?;
        transaction.commit()?;
        self.emit(&[deleted]);
        Ok(Some(workload))
    }
}
