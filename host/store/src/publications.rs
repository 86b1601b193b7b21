//! The `publications` table: the last endpoint set published to each
//! block, with its generation.

use rusqlite::params;
use serde::{Deserialize, Serialize};
use voodu_model::WorkloadId;

use crate::*;

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
    /// When the block's plugin was told to forget the block, RFC 3339: the
    /// endpoints are then empty, and only the generation counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forgotten_at: Option<String>,
}

impl Store {
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
                 generation = excluded.generation, endpoints = excluded.endpoints, at_ms = excluded.at_ms,
                 forgotten_ms = NULL",
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
            "SELECT block_type, labels, generation, endpoints, at_ms, forgotten_ms FROM publications
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
                    row.get::<_, Option<i64>>(5)?,
                ))
            },
        )?;
        let mut publications = Vec::new();
        for row in rows {
            let (block_type, labels, generation, endpoints, at_ms, forgotten_ms) = row?;
            publications.push(Publication {
                block_type,
                labels: from_json(&labels, "publication labels")?,
                generation: u64::try_from(generation).unwrap_or(0),
                endpoints: from_json(&endpoints, "publication endpoints")?,
                at: rfc3339(at_ms),
                forgotten_at: forgotten_ms.map(rfc3339),
            });
        }
        Ok(publications)
    }

    /// Marks the publication of one block forgotten (its plugin was told
    /// to forget it): its set is emptied, its generation kept. A later
    /// publication to a block of the same identity makes it live again.
    pub fn forget_publication(
        &mut self,
        workload: &WorkloadId,
        block_type: &str,
        labels: &[String],
    ) -> Result<(), StoreError> {
        self.connection
            .prepare_cached(
                "UPDATE publications SET forgotten_ms = ?6, endpoints = '[]'
                 WHERE kind = ?1 AND scope = ?2 AND name = ?3 AND block_type = ?4 AND labels = ?5",
            )?
            .execute(params![
                workload.kind.as_str(),
                workload.scope,
                workload.name,
                block_type,
                to_json(&labels),
                now_ms()
            ])?;
        Ok(())
    }

    /// Forgets what was published to a workload's blocks (it was deleted).
    pub fn clear_publications(&mut self, workload: &WorkloadId) -> Result<(), StoreError> {
        self.connection.execute(
            "DELETE FROM publications WHERE kind = ?1 AND scope = ?2 AND name = ?3",
            params![workload.kind.as_str(), workload.scope, workload.name],
        )?;
        Ok(())
    }
}
