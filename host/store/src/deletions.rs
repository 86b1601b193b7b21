//! The `deletions` table: deletes the reconciler has still to finish.

use rusqlite::params;
use serde_json::Value;
use voodu_model::{NormalisedBlock, WorkloadId};

use crate::*;

impl Store {
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
}
