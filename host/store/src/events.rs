//! The `events` table: every workload's event log, and the sink that
//! hears each event after its commit.

use rusqlite::{params, Transaction};
use serde::{Deserialize, Serialize};
use voodu_model::{parse_kind_exact, EventLevel, EventReason, WorkloadId};

use crate::*;

/// An event to record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewEvent {
    /// The workload it concerns.
    pub workload: WorkloadId,
    /// How serious it is.
    pub level: EventLevel,
    /// Why it was recorded: `applied`, `deleted`, `publish-failed`, ...
    pub reason: EventReason,
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
    /// Why it was recorded.
    pub reason: EventReason,
    /// What happened.
    pub message: String,
    /// In a cluster, the node that recorded it; absent on one host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

/// The reason in column `index`: any word, a known one typed (parsing
/// never fails: an unknown word is kept as [`EventReason::Other`]).
fn reason_column(row: &rusqlite::Row<'_>, index: usize) -> rusqlite::Result<EventReason> {
    let word: String = row.get(index)?;
    Ok(word.parse().unwrap_or(EventReason::Other(word)))
}

/// The most events kept per workload; older ones are pruned as new ones
/// are recorded, so the event log cannot grow without bound.
pub const MAX_EVENTS_PER_WORKLOAD: i64 = 1000;

pub(crate) fn insert_event(
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
            event.reason.as_str(),
            event.message
        ])?;
    transaction
        .prepare_cached(
            "DELETE FROM events WHERE kind = ?1 AND scope = ?2 AND name = ?3 AND id <
               (SELECT id FROM events WHERE kind = ?1 AND scope = ?2 AND name = ?3
                ORDER BY id DESC LIMIT 1 OFFSET ?4)",
        )?
        .execute(params![
            event.workload.kind.as_str(),
            event.workload.scope,
            event.workload.name,
            MAX_EVENTS_PER_WORKLOAD - 1
        ])?;
    Ok((
        event.workload.clone(),
        Event {
            id: transaction.last_insert_rowid(),
            at: rfc3339(at),
            level: event.level,
            reason: event.reason.clone(),
            message: event.message.clone(),
            node: None,
        },
    ))
}

/// Reads an event level column; a word the store never writes is a
/// corrupt row, never silently `info`.
fn level_column(row: &rusqlite::Row<'_>, index: usize) -> rusqlite::Result<EventLevel> {
    let text: String = row.get(index)?;
    EventLevel::parse(&text).ok_or_else(|| {
        rusqlite::Error::FromSqlConversionFailure(
            index,
            rusqlite::types::Type::Text,
            format!("{text:?} is not an event level").into(),
        )
    })
}

/// Hears every event the store records, after its transaction commits.
pub type EventSink = Box<dyn Fn(&WorkloadId, &Event) + Send>;

impl Store {
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
                        level: level_column(row, 2)?,
                        reason: reason_column(row, 3)?,
                        message: row.get(4)?,
                        node: None,
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
                    level: level_column(row, 2)?,
                    reason: reason_column(row, 3)?,
                    message: row.get(4)?,
                    node: None,
                })
            })?
            .collect::<Result<Vec<_>, _>>()?;
        events.reverse();
        Ok(events)
    }
}
