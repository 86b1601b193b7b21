//! One async lock per key, made on first use: the passes and tasks that
//! work on one key (a workload's release, an image's build) take turns,
//! and those on other keys never wait for them.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Arc;

use parking_lot::Mutex;

/// The locks, by key; a lock is never removed (there is one per workload
/// or image tag this node has worked on).
#[derive(Debug)]
pub(crate) struct KeyedLocks<K> {
    by_key: Mutex<HashMap<K, Arc<tokio::sync::Mutex<()>>>>,
}

impl<K> Default for KeyedLocks<K> {
    fn default() -> Self {
        KeyedLocks {
            by_key: Mutex::new(HashMap::new()),
        }
    }
}

impl<K: Eq + Hash + Clone> KeyedLocks<K> {
    /// The lock of `key`, to hold across the work on it.
    pub(crate) fn of(&self, key: &K) -> Arc<tokio::sync::Mutex<()>> {
        self.by_key.lock().entry(key.clone()).or_default().clone()
    }
}
