//! The embedded store: SQLite (through rusqlite, bundled) in
//! `<root>/state.db`, in WAL mode, with a versioned schema ([`schema`]).
//!
//! It keeps each workload's current revision, core spec and normalised
//! blocks, every revision ever applied, and an event log per workload. It
//! knows nothing of plugins or Docker: blocks are JSON to it.

mod schema;

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rusqlite::{params, Connection, OptionalExtension, Transaction};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::manifest::{parse_kind_exact, NormalisedBlock, WorkloadId};

/// What can go wrong in the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// SQLite refused an operation.
    #[error("the state database failed: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// The schema could not be brought up to date.
    #[error("the state database schema could not be migrated: {0}")]
    Migration(#[from] rusqlite_migration::Error),
    /// A stored JSON column did not parse: the database was edited by hand
    /// or written by an incompatible voodu.
    #[error("the state database holds a malformed {what}: {source}")]
    Corrupt {
        /// Which column.
        what: &'static str,
        /// The JSON error.
        source: serde_json::Error,
    },
}

/// How serious an event is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EventLevel {
    /// Something happened as asked.
    Info,
    /// Something happened, but not entirely as asked (a drain ran out of
    /// budget, a plugin could not be told).
    Warning,
    /// Something was refused or failed.
    Error,
}

impl EventLevel {
    fn as_str(self) -> &'static str {
        match self {
            EventLevel::Info => "info",
            EventLevel::Warning => "warning",
            EventLevel::Error => "error",
        }
    }

    fn parse(text: &str) -> EventLevel {
        match text {
            "warning" => EventLevel::Warning,
            "error" => EventLevel::Error,
            _ => EventLevel::Info,
        }
    }
}

/// An event to record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewEvent {
    /// The workload it concerns.
    pub workload: WorkloadId,
    /// How serious it is.
    pub level: EventLevel,
    /// A short machine-readable reason: `applied`, `refused`, `deleted`, ...
    pub reason: String,
    /// What happened, one line.
    pub message: String,
}

/// A recorded event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// Rises with every event recorded, across workloads.
    pub id: i64,
    /// When it was recorded, RFC 3339 in UTC.
    pub at: String,
    /// How serious it is.
    pub level: EventLevel,
    /// A short machine-readable reason.
    pub reason: String,
    /// What happened.
    pub message: String,
}

/// The last endpoint set published to one block.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Publication {
    /// The block's type.
    #[serde(rename = "type")]
    pub block_type: String,
    /// The block's labels.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub labels: Vec<String>,
    /// The generation it was published with.
    pub generation: u64,
    /// The endpoints, as published.
    pub endpoints: Vec<voodu_plugin_abi::messages::Endpoint>,
    /// When, RFC 3339.
    pub at: String,
}

/// One workload to store in an apply.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkloadInput {
    /// Which workload.
    pub id: WorkloadId,
    /// Its core spec as JSON.
    pub core_spec: Value,
    /// Its plugin blocks, normalised, in source order.
    pub blocks: Vec<NormalisedBlock>,
    /// Where it was declared (`file:line:column`).
    pub source: Option<String>,
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

/// One stored revision of a workload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Revision {
    /// Its number, from 1.
    pub revision: i64,
    /// The hash of its core spec and blocks.
    pub spec_hash: String,
    /// When it was applied, RFC 3339.
    pub applied_at: String,
    /// Its core spec.
    pub core_spec: Value,
    /// Its normalised plugin blocks, in source order.
    pub blocks: Vec<NormalisedBlock>,
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
    pub core_spec: Value,
    /// Its normalised plugin blocks, in source order.
    pub blocks: Vec<NormalisedBlock>,
    /// Where it was last declared.
    pub source: Option<String>,
    /// When it was first applied, RFC 3339.
    pub created_at: String,
    /// When its current revision was applied, RFC 3339.
    pub updated_at: String,
}

/// The SHA-256 (hex) of a core spec and its blocks: equal specs, equal hash.
/// Object keys keep their written order (serde_json's `preserve_order`),
/// which plugins see, so the order is part of the hash.
pub fn spec_hash(core_spec: &Value, blocks: &[NormalisedBlock]) -> String {
    let canonical = serde_json::json!({ "core": core_spec, "blocks": blocks }).to_string();
    Sha256::digest(canonical.as_bytes())
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| {
            i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX)
        })
}

fn rfc3339(ms: i64) -> String {
    let at = UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    humantime::format_rfc3339_seconds(at).to_string()
}

fn to_json<T: Serialize>(value: &T) -> String {
    // Serialising plain data (maps, strings, numbers) into a string cannot fail.
    serde_json::to_string(value).unwrap_or_default()
}

fn from_json<T: for<'de> Deserialize<'de>>(
    text: &str,
    what: &'static str,
) -> Result<T, StoreError> {
    serde_json::from_str(text).map_err(|source| StoreError::Corrupt { what, source })
}

/// Hears every event the store records, after its transaction commits.
pub type EventSink = Box<dyn Fn(&WorkloadId, &Event) + Send>;

/// The state database.
pub struct Store {
    connection: Connection,
    sink: Option<EventSink>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").finish_non_exhaustive()
    }
}

impl Store {
    /// Opens (creating if needed) the database at `path`, switches it to WAL
    /// and brings its schema up to date.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        Store::prepare(Connection::open(path)?)
    }

    /// A private in-memory database, for tests.
    pub fn open_in_memory() -> Result<Store, StoreError> {
        Store::prepare(Connection::open_in_memory()?)
    }

    fn prepare(mut connection: Connection) -> Result<Store, StoreError> {
        connection.pragma_update(None, "journal_mode", "WAL")?;
        connection.pragma_update(None, "synchronous", "NORMAL")?;
        connection.pragma_update(None, "foreign_keys", "ON")?;
        connection.busy_timeout(Duration::from_secs(5))?;
        schema::migrations().to_latest(&mut connection)?;
        Ok(Store {
            connection,
            sink: None,
        })
    }

    /// Sets the function that hears every event recorded from now on, once
    /// its transaction has committed.
    pub fn set_event_sink(&mut self, sink: EventSink) {
        self.sink = Some(sink);
    }

    fn emit(&self, recorded: &[(WorkloadId, Event)]) {
        if let Some(sink) = &self.sink {
            for (workload, event) in recorded {
                sink(workload, event);
            }
        }
    }

    /// The schema version the database is at.
    pub fn schema_version(&self) -> Result<i64, StoreError> {
        Ok(self
            .connection
            .pragma_query_value(None, "user_version", |row| row.get(0))?)
    }

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

    /// Records events, in one transaction.
    pub fn record_events(&mut self, events: &[NewEvent]) -> Result<(), StoreError> {
        let at = now_ms();
        let transaction = self.connection.transaction()?;
        let mut recorded = Vec::with_capacity(events.len());
        for event in events {
            recorded.push(insert_event(&transaction, event, at)?);
        }
        transaction.commit()?;
        self.emit(&recorded);
        Ok(())
    }

    /// The id of the newest event recorded, or 0.
    pub fn last_event_id(&self) -> Result<i64, StoreError> {
        Ok(self
            .connection
            .query_row("SELECT COALESCE(MAX(id), 0) FROM events", [], |row| {
                row.get(0)
            })?)
    }

    /// Events recorded after event `after`, of one workload or all, oldest
    /// first, at most `limit`.
    pub fn events_after(
        &self,
        workload: Option<&WorkloadId>,
        after: i64,
        limit: usize,
    ) -> Result<Vec<(WorkloadId, Event)>, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let mut statement = self.connection.prepare_cached(
            "SELECT id, at_ms, level, reason, message, kind, scope, name FROM events
             WHERE id > ?1 AND (?2 IS NULL OR (kind = ?2 AND scope = ?3 AND name = ?4))
             ORDER BY id LIMIT ?5",
        )?;
        let rows = statement.query_map(
            params![
                after,
                workload.map(|id| id.kind.as_str()),
                workload.map(|id| id.scope.as_str()),
                workload.map(|id| id.name.as_str()),
                limit
            ],
            |row| {
                Ok((
                    Event {
                        id: row.get(0)?,
                        at: rfc3339(row.get(1)?),
                        level: EventLevel::parse(&row.get::<_, String>(2)?),
                        reason: row.get(3)?,
                        message: row.get(4)?,
                    },
                    row.get::<_, String>(5)?,
                    row.get::<_, String>(6)?,
                    row.get::<_, String>(7)?,
                ))
            },
        )?;
        let mut events = Vec::new();
        for row in rows {
            let (event, kind, scope, name) = row?;
            if let Some(kind) = parse_kind_exact(&kind) {
                events.push((WorkloadId::new(kind, scope, name), event));
            }
        }
        Ok(events)
    }

    /// The last `limit` events, of one workload or all, oldest first.
    pub fn recent_events(
        &self,
        workload: Option<&WorkloadId>,
        limit: usize,
    ) -> Result<Vec<(WorkloadId, Event)>, StoreError> {
        let first: i64 = {
            let limit = i64::try_from(limit).unwrap_or(i64::MAX);
            self.connection.query_row(
                "SELECT COALESCE(MIN(id), 1) - 1 FROM (SELECT id FROM events
                 WHERE (?1 IS NULL OR (kind = ?1 AND scope = ?2 AND name = ?3))
                 ORDER BY id DESC LIMIT ?4)",
                params![
                    workload.map(|id| id.kind.as_str()),
                    workload.map(|id| id.scope.as_str()),
                    workload.map(|id| id.name.as_str()),
                    limit
                ],
                |row| row.get(0),
            )?
        };
        self.events_after(workload, first, limit)
    }

    /// One workload as of its current revision.
    pub fn workload(&self, id: &WorkloadId) -> Result<Option<StoredWorkload>, StoreError> {
        let row = self
            .connection
            .query_row(
                "SELECT revision, spec_hash, core_spec, source, created_ms, updated_ms
                 FROM workloads WHERE kind = ?1 AND scope = ?2 AND name = ?3",
                params![id.kind.as_str(), id.scope, id.name],
                |row| {
                    Ok((
                        row.get::<_, i64>(0)?,
                        row.get::<_, String>(1)?,
                        row.get::<_, String>(2)?,
                        row.get::<_, Option<String>>(3)?,
                        row.get::<_, i64>(4)?,
                        row.get::<_, i64>(5)?,
                    ))
                },
            )
            .optional()?;
        let Some((revision, spec_hash, core_spec, source, created_ms, updated_ms)) = row else {
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
        }))
    }

    fn blocks(&self, id: &WorkloadId) -> Result<Vec<NormalisedBlock>, StoreError> {
        let mut statement = self.connection.prepare_cached(
            "SELECT block_type, labels, spec, endpoints FROM blocks
             WHERE kind = ?1 AND scope = ?2 AND name = ?3 ORDER BY position",
        )?;
        let rows = statement.query_map(params![id.kind.as_str(), id.scope, id.name], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, String>(2)?,
                row.get::<_, String>(3)?,
            ))
        })?;
        let mut blocks = Vec::new();
        for row in rows {
            let (block_type, labels, spec, endpoints) = row?;
            blocks.push(NormalisedBlock {
                block_type,
                labels: from_json(&labels, "block labels")?,
                spec: from_json(&spec, "block spec")?,
                endpoints: from_json(&endpoints, "block endpoints")?,
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
    fn workload_ids_where(
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
             core_spec = excluded.core_spec, blocks = excluded.blocks, at_ms = excluded.at_ms",
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
                reason: "deleted".into(),
                message: format!("deleted at revision {}", workload.revision),
            },
            at,
        )?;
        transaction.commit()?;
        self.emit(&[deleted]);
        Ok(Some(workload))
    }

    /// A deletion the reconciler has not finished: the deleted revision's
    /// core spec and blocks.
    pub fn deletion(
        &self,
        id: &WorkloadId,
    ) -> Result<Option<(Value, Vec<NormalisedBlock>)>, StoreError> {
        self.spec_and_blocks(
            "SELECT core_spec, blocks FROM deletions WHERE kind = ?1 AND scope = ?2 AND name = ?3",
            id,
            ("deletion core spec", "deletion blocks"),
        )
    }

    /// Every workload whose deletion is unfinished.
    pub fn deletions(&self) -> Result<Vec<WorkloadId>, StoreError> {
        self.workload_ids_where(
            "SELECT kind, scope, name FROM deletions WHERE ?1 IS NULL ORDER BY at_ms",
            None,
        )
    }

    /// Marks a deletion finished: its replicas are gone and its blocks
    /// forgotten. Its publications go too.
    pub fn finish_deletion(&mut self, id: &WorkloadId) -> Result<(), StoreError> {
        let transaction = self.connection.transaction()?;
        for table in ["deletions", "publications"] {
            transaction.execute(
                &format!("DELETE FROM {table} WHERE kind = ?1 AND scope = ?2 AND name = ?3"),
                params![id.kind.as_str(), id.scope, id.name],
            )?;
        }
        transaction.commit()?;
        Ok(())
    }

    /// The last `limit` events of a workload, oldest first.
    pub fn events(&self, id: &WorkloadId, limit: usize) -> Result<Vec<Event>, StoreError> {
        let mut statement = self.connection.prepare_cached(
            "SELECT id, at_ms, level, reason, message FROM events
             WHERE kind = ?1 AND scope = ?2 AND name = ?3 ORDER BY id DESC LIMIT ?4",
        )?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let mut events = statement
            .query_map(params![id.kind.as_str(), id.scope, id.name, limit], |row| {
                Ok(Event {
                    id: row.get(0)?,
                    at: rfc3339(row.get(1)?),
                    level: EventLevel::parse(&row.get::<_, String>(2)?),
                    reason: row.get(3)?,
                    message: row.get(4)?,
                })
            })?
            .collect::<Result<Vec<_>, _>>()?;
        events.reverse();
        Ok(events)
    }

    /// Records what was last published to one block.
    pub fn record_publication(
        &mut self,
        workload: &WorkloadId,
        block_type: &str,
        labels: &[String],
        generation: u64,
        endpoints: &[voodu_plugin_abi::messages::Endpoint],
    ) -> Result<(), StoreError> {
        self.connection
            .prepare_cached(
                "INSERT INTO publications (kind, scope, name, block_type, labels, generation, endpoints, at_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
                 ON CONFLICT (kind, scope, name, block_type, labels) DO UPDATE SET
                 generation = excluded.generation, endpoints = excluded.endpoints, at_ms = excluded.at_ms",
            )?
            .execute(params![
                workload.kind.as_str(),
                workload.scope,
                workload.name,
                block_type,
                to_json(&labels),
                i64::try_from(generation).unwrap_or(i64::MAX),
                to_json(&endpoints),
                now_ms()
            ])?;
        Ok(())
    }

    /// What was last published to each block of a workload.
    pub fn publications(&self, workload: &WorkloadId) -> Result<Vec<Publication>, StoreError> {
        let mut statement = self.connection.prepare_cached(
            "SELECT block_type, labels, generation, endpoints, at_ms FROM publications
             WHERE kind = ?1 AND scope = ?2 AND name = ?3 ORDER BY block_type, labels",
        )?;
        let rows = statement.query_map(
            params![workload.kind.as_str(), workload.scope, workload.name],
            |row| {
                Ok((
                    row.get::<_, String>(0)?,
                    row.get::<_, String>(1)?,
                    row.get::<_, i64>(2)?,
                    row.get::<_, String>(3)?,
                    row.get::<_, i64>(4)?,
                ))
            },
        )?;
        let mut publications = Vec::new();
        for row in rows {
            let (block_type, labels, generation, endpoints, at_ms) = row?;
            publications.push(Publication {
                block_type,
                labels: from_json(&labels, "publication labels")?,
                generation: u64::try_from(generation).unwrap_or(0),
                endpoints: from_json(&endpoints, "publication endpoints")?,
                at: rfc3339(at_ms),
            });
        }
        Ok(publications)
    }

    /// Forgets what was published to a workload's blocks (it was deleted).
    pub fn clear_publications(&mut self, workload: &WorkloadId) -> Result<(), StoreError> {
        self.connection.execute(
            "DELETE FROM publications WHERE kind = ?1 AND scope = ?2 AND name = ?3",
            params![workload.kind.as_str(), workload.scope, workload.name],
        )?;
        Ok(())
    }

    /// The core spec and blocks of a workload's last revision, deleted or
    /// not.
    pub fn last_revision(
        &self,
        id: &WorkloadId,
    ) -> Result<Option<(Value, Vec<NormalisedBlock>)>, StoreError> {
        self.spec_and_blocks(
            "SELECT core_spec, blocks FROM revisions WHERE kind = ?1 AND scope = ?2 AND name = ?3
             ORDER BY revision DESC LIMIT 1",
            id,
            ("revision core spec", "revision blocks"),
        )
    }

    /// One row of (core spec, blocks) JSON for a workload, parsed; `what`
    /// names the two columns in a corruption error.
    fn spec_and_blocks(
        &self,
        sql: &str,
        id: &WorkloadId,
        what: (&'static str, &'static str),
    ) -> Result<Option<(Value, Vec<NormalisedBlock>)>, StoreError> {
        let row: Option<(String, String)> = self
            .connection
            .query_row(sql, params![id.kind.as_str(), id.scope, id.name], |row| {
                Ok((row.get(0)?, row.get(1)?))
            })
            .optional()?;
        row.map(|(core_spec, blocks)| {
            Ok((from_json(&core_spec, what.0)?, from_json(&blocks, what.1)?))
        })
        .transpose()
    }

    /// Every stored revision of a workload, oldest first (deleted or not).
    pub fn revisions(&self, id: &WorkloadId) -> Result<Vec<Revision>, StoreError> {
        let mut statement = self.connection.prepare_cached(
            "SELECT revision, spec_hash, core_spec, blocks, applied_ms FROM revisions
             WHERE kind = ?1 AND scope = ?2 AND name = ?3 ORDER BY revision",
        )?;
        let rows = statement.query_map(params![id.kind.as_str(), id.scope, id.name], |row| {
            Ok((
                row.get::<_, i64>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, String>(2)?,
                row.get::<_, String>(3)?,
                row.get::<_, i64>(4)?,
            ))
        })?;
        let mut revisions = Vec::new();
        for row in rows {
            let (revision, spec_hash, core_spec, blocks, applied_ms) = row?;
            let core_spec: Value = from_json(&core_spec, "revision core spec")?;
            let blocks: Vec<NormalisedBlock> = from_json(&blocks, "revision blocks")?;
            revisions.push(Revision {
                revision,
                spec_hash,
                applied_at: rfc3339(applied_ms),
                core_spec,
                blocks,
            });
        }
        Ok(revisions)
    }

    /// How many revisions of a workload are stored, deleted or not.
    pub fn revision_count(&self, id: &WorkloadId) -> Result<i64, StoreError> {
        Ok(self.connection.query_row(
            "SELECT COUNT(*) FROM revisions WHERE kind = ?1 AND scope = ?2 AND name = ?3",
            params![id.kind.as_str(), id.scope, id.name],
            |row| row.get(0),
        )?)
    }
}

fn insert_event(
    transaction: &Transaction<'_>,
    event: &NewEvent,
    at: i64,
) -> Result<(WorkloadId, Event), StoreError> {
    transaction
        .prepare_cached(
            "INSERT INTO events (kind, scope, name, at_ms, level, reason, message)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )?
        .execute(params![
            event.workload.kind.as_str(),
            event.workload.scope,
            event.workload.name,
            at,
            event.level.as_str(),
            event.reason,
            event.message
        ])?;
    Ok((
        event.workload.clone(),
        Event {
            id: transaction.last_insert_rowid(),
            at: rfc3339(at),
            level: event.level,
            reason: event.reason.clone(),
            message: event.message.clone(),
        },
    ))
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
                // A workload deleted and applied again continues its revisions.
                let last: i64 = transaction
                    .prepare_cached(
                        "SELECT COALESCE(MAX(revision), 0) FROM revisions
                     WHERE kind = ?1 AND scope = ?2 AND name = ?3",
                    )?
                    .query_row(key, |row| row.get(0))?;
                transaction
                    .prepare_cached(
                        "INSERT INTO workloads (kind, scope, name, revision, spec_hash, core_spec,
                     source, created_ms, updated_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?8)",
                    )?
                    .execute(params![
                        id.kind.as_str(),
                        id.scope,
                        id.name,
                        last + 1,
                        hash,
                        core_spec,
                        workload.source,
                        at
                    ])?;
                StoreChange::Created { revision: last + 1 }
            }
        };
    let revision = match &change {
        StoreChange::Created { revision } | StoreChange::Updated { revision, .. } => *revision,
        StoreChange::Unchanged { revision } => *revision,
    };

    let mut insert_block = transaction.prepare_cached(
        "INSERT INTO blocks (kind, scope, name, position, block_type, labels, spec, endpoints)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
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
            to_json(&block.endpoints)
        ])?;
    }
    transaction
        .prepare_cached(
            "INSERT INTO revisions (kind, scope, name, revision, spec_hash, core_spec, blocks, applied_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        )?
        .execute(params![
            id.kind.as_str(),
            id.scope,
            id.name,
            revision,
            hash,
            core_spec,
            to_json(&workload.blocks),
            at
        ])?;
    let verb = if matches!(change, StoreChange::Created { .. }) {
        "created"
    } else {
        "updated"
    };
    recorded.push(insert_event(
        transaction,
        &NewEvent {
            workload: id.clone(),
            level: EventLevel::Info,
            reason: "applied".into(),
            message: format!("{verb} revision {revision}"),
        },
        at,
    )?);
    Ok(change)
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use voodu_plugin_abi::messages::WorkloadKind;

    fn input(name: &str, replicas: u32, blocks: &[(&str, &[&str])]) -> WorkloadInput {
        WorkloadInput {
            id: WorkloadId::new(WorkloadKind::Deployment, "prod", name),
            core_spec: json!({"image": "esl:1", "replicas": replicas}),
            blocks: blocks
                .iter()
                .map(|(block_type, labels)| NormalisedBlock {
                    block_type: (*block_type).into(),
                    labels: labels.iter().map(|l| (*l).to_owned()).collect(),
                    spec: json!({"port": 8084}),
                    endpoints: json!({"port": 8084, "addressing": "ip"}),
                })
                .collect(),
            source: Some("esl.hcl:1:1".into()),
        }
    }

    #[test]
    fn the_database_is_in_wal_mode_at_the_latest_schema() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("state.db")).unwrap();
        let mode: String = store
            .connection
            .pragma_query_value(None, "journal_mode", |row| row.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
        assert_eq!(store.schema_version().unwrap(), 3);
        drop(store);
        // Reopening an up-to-date database migrates nothing and keeps data.
        assert_eq!(
            Store::open(&dir.path().join("state.db"))
                .unwrap()
                .schema_version()
                .unwrap(),
            3
        );
    }

    #[test]
    fn a_deletion_stays_until_finished_and_a_new_apply_clears_it() {
        let mut store = Store::open_in_memory().unwrap();
        let heard = std::sync::Arc::new(parking_lot::Mutex::new(Vec::new()));
        let sink = heard.clone();
        store.set_event_sink(Box::new(move |id, event| {
            sink.lock().push((id.to_string(), event.reason.clone()))
        }));
        let esl = WorkloadId::new(WorkloadKind::Deployment, "prod", "esl");
        let input = WorkloadInput {
            id: esl.clone(),
            core_spec: serde_json::json!({"image": "esl:1", "replicas": 1}),
            blocks: vec![],
            source: None,
        };
        store.apply(std::slice::from_ref(&input), &[]).unwrap();
        store.delete(&esl).unwrap().unwrap();
        assert_eq!(store.deletions().unwrap(), std::slice::from_ref(&esl));
        let (core, blocks) = store.deletion(&esl).unwrap().unwrap();
        assert_eq!(core["image"], "esl:1");
        assert!(blocks.is_empty());
        store.apply(std::slice::from_ref(&input), &[]).unwrap();
        assert!(store.deletions().unwrap().is_empty());
        store.delete(&esl).unwrap().unwrap();
        store.finish_deletion(&esl).unwrap();
        assert!(store.deletion(&esl).unwrap().is_none());
        // Every event reached the sink once committed, with its workload.
        let reasons: Vec<String> = heard.lock().iter().map(|(_, r)| r.clone()).collect();
        assert_eq!(reasons, ["applied", "deleted", "applied", "deleted"]);
        let after = store.events_after(Some(&esl), 0, 10).unwrap();
        assert_eq!(after.len(), 4);
        assert_eq!(store.recent_events(None, 2).unwrap()[0].1.reason, "applied");
        assert_eq!(store.last_event_id().unwrap(), after[3].1.id);
    }

    #[test]
    fn a_version_1_database_is_migrated_and_keeps_its_workloads() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let mut old = Connection::open(&path).unwrap();
        schema::migrations().to_version(&mut old, 1).unwrap();
        old.execute(
            "INSERT INTO workloads VALUES ('deployment', 'prod', 'esl', 4, 'h', '{}', NULL, 0, 0)",
            [],
        )
        .unwrap();
        drop(old);
        let store = Store::open(&path).unwrap();
        assert_eq!(store.schema_version().unwrap(), 3);
        let esl = store
            .workload(&WorkloadId::new(WorkloadKind::Deployment, "prod", "esl"))
            .unwrap()
            .unwrap();
        assert_eq!(esl.revision, 4);
        assert!(store.publications(&esl.id).unwrap().is_empty());
    }

    #[test]
    fn revisions_rise_only_when_the_spec_changes() {
        let mut store = Store::open_in_memory().unwrap();
        let esl = input("esl", 1, &[("traffik", &["sip"]), ("traffik", &["http"])]);
        assert_eq!(
            store.apply(std::slice::from_ref(&esl), &[]).unwrap(),
            [StoreChange::Created { revision: 1 }]
        );
        assert_eq!(
            store.apply(std::slice::from_ref(&esl), &[]).unwrap(),
            [StoreChange::Unchanged { revision: 1 }]
        );
        let scaled = input("esl", 3, &[("traffik", &["http"])]);
        let changes = store.apply(&[scaled], &[]).unwrap();
        let StoreChange::Updated {
            revision,
            previous_blocks,
        } = &changes[0]
        else {
            panic!("{changes:?}");
        };
        assert_eq!(*revision, 2);
        assert_eq!(previous_blocks.len(), 2);
        let stored = store.workload(&esl.id).unwrap().unwrap();
        assert_eq!(stored.revision, 2);
        assert_eq!(stored.core_spec["replicas"], 3);
        assert_eq!(stored.blocks.len(), 1);
        assert_eq!(store.revision_count(&esl.id).unwrap(), 2);
        let events = store.events(&esl.id, 10).unwrap();
        let messages: Vec<_> = events.iter().map(|e| e.message.as_str()).collect();
        assert_eq!(messages, ["created revision 1", "updated revision 2"]);
    }

    #[test]
    fn blocks_keep_their_order_and_are_found_by_type() {
        let mut store = Store::open_in_memory().unwrap();
        let blocks: &[(&str, &[&str])] =
            &[("traffik", &["b"]), ("haproxy", &[]), ("traffik", &["a"])];
        store
            .apply(&[input("esl", 1, blocks), input("api", 1, &[])], &[])
            .unwrap();
        let stored = store
            .workload(&WorkloadId::new(WorkloadKind::Deployment, "prod", "esl"))
            .unwrap()
            .unwrap();
        let order: Vec<_> = stored
            .blocks
            .iter()
            .map(|b| format!("{}{:?}", b.block_type, b.labels))
            .collect();
        assert_eq!(order, ["traffik[\"b\"]", "haproxy[]", "traffik[\"a\"]"]);
        assert_eq!(
            store.workloads_with_block_type("traffik").unwrap(),
            [WorkloadId::new(WorkloadKind::Deployment, "prod", "esl")]
        );
        assert!(store.workloads_with_block_type("echo").unwrap().is_empty());
        assert_eq!(store.workloads(None).unwrap().len(), 2);
        assert!(store
            .workloads(Some(WorkloadKind::Statefulset))
            .unwrap()
            .is_empty());
    }

    #[test]
    fn delete_removes_the_workload_and_keeps_its_history() {
        let mut store = Store::open_in_memory().unwrap();
        let esl = input("esl", 1, &[("traffik", &[])]);
        store.apply(std::slice::from_ref(&esl), &[]).unwrap();
        let deleted = store.delete(&esl.id).unwrap().unwrap();
        assert_eq!(deleted.blocks.len(), 1);
        assert!(store.workload(&esl.id).unwrap().is_none());
        assert!(store
            .workloads_with_block_type("traffik")
            .unwrap()
            .is_empty());
        assert!(store.delete(&esl.id).unwrap().is_none());
        assert_eq!(
            store.events(&esl.id, 10).unwrap().last().unwrap().reason,
            "deleted"
        );
        // Applying it again continues the revision count.
        assert_eq!(
            store.apply(&[esl], &[]).unwrap(),
            [StoreChange::Created { revision: 2 }]
        );
    }

    #[test]
    fn key_order_is_part_of_the_spec_and_of_its_hash() {
        // Plugins receive keys in the order they were written, so a spec
        // written in another order is another spec.
        let a = spec_hash(&json!({"a": 1, "b": 2}), &[]);
        let b = spec_hash(&serde_json::from_str(r#"{"b": 2, "a": 1}"#).unwrap(), &[]);
        assert_ne!(a, b);
        assert_eq!(
            a,
            spec_hash(&serde_json::from_str(r#"{"a": 1, "b": 2}"#).unwrap(), &[])
        );
        assert_ne!(a, spec_hash(&json!({"a": 1, "b": 3}), &[]));
    }
}
