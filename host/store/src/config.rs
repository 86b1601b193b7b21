//! The `config` table: the variables of voodu's config buckets, set with
//! `vd config` and read into the env of the workloads that take them.

use rusqlite::params;
use voodu_model::config::{Bucket, BucketName, ConfigValue};

use crate::events::insert_event;
use crate::*;

impl Store {
    /// A bucket's variables; empty when it has none.
    pub fn config_bucket(&self, bucket: &BucketName) -> Result<Bucket, StoreError> {
        let mut statement = self.connection.prepare_cached(
            "SELECT key, value, secret FROM config WHERE bucket = ?1 ORDER BY key",
        )?;
        let rows = statement.query_map(params![bucket.to_string()], |row| {
            Ok((
                row.get::<_, String>(0)?,
                ConfigValue {
                    value: row.get(1)?,
                    secret: row.get::<_, i64>(2)? != 0,
                },
            ))
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
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

    /// Sets `set` and removes `unset` in one bucket, with `events`, in one
    /// transaction.
    pub fn change_config(
        &mut self,
        bucket: &BucketName,
        set: &Bucket,
        unset: &[String],
        events: &[NewEvent],
    ) -> Result<(), StoreError> {
        let at = now_ms();
        let name = bucket.to_string();
        let transaction = self.connection.transaction()?;
        for (key, value) in set {
            transaction
                .prepare_cached(
                    "INSERT INTO config (bucket, key, value, secret, updated_ms)
                     VALUES (?1, ?2, ?3, ?4, ?5)
                     ON CONFLICT (bucket, key) DO UPDATE
                     SET value = excluded.value, secret = excluded.secret,
                         updated_ms = excluded.updated_ms",
                )?
                .execute(params![name, key, value.value, i64::from(value.secret), at])?;
        }
        for key in unset {
            transaction
                .prepare_cached("DELETE FROM config WHERE bucket = ?1 AND key = ?2")?
                .execute(params![name, key])?;
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
