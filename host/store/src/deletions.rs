//! The `deletions` table: deletes the reconciler has still to finish, and
//! the tombstones of finished ones (when each workload was deleted, so that
//! only containers made before it are ever swept).

use rusqlite::{params, OptionalExtension};
use voodu_model::{NormalisedBlock, WorkloadId};

use crate::*;

impl Store {
    /// A deletion the reconciler has not finished: the deleted revision's
    /// core spec and blocks.
    pub fn deletion(
        &self,
        id: &WorkloadId,
    ) -> Result<Option<(CoreSpec, Vec<NormalisedBlock>)>, StoreError> {
        self.spec_and_blocks(
            "SELECT core_spec, blocks FROM deletions
             WHERE kind = ?1 AND scope = ?2 AND name = ?3 AND finished_ms IS NULL",
            id,
            ("deletion core spec", "deletion blocks"),
        )
    }

    /// Every workload whose deletion is unfinished.
    pub fn deletions(&self) -> Result<Vec<WorkloadId>, StoreError> {
        self.workload_ids_where(
            "SELECT kind, scope, name FROM deletions
             WHERE finished_ms IS NULL AND ?1 IS NULL ORDER BY at_ms",
            None,
        )
    }

    /// The workload's last deletion, finished or not, while it is not
    /// applied again: when it was deleted, and with what.
    pub fn tombstone(&self, id: &WorkloadId) -> Result<Option<Tombstone>, StoreError> {
        let row: Option<(String, String, i64, Option<i64>)> = self
            .connection
            .prepare_cached(
                "SELECT core_spec, blocks, at_ms, finished_ms FROM deletions
                 WHERE kind = ?1 AND scope = ?2 AND name = ?3",
            )?
            .query_row(params![id.kind.as_str(), id.scope, id.name], |row| {
                Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
            })
            .optional()?;
        row.map(|(core_spec, blocks, deleted_ms, finished_ms)| {
            Ok(Tombstone {
                core_spec: from_json(&core_spec, "deletion core spec")?,
                blocks: from_json(&blocks, "deletion blocks")?,
                deleted_ms,
                finished: finished_ms.is_some(),
            })
        })
        .transpose()
    }

    /// Marks a deletion finished: its replicas are gone and its blocks
    /// forgotten. Its publications go; its tombstone stays.
    pub fn finish_deletion(&mut self, id: &WorkloadId) -> Result<(), StoreError> {
        let transaction = self.connection.transaction()?;
        let key = params![id.kind.as_str(), id.scope, id.name];
        transaction.execute(
            "UPDATE deletions SET finished_ms = ?4
             WHERE kind = ?1 AND scope = ?2 AND name = ?3 AND finished_ms IS NULL",
            params![id.kind.as_str(), id.scope, id.name, now_ms()],
        )?;
        transaction.execute(
            "DELETE FROM publications WHERE kind = ?1 AND scope = ?2 AND name = ?3",
            key,
        )?;
        // Its plugins have forgotten its blocks: what they claimed is free
        // (unless it was applied again meanwhile, which claimed anew).
        transaction.execute(
            "DELETE FROM claims WHERE kind = ?1 AND scope = ?2 AND name = ?3
             AND NOT EXISTS (SELECT 1 FROM workloads w
                             WHERE w.kind = ?1 AND w.scope = ?2 AND w.name = ?3)",
            key,
        )?;
        transaction.commit()?;
        Ok(())
    }
}

/// A workload's last deletion, kept after it is finished.
#[derive(Debug, Clone, PartialEq)]
pub struct Tombstone {
    /// The deleted revision's core spec.
    pub core_spec: CoreSpec,
    /// The deleted revision's blocks.
    pub blocks: Vec<NormalisedBlock>,
    /// When it was deleted, in Unix milliseconds: only containers made by
    /// then are the deleted workload's.
    pub deleted_ms: i64,
    /// Whether its replicas are gone and its blocks forgotten.
    pub finished: bool,
}
