//! Plugins installed cluster-wide: `vd plugins:install` on a node stores
//! the file in etcd, and every node that starts fetches it, checks its
//! SHA-256 and loads it, so a node that takes a cluster's workloads over
//! has their plugins too.
//!
//! | key | value |
//! |---|---|
//! | `plugin-records/<name>` | [`PluginRecord`] (JSON): version, SHA-256, size, chunk count |
//! | `plugin-chunks/<name>/<sha256>/<index, 6 digits>` | the file, in chunks under etcd's request limit, each read on its own (a range of them would pass gRPC's message limit) |
//! | `plugin-settings/<name>` | the plugin-wide settings (a JSON object) every node hands its instance; absent for none |
//!
//! The chunks are written first, under the file's hash, and the record
//! last: a node never sees a record whose chunks are not all there, and a
//! replacement never overwrites the chunks of the version it replaces
//! until its record is in place.

use etcd_client::{DeleteOptions, GetOptions, TxnOp};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use voodu_model::signing::PluginSignature;
use voodu_store::StoreError;

use crate::{cluster, from_json, to_json, EtcdStore, Read};

/// The largest chunk of a plugin file in one etcd request (etcd takes
/// 1.5 MiB by default).
const CHUNK_BYTES: usize = 512 * 1024;

/// A plugin installed cluster-wide.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginRecord {
    /// Its name.
    pub name: String,
    /// Its version.
    pub version: String,
    /// The SHA-256 of its file, hex.
    pub sha256: String,
    /// The file's size in bytes.
    pub size: u64,
    /// How many chunks it is stored in.
    pub chunks: u32,
    /// An operator's signature over a statement of this record
    /// (`voodu_model::signing`), once signed: nodes started with
    /// `--trust-key` load only a record a trusted key signed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<PluginSignature>,
    /// It was removed (`plugins:remove`): the record stays, without its
    /// file, so nodes that trust operators' keys unload it only once its
    /// removal is signed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub removed: bool,
}

impl EtcdStore {
    /// Stores a plugin's file for every node: its chunks, then its record.
    pub fn put_plugin(
        &self,
        name: &str,
        version: &str,
        file: &[u8],
    ) -> Result<PluginRecord, StoreError> {
        let sha256 = hex::encode(Sha256::digest(file));
        let chunks_prefix = self.keys.plugin_chunks(name, &sha256);
        let mut count = 0u32;
        for (index, chunk) in file.chunks(CHUNK_BYTES).enumerate() {
            let key = format!("{chunks_prefix}{index:06}");
            let value = chunk.to_vec();
            self.call(move |mut client| {
                let (key, value) = (key.clone(), value.clone());
                async move { client.put(key, value, None).await }
            })?;
            count += 1;
        }
        let record = PluginRecord {
            name: name.to_owned(),
            version: version.to_owned(),
            sha256: sha256.clone(),
            size: file.len() as u64,
            chunks: count,
            signature: None,
            removed: false,
        };
        let operations = vec![TxnOp::put(
            self.keys.plugin_record(name),
            to_json(&record),
            None,
        )];
        self.commit(Read::new(), operations)?;
        // The chunks of versions it replaced go.
        for kv in self.range(
            self.keys.plugin_chunk_sets(name),
            GetOptions::new().with_keys_only(),
        )? {
            let key = String::from_utf8_lossy(kv.key()).into_owned();
            if !key.starts_with(&chunks_prefix) {
                self.call(move |mut client| {
                    let key = key.clone();
                    async move { client.delete(key, None).await }
                })?;
            }
        }
        Ok(record)
    }

    /// Puts `signature` on the record of `signed`'s plugin, if the record
    /// is still the one `signed` was read as (its file, version and
    /// state: a record replaced or removed meanwhile is not signed by a
    /// statement of the one before); `false` when it is not.
    pub fn sign_plugin(
        &self,
        signed: &PluginRecord,
        signature: &PluginSignature,
    ) -> Result<bool, StoreError> {
        let key = self.keys.plugin_record(&signed.name);
        let Some(kv) = self.get(key.clone())? else {
            return Ok(false);
        };
        let mut record: PluginRecord = from_json(&kv, "plugin record")?;
        if record.sha256 != signed.sha256
            || record.version != signed.version
            || record.removed != signed.removed
        {
            return Ok(false);
        }
        record.signature = Some(signature.clone());
        let mut read = Read::new();
        read.saw(&key, Some(&kv));
        self.commit(read, vec![TxnOp::put(key, to_json(&record), None)])
    }

    /// Every plugin installed cluster-wide, by name.
    pub fn plugin_records(&self) -> Result<Vec<PluginRecord>, StoreError> {
        let mut records = self
            .range(self.keys.plugin_records(), GetOptions::new())?
            .iter()
            .map(|kv| from_json::<PluginRecord>(kv, "plugin record"))
            .collect::<Result<Vec<_>, _>>()?;
        records.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(records)
    }

    /// A plugin's file, checked against its record's SHA-256.
    pub fn plugin_file(&self, record: &PluginRecord) -> Result<Vec<u8>, StoreError> {
        let prefix = self.keys.plugin_chunks(&record.name, &record.sha256);
        let mut file = Vec::with_capacity(usize::try_from(record.size).unwrap_or(0));
        let mut found = 0;
        for index in 0..record.chunks {
            if let Some(chunk) = self.get(format!("{prefix}{index:06}"))? {
                file.extend_from_slice(chunk.value());
                found += 1;
            }
        }
        let sha256 = hex::encode(Sha256::digest(&file));
        if found != record.chunks || sha256 != record.sha256 {
            return Err(cluster(format!(
                "the stored file of plugin {} does not match its record ({found} of {} chunks, SHA-256 {sha256}, not {}) — install it again",
                record.name, record.chunks, record.sha256
            )));
        }
        Ok(file)
    }

    /// Removes a plugin from the cluster: its record becomes its removal
    /// (unsigned), then its chunks go. The removal, `None` when the
    /// cluster had no such plugin.
    pub fn remove_plugin(&self, name: &str) -> Result<Option<PluginRecord>, StoreError> {
        let key = self.keys.plugin_record(name);
        let Some(kv) = self.get(key.clone())? else {
            return Ok(None);
        };
        let mut record: PluginRecord = from_json(&kv, "plugin record")?;
        record.removed = true;
        record.signature = None;
        record.size = 0;
        record.chunks = 0;
        let mut read = Read::new();
        read.saw(&key, Some(&kv));
        if !self.commit(read, vec![TxnOp::put(key, to_json(&record), None)])? {
            return Err(cluster(format!(
                "plugin {name} was installed again while it was removed — run plugins:remove again"
            )));
        }
        let chunks = self.keys.plugin_chunk_sets(name);
        self.call(move |mut client| {
            let chunks = chunks.clone();
            async move {
                client
                    .delete(chunks, Some(DeleteOptions::new().with_prefix()))
                    .await
            }
        })?;
        Ok(Some(record))
    }

    /// Stores plugin `name`'s settings for every node; `{}` removes them.
    pub fn put_plugin_settings(
        &self,
        name: &str,
        settings: &serde_json::Value,
    ) -> Result<(), StoreError> {
        let key = self.keys.plugin_settings(name);
        let operation = if settings.as_object().is_some_and(|fields| fields.is_empty()) {
            TxnOp::delete(key, None)
        } else {
            TxnOp::put(key, to_json(settings), None)
        };
        self.commit(Read::new(), vec![operation]).map(|_| ())
    }

    /// Every plugin's settings stored for the cluster, by name.
    pub fn plugin_settings(
        &self,
    ) -> Result<std::collections::BTreeMap<String, serde_json::Value>, StoreError> {
        let prefix = self.keys.all_plugin_settings();
        self.range(prefix.clone(), GetOptions::new())?
            .iter()
            .map(|kv| {
                let name = String::from_utf8_lossy(kv.key())
                    .trim_start_matches(&prefix)
                    .to_owned();
                Ok((name, from_json::<serde_json::Value>(kv, "plugin settings")?))
            })
            .collect()
    }
}
