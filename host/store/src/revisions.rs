//! The `revisions` table: every revision ever applied.

use rusqlite::{params, OptionalExtension};
use serde::{Deserialize, Serialize};
use voodu_model::{NormalisedBlock, WorkloadId};

use crate::*;

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
    pub core_spec: CoreSpec,
    /// Its normalised plugin blocks, in source order.
    pub blocks: Vec<NormalisedBlock>,
    /// Whether it applied the workload again after a delete.
    #[serde(default)]
    pub recreated: bool,
}

impl Store {
    /// The core spec and blocks of a workload's last revision, deleted or
    /// not.
    pub fn last_revision(
        &self,
        id: &WorkloadId,
    ) -> Result<Option<(CoreSpec, Vec<NormalisedBlock>)>, StoreError> {
        self.spec_and_blocks(
            "SELECT core_spec, blocks FROM revisions WHERE kind = ?1 AND scope = ?2 AND name = ?3
             ORDER BY revision DESC LIMIT 1",
            id,
            ("revision core spec", "revision blocks"),
        )
    }

    /// One row of (core spec, blocks) JSON for a workload, parsed; `what`
    /// names the two columns in a corruption error.
    pub(crate) fn spec_and_blocks(
        &self,
        sql: &str,
        id: &WorkloadId,
        what: (&'static str, &'static str),
    ) -> Result<Option<(CoreSpec, Vec<NormalisedBlock>)>, StoreError> {
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
            "SELECT revision, spec_hash, core_spec, blocks, applied_ms, recreated FROM revisions
             WHERE kind = ?1 AND scope = ?2 AND name = ?3 ORDER BY revision",
        )?;
        let rows = statement.query_map(params![id.kind.as_str(), id.scope, id.name], |row| {
            Ok((
                row.get::<_, i64>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, String>(2)?,
                row.get::<_, String>(3)?,
                row.get::<_, i64>(4)?,
                row.get::<_, bool>(5)?,
            ))
        })?;
        let mut revisions = Vec::new();
        for row in rows {
            let (revision, spec_hash, core_spec, blocks, applied_ms, recreated) = row?;
            let core_spec: CoreSpec = from_json(&core_spec, "revision core spec")?;
            let blocks: Vec<NormalisedBlock> = from_json(&blocks, "revision blocks")?;
            revisions.push(Revision {
                revision,
                spec_hash,
                applied_at: rfc3339(applied_ms),
                core_spec,
                blocks,
                recreated,
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
