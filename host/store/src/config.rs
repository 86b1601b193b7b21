//! The `config` table: the variables of voodu's config buckets, set with
//! `vd config` and read into the env of the workloads that take them; and
//! the `config_holds` table: the replicas a change made with
//! `--no-restart` keeps ([`ConfigHold`]).

use rusqlite::params;
use serde::{Deserialize, Serialize};
use voodu_model::config::{Bucket, BucketName};
use voodu_model::WorkloadId;

use crate::sealing::{KeyId, Reseal, SecretKeys, StoredValue};

use crate::events::insert_event;
use crate::*;

impl Store {
    /// The keys secrets are sealed and opened with, from now on.
    pub fn set_secret_keys(&mut self, keys: Option<std::sync::Arc<SecretKeys>>) {
        self.secrets = keys;
    }

    /// A bucket's variables; empty when it has none. Sealed secrets are
    /// opened.
    pub fn config_bucket(&self, bucket: &BucketName) -> Result<Bucket, StoreError> {
        self.stored_bucket(bucket)?
            .into_iter()
            .map(|(key, stored)| {
                let value = SecretKeys::open(self.secrets.as_deref(), bucket, &key, stored)?;
                Ok((key, value))
            })
            .collect()
    }

    /// A bucket's variables as stored.
    fn stored_bucket(&self, bucket: &BucketName) -> Result<Vec<(String, StoredValue)>, StoreError> {
        let mut statement = self.connection.prepare_cached(
            "SELECT key, value, secret, sealed_with FROM config WHERE bucket = ?1 ORDER BY key",
        )?;
        let rows = statement.query_map(params![bucket.to_string()], |row| {
            Ok((
                row.get::<_, String>(0)?,
                StoredValue {
                    value: row.get(1)?,
                    secret: row.get::<_, i64>(2)? != 0,
                    sealed_with: row.get::<_, Option<String>>(3)?.map(KeyId::stored),
                },
            ))
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Seals anew, under the first key, every secret `reseal` wants, in
    /// one transaction with no event (the values do not change); how many.
    pub fn reseal_secrets(&mut self, reseal: Reseal) -> Result<usize, StoreError> {
        let Some(keys) = self.secrets.clone() else {
            return Ok(0);
        };
        let mut changes = Vec::new();
        for bucket in self.config_buckets()? {
            for (key, stored) in self.stored_bucket(&bucket)? {
                if reseal.wants(&keys, &stored) {
                    let value = SecretKeys::open(Some(&keys), &bucket, &key, stored)?;
                    let sealed = SecretKeys::seal(Some(&keys), &bucket, &key, &value)?;
                    changes.push((bucket.to_string(), key, sealed));
                }
            }
        }
        let transaction = self.connection.transaction()?;
        for (bucket, key, sealed) in &changes {
            transaction
                .prepare_cached(
                    "UPDATE config SET value = ?3, sealed_with = ?4 WHERE bucket = ?1 AND key = ?2",
                )?
                .execute(params![
                    bucket,
                    key,
                    sealed.value,
                    sealed.sealed_with.as_ref().map(KeyId::as_str)
                ])?;
        }
        transaction.commit()?;
        if !changes.is_empty() {
            // The write-ahead log still holds the pages as they were: fold
            // it into the database and empty it.
            self.connection
                .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
        }
        Ok(changes.len())
    }

    /// Every bucket that has a variable, in name order.
    pub fn config_buckets(&self) -> Result<Vec<BucketName>, StoreError> {
        let mut statement = self
            .connection
            .prepare_cached("SELECT DISTINCT bucket FROM config ORDER BY bucket")?;
        let names: Vec<String> = statement
            .query_map([], |row| row.get(0))?
            .collect::<Result<_, _>>()?;
        names
            .iter()
            .map(|name| {
                let quoted = serde_json::Value::String(name.clone()).to_string();
                from_json(&quoted, "config bucket name")
            })
            .collect()
    }

    /// The holds kept for `workload`, current or not (see
    /// [`ConfigHold::holds_for`]).
    pub fn config_holds(&self, workload: &WorkloadId) -> Result<Vec<ConfigHold>, StoreError> {
        let mut statement = self.connection.prepare_cached(
            "SELECT hash, revision, spec_hash, restarted_ms FROM config_holds
             WHERE kind = ?1 AND scope = ?2 AND name = ?3 ORDER BY hash",
        )?;
        let rows = statement.query_map(
            params![workload.kind.as_str(), workload.scope, workload.name],
            |row| {
                Ok(ConfigHold {
                    workload: workload.clone(),
                    hash: row.get(0)?,
                    revision: row.get(1)?,
                    spec_hash: row.get(2)?,
                    restarted_ms: row.get(3)?,
                })
            },
        )?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Sets `set` and removes `unset` in one bucket, with `events`, and
    /// changes the holds as `holds` says, in one transaction.
    pub fn change_config(
        &mut self,
        bucket: &BucketName,
        set: &Bucket,
        unset: &[String],
        events: &[NewEvent],
        holds: &HoldChange,
    ) -> Result<(), StoreError> {
        let at = now_ms();
        let name = bucket.to_string();
        let sealed = set
            .iter()
            .map(|(key, value)| {
                let stored = SecretKeys::seal(self.secrets.as_deref(), bucket, key, value)?;
                Ok((key, stored))
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        let transaction = self.connection.transaction()?;
        for (key, stored) in &sealed {
            transaction
                .prepare_cached(
                    "INSERT INTO config (bucket, key, value, secret, sealed_with, updated_ms)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                     ON CONFLICT (bucket, key) DO UPDATE
                     SET value = excluded.value, secret = excluded.secret,
                         sealed_with = excluded.sealed_with,
                         updated_ms = excluded.updated_ms",
                )?
                .execute(params![
                    name,
                    key,
                    stored.value,
                    i64::from(stored.secret),
                    stored.sealed_with.as_ref().map(KeyId::as_str),
                    at
                ])?;
        }
        for key in unset {
            transaction
                .prepare_cached("DELETE FROM config WHERE bucket = ?1 AND key = ?2")?
                .execute(params![name, key])?;
        }
        match holds {
            HoldChange::Keep(kept) => {
                for hold in kept {
                    let id = &hold.workload;
                    transaction
                        .prepare_cached(
                            "INSERT OR REPLACE INTO config_holds
                             (kind, scope, name, hash, revision, spec_hash, restarted_ms)
                             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                        )?
                        .execute(params![
                            id.kind.as_str(),
                            id.scope,
                            id.name,
                            hold.hash,
                            hold.revision,
                            hold.spec_hash,
                            hold.restarted_ms
                        ])?;
                }
            }
            HoldChange::Release(workloads) => {
                for id in workloads {
                    transaction
                        .prepare_cached(
                            "DELETE FROM config_holds WHERE kind = ?1 AND scope = ?2 AND name = ?3",
                        )?
                        .execute(params![id.kind.as_str(), id.scope, id.name])?;
                }
            }
        }
        let mut recorded = Vec::with_capacity(events.len());
        for event in events {
            recorded.push(insert_event(&transaction, event, at)?);
        }
        transaction.commit()?;
        self.emit(&recorded);
        Ok(())
    }
}

/// Replicas kept through a config change made with `--no-restart`: those
/// of `workload` whose container hash is `hash` (the env they run with)
/// count as current, so no pass replaces them for the new env, while the
/// workload stays at the revision, spec and restart mark the hold was
/// taken at. Its next apply that changes it, `vd rollback` or `vd restart`
/// ends it; a change made without `--no-restart` releases it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigHold {
    /// The workload.
    pub workload: WorkloadId,
    /// The container hash its replicas keep.
    pub hash: String,
    /// Its revision when the hold was taken.
    pub revision: i64,
    /// Its spec hash then.
    pub spec_hash: String,
    /// Its restart mark then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restarted_ms: Option<i64>,
}

impl ConfigHold {
    /// The hold of `workload` as stored now, for replicas of `hash`.
    pub fn of(workload: &crate::StoredWorkload, hash: String) -> ConfigHold {
        ConfigHold {
            workload: workload.id.clone(),
            hash,
            revision: workload.revision,
            spec_hash: workload.spec_hash.clone(),
            restarted_ms: workload.restarted_ms,
        }
    }

    /// Whether it still holds for `workload` as stored: no apply, rollback
    /// or restart since it was taken.
    pub fn holds_for(&self, workload: &crate::StoredWorkload) -> bool {
        self.revision == workload.revision
            && self.spec_hash == workload.spec_hash
            && self.restarted_ms == workload.restarted_ms
    }
}

/// What a config change does to the holds of the workloads that take the
/// bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HoldChange {
    /// `--no-restart`: these holds are kept beside any already held.
    Keep(Vec<ConfigHold>),
    /// A change that rolls: these workloads' holds end, so every replica
    /// takes the new env.
    Release(Vec<WorkloadId>),
}
