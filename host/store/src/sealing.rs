//! Secrets sealed at rest: a config variable set with `--secret` is stored
//! encrypted (ChaCha20-Poly1305, a fresh 96-bit nonce each time) under the
//! controller's secrets key, in SQLite and in etcd alike, with the key's id
//! beside it; `etcdctl get` or a copy of `state.db` shows ciphertext. The
//! ciphertext is bound to its place (bucket and variable), so a value
//! moved to another variable does not open.
//!
//! A controller is given its keys (`--secrets-key FILE`, repeatable): the
//! first seals, every one opens what it sealed. A second key is added by
//! starting with the new one first and the old one after, then
//! `vd config rotate-key` seals every value anew under the first, after
//! which the old one may go. Values stored before a key was given are
//! sealed on the first start with one.
//!
//! Both stores call [`SecretKeys::seal`] and [`SecretKeys::open`] at the
//! edge of their config tables, so the rest of the controller only ever
//! sees a [`ConfigValue`]'s plain value.

use std::path::{Path, PathBuf};

use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};
use sha2::{Digest, Sha256};
use voodu_model::config::{BucketName, ConfigValue};

use crate::StoreError;

/// A key's length: 256 bits.
pub const KEY_BYTES: usize = 32;

/// A nonce's length: 96 bits.
const NONCE_BYTES: usize = 12;

/// A secrets key's id: the first 16 hex digits of a SHA-256 of the key
/// (never the key itself), stored beside each value it sealed.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KeyId(String);

impl KeyId {
    /// The id as stored.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// An id as read from the store.
    pub fn stored(id: String) -> KeyId {
        KeyId(id)
    }
}

impl std::fmt::Display for KeyId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Why a secrets key file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SecretKeyError {
    /// It cannot be read.
    #[error("cannot read the secrets key {path}: {source}")]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// Others may read it.
    #[error("the secrets key {path} may be read by others (mode {mode:o}) — chmod 600 {path}")]
    Open {
        /// The file.
        path: PathBuf,
        /// Its mode bits.
        mode: u32,
    },
    /// It holds no key.
    #[error("{path} is not a secrets key (64 hex digits, as `vd keys new secrets FILE` writes one): {reason}")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// Two files hold the same key.
    #[error("{path} holds the same key ({id}) as a --secrets-key given before it")]
    Repeated {
        /// The file.
        path: PathBuf,
        /// The key's id.
        id: KeyId,
    },
}

/// Why a sealed secret cannot be opened.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// It is sealed under a key this controller was not given.
    #[error("config bucket {bucket}: {variable} is sealed under secrets key {key}, which this controller was not given (it has {}) — start it with --secrets-key naming that key's file too", if .known.is_empty() { "none".to_owned() } else { .known.join(", ") })]
    KeyMissing {
        /// The bucket.
        bucket: String,
        /// The variable.
        variable: String,
        /// The key's id.
        key: String,
        /// The ids of the keys it has.
        known: Vec<String>,
    },
    /// It does not open under its key: it was changed in the store, or
    /// moved from another variable.
    #[error("config bucket {bucket}: {variable} does not open under secrets key {key} (its ciphertext was changed, or moved from another variable) — set it again with `vd config set {bucket} {variable}=... --secret`")]
    Unreadable {
        /// The bucket.
        bucket: String,
        /// The variable.
        variable: String,
        /// The key's id.
        key: String,
    },
}

impl From<SecretError> for StoreError {
    fn from(error: SecretError) -> StoreError {
        StoreError::Secret(Box::new(error))
    }
}

/// One key.
struct SecretKey {
    id: KeyId,
    cipher: ChaCha20Poly1305,
}

impl SecretKey {
    fn new(bytes: &[u8; KEY_BYTES]) -> SecretKey {
        let mut digest = Sha256::new();
        digest.update(b"voodu secrets key\0");
        digest.update(bytes);
        let id = KeyId(hex::encode(&digest.finalize()[..8]));
        SecretKey {
            id,
            cipher: ChaCha20Poly1305::new(Key::from_slice(bytes)),
        }
    }
}

/// The keys a controller seals and opens secrets with: the first seals.
pub struct SecretKeys {
    keys: Vec<SecretKey>,
}

impl std::fmt::Debug for SecretKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ids: Vec<&str> = self.keys.iter().map(|key| key.id.as_str()).collect();
        f.debug_struct("SecretKeys").field("ids", &ids).finish()
    }
}

/// A value as a store keeps it: plain, or sealed under a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredValue {
    /// The value, or the nonce and ciphertext in hex when sealed.
    pub value: String,
    /// Whether it is a secret.
    pub secret: bool,
    /// The key it is sealed under; `None`: plain.
    pub sealed_with: Option<KeyId>,
}

/// What [`crate::StateStore::reseal_secrets`] seals anew.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reseal {
    /// Only the secrets stored plain (before a key was given): a start.
    Plain,
    /// Every secret not sealed under the first key: `vd config rotate-key`.
    NotUnderFirstKey,
}

impl Reseal {
    /// Whether `stored` is sealed anew under `keys`.
    pub fn wants(self, keys: &SecretKeys, stored: &StoredValue) -> bool {
        stored.secret
            && match self {
                Reseal::Plain => stored.sealed_with.is_none(),
                Reseal::NotUnderFirstKey => stored.sealed_with.as_ref() != Some(keys.first()),
            }
    }
}

impl SecretKeys {
    /// The keys of `files`, the first the one that seals.
    pub fn from_files(files: &[PathBuf]) -> Result<Option<SecretKeys>, SecretKeyError> {
        let mut keys: Vec<SecretKey> = Vec::with_capacity(files.len());
        for path in files {
            let key = SecretKey::new(&read_key_file(path)?);
            if keys.iter().any(|known| known.id == key.id) {
                return Err(SecretKeyError::Repeated {
                    path: path.clone(),
                    id: key.id,
                });
            }
            keys.push(key);
        }
        Ok((!keys.is_empty()).then_some(SecretKeys { keys }))
    }

    /// The keys `bytes` (the first seals), for tests.
    pub fn from_bytes(bytes: &[[u8; KEY_BYTES]]) -> SecretKeys {
        SecretKeys {
            keys: bytes.iter().map(SecretKey::new).collect(),
        }
    }

    /// The id of the key that seals.
    pub fn first(&self) -> &KeyId {
        &self.keys[0].id
    }

    /// Every key's id, the one that seals first.
    pub fn ids(&self) -> Vec<KeyId> {
        self.keys.iter().map(|key| key.id.clone()).collect()
    }

    /// `value` as stored: a secret sealed under the first key, anything
    /// else plain. Without keys (`None`), plain as before.
    pub fn seal(
        keys: Option<&SecretKeys>,
        bucket: &BucketName,
        variable: &str,
        value: &ConfigValue,
    ) -> Result<StoredValue, StoreError> {
        let plain = || StoredValue {
            value: value.value.clone(),
            secret: value.secret,
            sealed_with: None,
        };
        let Some(keys) = keys.filter(|_| value.secret) else {
            return Ok(plain());
        };
        let key = &keys.keys[0];
        let mut nonce = [0u8; NONCE_BYTES];
        getrandom::fill(&mut nonce).map_err(|error| StoreError::NoRandomness(error.to_string()))?;
        let place = place(bucket, variable);
        let sealed = key
            .cipher
            .encrypt(
                Nonce::from_slice(&nonce),
                Payload {
                    msg: value.value.as_bytes(),
                    aad: place.as_bytes(),
                },
            )
            .map_err(|_| {
                StoreError::NotSupported(format!(
                    "config bucket {bucket}: {variable} is too long to seal"
                ))
            })?;
        let mut text = hex::encode(nonce);
        text.push_str(&hex::encode(sealed));
        Ok(StoredValue {
            value: text,
            secret: true,
            sealed_with: Some(key.id.clone()),
        })
    }

    /// The value `stored` holds, opened when sealed.
    pub fn open(
        keys: Option<&SecretKeys>,
        bucket: &BucketName,
        variable: &str,
        stored: StoredValue,
    ) -> Result<ConfigValue, StoreError> {
        let Some(id) = stored.sealed_with else {
            return Ok(ConfigValue {
                value: stored.value,
                secret: stored.secret,
            });
        };
        let unknown_key = || SecretError::KeyMissing {
            bucket: bucket.to_string(),
            variable: variable.to_owned(),
            key: id.to_string(),
            known: keys.map_or_else(Vec::new, |keys| {
                keys.ids().iter().map(ToString::to_string).collect()
            }),
        };
        let key = keys
            .and_then(|keys| keys.keys.iter().find(|key| key.id == id))
            .ok_or_else(unknown_key)?;
        let unreadable = || SecretError::Unreadable {
            bucket: bucket.to_string(),
            variable: variable.to_owned(),
            key: id.to_string(),
        };
        let bytes = hex::decode(&stored.value).map_err(|_| unreadable())?;
        if bytes.len() < NONCE_BYTES {
            return Err(unreadable().into());
        }
        let (nonce, sealed) = bytes.split_at(NONCE_BYTES);
        let place = place(bucket, variable);
        let opened = key
            .cipher
            .decrypt(
                Nonce::from_slice(nonce),
                Payload {
                    msg: sealed,
                    aad: place.as_bytes(),
                },
            )
            .map_err(|_| unreadable())?;
        Ok(ConfigValue {
            value: String::from_utf8(opened).map_err(|_| unreadable())?,
            secret: stored.secret,
        })
    }
}

/// What a sealed value is bound to: its bucket and variable.
fn place(bucket: &BucketName, variable: &str) -> String {
    format!("voodu config {bucket}\0{variable}")
}

/// The key in `path`: 64 hex digits (whitespace around them ignored), in a
/// file only its owner may read.
fn read_key_file(path: &Path) -> Result<[u8; KEY_BYTES], SecretKeyError> {
    use std::os::unix::fs::PermissionsExt;
    let unreadable = |source| SecretKeyError::Unreadable {
        path: path.to_owned(),
        source,
    };
    let mode = std::fs::metadata(path)
        .map_err(unreadable)?
        .permissions()
        .mode()
        & 0o777;
    if mode & 0o077 != 0 {
        return Err(SecretKeyError::Open {
            path: path.to_owned(),
            mode,
        });
    }
    let text = std::fs::read_to_string(path).map_err(unreadable)?;
    let malformed = |reason: &str| SecretKeyError::Malformed {
        path: path.to_owned(),
        reason: reason.to_owned(),
    };
    let bytes = hex::decode(text.trim()).map_err(|_| malformed("it is not hex"))?;
    bytes
        .try_into()
        .map_err(|bytes: Vec<u8>| malformed(&format!("{} bytes, not {KEY_BYTES}", bytes.len())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bucket() -> BucketName {
        "prod/api".parse().unwrap()
    }

    fn secret(value: &str) -> ConfigValue {
        ConfigValue {
            value: value.to_owned(),
            secret: true,
        }
    }

    /// A secret is stored as ciphertext under the first key, with its id,
    /// and opens to the value; a plain variable stays plain.
    #[test]
    fn a_secret_is_sealed_under_the_first_key_and_opens() {
        let keys = SecretKeys::from_bytes(&[[7; KEY_BYTES], [9; KEY_BYTES]]);
        let stored = SecretKeys::seal(Some(&keys), &bucket(), "TOKEN", &secret("hunter2")).unwrap();
        assert_eq!(stored.sealed_with.as_ref(), Some(keys.first()));
        assert!(!stored.value.contains("hunter2"));
        let opened = SecretKeys::open(Some(&keys), &bucket(), "TOKEN", stored.clone()).unwrap();
        assert_eq!(opened, secret("hunter2"));
        // A fresh nonce each time: the same value seals differently.
        let again = SecretKeys::seal(Some(&keys), &bucket(), "TOKEN", &secret("hunter2")).unwrap();
        assert_ne!(again.value, stored.value);
        let plain = ConfigValue {
            value: "info".into(),
            secret: false,
        };
        let kept = SecretKeys::seal(Some(&keys), &bucket(), "LOG_LEVEL", &plain).unwrap();
        assert_eq!((kept.value.as_str(), kept.sealed_with), ("info", None));
    }

    /// A value moved to another variable, or changed, does not open; a
    /// value sealed under a key the controller lacks names that key.
    #[test]
    fn a_moved_or_changed_value_does_not_open_and_a_missing_key_is_named() {
        let keys = SecretKeys::from_bytes(&[[7; KEY_BYTES]]);
        let stored = SecretKeys::seal(Some(&keys), &bucket(), "TOKEN", &secret("hunter2")).unwrap();
        let moved = SecretKeys::open(Some(&keys), &bucket(), "OTHER", stored.clone());
        assert!(
            matches!(moved, Err(StoreError::Secret(error)) if matches!(*error, SecretError::Unreadable { .. }))
        );
        let mut changed = stored.clone();
        changed.value.replace_range(30..32, "00");
        assert!(SecretKeys::open(Some(&keys), &bucket(), "TOKEN", changed).is_err());
        let other = SecretKeys::from_bytes(&[[1; KEY_BYTES]]);
        let error = SecretKeys::open(Some(&other), &bucket(), "TOKEN", stored.clone())
            .unwrap_err()
            .to_string();
        assert!(
            error.contains(keys.first().as_str()) && error.contains("--secrets-key"),
            "{error}"
        );
        assert!(SecretKeys::open(None, &bucket(), "TOKEN", stored).is_err());
    }

    /// A key file must be 64 hex digits, readable by its owner only.
    #[test]
    fn a_key_file_is_hex_and_private() {
        use std::os::unix::fs::PermissionsExt;
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("secrets.key");
        std::fs::write(&path, format!("{}\n", hex::encode([5u8; KEY_BYTES]))).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let error = SecretKeys::from_files(std::slice::from_ref(&path))
            .unwrap_err()
            .to_string();
        assert!(error.contains("chmod 600"), "{error}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let keys = SecretKeys::from_files(std::slice::from_ref(&path))
            .unwrap()
            .unwrap();
        assert_eq!(keys.first().as_str().len(), 16);
        let twice = SecretKeys::from_files(&[path.clone(), path.clone()]).unwrap_err();
        assert!(twice.to_string().contains("the same key"), "{twice}");
        std::fs::write(&path, "not a key").unwrap();
        let error = SecretKeys::from_files(&[path]).unwrap_err().to_string();
        assert!(error.contains("64 hex digits"), "{error}");
        assert!(SecretKeys::from_files(&[]).unwrap().is_none());
    }
}
