//! The drain round across a cluster's nodes: before a node removes a
//! replica, every live node's plugins drain it, not only its own.
//!
//! | key | value |
//! |---|---|
//! | `drains/<id>` | a drain asked (JSON: the workload, the replica, the budget, who asks), held by the asking node's lease |
//! | `drain-answers/<id>/<node>` | that node's answer (JSON), held by its lease |
//!
//! The asking node writes the ask, each other live node drains the replica
//! with its own plugins and writes its answer, and the asking node waits
//! for every answer within the budget, then removes the round. A round
//! whose asker died vanishes with its lease. The shapes of the ask and of
//! an answer are the caller's: the store keeps them as JSON.

use std::collections::BTreeMap;

use etcd_client::{DeleteOptions, GetOptions};
use serde::de::DeserializeOwned;
use serde::Serialize;
use voodu_store::StoreError;

use crate::EtcdStore;

impl EtcdStore {
    /// Stores a drain ask under `lease`; its id.
    pub fn ask_drain<T: Serialize>(&self, lease: i64, ask: &T) -> Result<String, StoreError> {
        let id = format!("{:016x}", fastrand::u64(..));
        self.put_leased(self.keys.drain(&id), crate::to_json(ask), lease)?;
        Ok(id)
    }

    /// Every drain ask stored now, by id.
    pub fn drain_asks<T: DeserializeOwned>(&self) -> Result<BTreeMap<String, T>, StoreError> {
        let mut asks = BTreeMap::new();
        for kv in self.range(self.keys.drains(), GetOptions::new())? {
            let Some(id) = last_part(kv.key()) else {
                continue;
            };
            asks.insert(id, crate::from_json(&kv, "drain ask")?);
        }
        Ok(asks)
    }

    /// Stores node `node`'s answer to drain `id`, under its `lease`.
    pub fn answer_drain<T: Serialize>(
        &self,
        id: &str,
        node: &str,
        lease: i64,
        answer: &T,
    ) -> Result<(), StoreError> {
        self.put_leased(
            self.keys.drain_answer(id, node),
            crate::to_json(answer),
            lease,
        )
    }

    /// The answers to drain `id` so far, by node.
    pub fn drain_answers<T: DeserializeOwned>(
        &self,
        id: &str,
    ) -> Result<BTreeMap<String, T>, StoreError> {
        let mut answers = BTreeMap::new();
        for kv in self.range(self.keys.drain_answers(id), GetOptions::new())? {
            let Some(node) = last_part(kv.key()) else {
                continue;
            };
            answers.insert(node, crate::from_json(&kv, "drain answer")?);
        }
        Ok(answers)
    }

    /// Removes drain `id`'s ask and answers.
    pub fn close_drain(&self, id: &str) -> Result<(), StoreError> {
        let (ask, answers) = (self.keys.drain(id), self.keys.drain_answers(id));
        self.call(move |mut client| {
            let (ask, answers) = (ask.clone(), answers.clone());
            async move {
                client.delete(ask, None).await?;
                client
                    .delete(answers, Some(DeleteOptions::new().with_prefix()))
                    .await
            }
        })?;
        Ok(())
    }
}

/// The last `/`-separated part of a key.
fn last_part(key: &[u8]) -> Option<String> {
    std::str::from_utf8(key)
        .ok()?
        .rsplit('/')
        .next()
        .map(str::to_owned)
}
