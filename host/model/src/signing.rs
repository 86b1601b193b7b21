//! Signed plugin records. In a cluster, `vd plugins:install` stores the
//! plugin for every node; whoever could write etcd could otherwise make
//! every node load a shared object of their own. So an operator signs
//! each record with an Ed25519 key of their own (`vd keys new signing
//! FILE`, `plugins:install --signing-key FILE`), and every node is started
//! with the operators' public keys (`--trust-key FILE.pub`): it loads a
//! cluster plugin only when its record carries a signature, by one of
//! those keys, over a [`PluginStatement`] naming that record's plugin,
//! version and file (its SHA-256).
//!
//! The signature is over the statement's exact text, kept beside it, so
//! what is verified is byte for byte what was signed.

use std::path::{Path, PathBuf};

use ed25519_dalek::{Signer, Verifier};
use serde::{Deserialize, Serialize};

/// What an operator's signature says of a plugin record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginStatement {
    /// The plugin's name.
    pub name: String,
    /// Its version, as it names it.
    pub version: String,
    /// The plugin ABI it was built against (`1.2`).
    pub abi: String,
    /// The SHA-256 of its file, hex.
    pub sha256: String,
    /// The node that stated it (where it was installed, or signed).
    pub node: String,
    /// When, RFC 3339.
    pub at: String,
    /// It states the plugin's removal from the cluster (`plugins:remove`):
    /// nodes that trust the signer unload it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub removed: bool,
}

impl PluginStatement {
    /// The text that is signed: the statement as one JSON line.
    pub fn to_text(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// A record's signature: the statement's text, the key that signed it and
/// the signature, both hex.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginSignature {
    /// The [`PluginStatement`] as signed, JSON.
    pub statement: String,
    /// The signer's public key, 64 hex digits.
    pub key: String,
    /// The Ed25519 signature over `statement`, 128 hex digits.
    pub signature: String,
}

impl PluginSignature {
    /// The statement, when the signature verifies under its own key
    /// (whether that key is trusted is each node's call).
    pub fn verified_statement(&self) -> Result<PluginStatement, SigningError> {
        let key = hex::decode(&self.key)
            .ok()
            .and_then(|bytes| <[u8; 32]>::try_from(bytes).ok())
            .and_then(|bytes| ed25519_dalek::VerifyingKey::from_bytes(&bytes).ok())
            .ok_or_else(|| SigningError::Forged {
                key_id: self.key_id().to_owned(),
            })?;
        TrustedKeys(vec![key]).verify(self)
    }

    /// The signer's key id: the first 16 hex digits of its public key.
    pub fn key_id(&self) -> &str {
        self.key.get(..16).unwrap_or(&self.key)
    }
}

/// Why a key file cannot be used, or a record's signature is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SigningError {
    /// A key file cannot be read or holds no key.
    #[error("{path}: {reason}")]
    KeyFile {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The record carries no signature.
    #[error("it is not signed — sign it with `vd plugins:sign {name} --signing-key FILE` (or install it with --signing-key)")]
    Unsigned {
        /// The plugin.
        name: String,
    },
    /// It is signed by a key this node does not trust.
    #[error("it is signed by key {key_id}, which this node does not trust — start the node with --trust-key naming that key's .pub file, if it is an operator's")]
    Untrusted {
        /// The key's id.
        key_id: String,
    },
    /// The signature does not verify.
    #[error("its signature by key {key_id} does not verify — the record was changed after it was signed; install it again")]
    Forged {
        /// The key's id.
        key_id: String,
    },
    /// The signed statement is not about this record.
    #[error("its signed statement names {what} {signed:?}, the record {stored:?} — the record was changed after it was signed; install it again")]
    NotThisRecord {
        /// The field.
        what: &'static str,
        /// As signed.
        signed: String,
        /// As stored.
        stored: String,
    },
}

/// What an operator means to sign, checked against the statement a
/// controller hands over before anything is signed: a controller (or an
/// etcd writer behind it) can never get another file, plugin or state
/// signed than the one the operator named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Approval {
    /// The plugin.
    pub name: String,
    /// The file's SHA-256 the operator approves; `None` for a removal,
    /// which names no file.
    pub sha256: Option<String>,
    /// Whether it is the plugin's removal.
    pub removed: bool,
}

impl Approval {
    /// Checks that `statement` (a controller's, as text) states what this
    /// approves; why not otherwise, naming both.
    pub fn check(&self, statement: &str) -> Result<(), String> {
        let stated: PluginStatement = serde_json::from_str(statement)
            .map_err(|error| format!("the controller sent no statement to sign ({error})"))?;
        let says = |name: &str, sha256: Option<&str>, removed: bool| {
            format!(
                "{} of {name}{}",
                if removed {
                    "the removal"
                } else {
                    "the install"
                },
                sha256
                    .map(|sha| format!(" (file SHA-256 {sha})"))
                    .unwrap_or_default()
            )
        };
        let matches = stated.name == self.name
            && stated.removed == self.removed
            && self.sha256.as_ref().is_none_or(|sha| *sha == stated.sha256);
        if matches {
            Ok(())
        } else {
            Err(format!(
                "the controller asks to sign {}, not {} — nothing was signed; check what is installed (its file may have been replaced in the cluster store)",
                says(&stated.name, Some(&stated.sha256), stated.removed),
                says(&self.name, self.sha256.as_deref(), self.removed)
            ))
        }
    }
}

/// An operator's private signing key.
pub struct SigningKey(ed25519_dalek::SigningKey);

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SigningKey")
    }
}

/// The text of a key file: hex, whitespace around it ignored.
fn key_bytes(path: &Path, private: bool) -> Result<[u8; 32], SigningError> {
    use std::os::unix::fs::PermissionsExt;
    let problem = |reason: String| SigningError::KeyFile {
        path: path.to_owned(),
        reason,
    };
    let metadata = std::fs::metadata(path).map_err(|error| problem(error.to_string()))?;
    if private && metadata.permissions().mode() & 0o077 != 0 {
        return Err(problem(format!(
            "a private key others may read (mode {:o}) — chmod 600 {}",
            metadata.permissions().mode() & 0o777,
            path.display()
        )));
    }
    let text = std::fs::read_to_string(path).map_err(|error| problem(error.to_string()))?;
    let bytes = hex::decode(text.trim()).map_err(|_| {
        problem("not a key (64 hex digits, as `vd keys new signing FILE` writes)".to_owned())
    })?;
    bytes
        .try_into()
        .map_err(|_| problem("not 32 bytes: not a key `vd keys new signing` wrote".to_owned()))
}

impl SigningKey {
    /// A new key from the system's randomness: its private and public
    /// key files' texts.
    pub fn generate() -> Result<(String, String), std::io::Error> {
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed).map_err(std::io::Error::other)?;
        let key = ed25519_dalek::SigningKey::from_bytes(&seed);
        Ok((
            format!("{}\n", hex::encode(seed)),
            format!("{}\n", hex::encode(key.verifying_key().to_bytes())),
        ))
    }

    /// The key in `path` (readable by its owner only).
    pub fn from_file(path: &Path) -> Result<SigningKey, SigningError> {
        Ok(SigningKey(ed25519_dalek::SigningKey::from_bytes(
            &key_bytes(path, true)?,
        )))
    }

    /// A key of these bytes, for tests.
    pub fn from_seed(seed: [u8; 32]) -> SigningKey {
        SigningKey(ed25519_dalek::SigningKey::from_bytes(&seed))
    }

    /// Its public key, hex.
    pub fn public_hex(&self) -> String {
        hex::encode(self.0.verifying_key().to_bytes())
    }

    /// Signs `statement`, the text a controller gave to sign.
    pub fn sign(&self, statement: &str) -> PluginSignature {
        PluginSignature {
            statement: statement.to_owned(),
            key: self.public_hex(),
            signature: hex::encode(self.0.sign(statement.as_bytes()).to_bytes()),
        }
    }
}

/// The operators' public keys a node loads cluster plugins signed by.
#[derive(Debug, Clone, Default)]
pub struct TrustedKeys(Vec<ed25519_dalek::VerifyingKey>);

impl TrustedKeys {
    /// The keys of `files` (public key files, `.pub`).
    pub fn from_files(files: &[PathBuf]) -> Result<TrustedKeys, SigningError> {
        files
            .iter()
            .map(|path| {
                ed25519_dalek::VerifyingKey::from_bytes(&key_bytes(path, false)?).map_err(|error| {
                    SigningError::KeyFile {
                        path: path.clone(),
                        reason: format!("not an Ed25519 public key: {error}"),
                    }
                })
            })
            .collect::<Result<_, _>>()
            .map(TrustedKeys)
    }

    /// The keys of these signing keys, for tests.
    pub fn of(keys: &[&SigningKey]) -> TrustedKeys {
        TrustedKeys(keys.iter().map(|key| key.0.verifying_key()).collect())
    }

    /// Whether it holds no key.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The statement `signature` makes, when one of these keys made it.
    pub fn verify(&self, signature: &PluginSignature) -> Result<PluginStatement, SigningError> {
        let forged = || SigningError::Forged {
            key_id: signature.key_id().to_owned(),
        };
        let key = hex::decode(&signature.key)
            .ok()
            .and_then(|bytes| <[u8; 32]>::try_from(bytes).ok())
            .and_then(|bytes| ed25519_dalek::VerifyingKey::from_bytes(&bytes).ok())
            .ok_or_else(forged)?;
        if !self.0.contains(&key) {
            return Err(SigningError::Untrusted {
                key_id: signature.key_id().to_owned(),
            });
        }
        let sealed = hex::decode(&signature.signature)
            .ok()
            .and_then(|bytes| <[u8; 64]>::try_from(bytes).ok())
            .map(|bytes| ed25519_dalek::Signature::from_bytes(&bytes))
            .ok_or_else(forged)?;
        key.verify(signature.statement.as_bytes(), &sealed)
            .map_err(|_| forged())?;
        serde_json::from_str(&signature.statement).map_err(|_| forged())
    }

    /// Checks that `signature` (if any) is a trusted key's over a
    /// statement of this record: `name`, `version` and `sha256`, and its
    /// removal when `removed`.
    pub fn check_record(
        &self,
        name: &str,
        version: &str,
        sha256: &str,
        removed: bool,
        signature: Option<&PluginSignature>,
    ) -> Result<PluginStatement, SigningError> {
        let signature = signature.ok_or_else(|| SigningError::Unsigned {
            name: name.to_owned(),
        })?;
        let statement = self.verify(signature)?;
        for (what, signed, stored) in [
            ("plugin", &statement.name, name),
            ("version", &statement.version, version),
            ("file SHA-256", &statement.sha256, sha256),
        ] {
            if signed != stored {
                return Err(SigningError::NotThisRecord {
                    what,
                    signed: signed.clone(),
                    stored: stored.to_owned(),
                });
            }
        }
        if statement.removed != removed {
            let says = |removed: bool| if removed { "removed" } else { "installed" }.to_owned();
            return Err(SigningError::NotThisRecord {
                what: "state",
                signed: says(statement.removed),
                stored: says(removed),
            });
        }
        Ok(statement)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn statement(sha256: &str) -> PluginStatement {
        PluginStatement {
            name: "traffik".into(),
            version: "1.0.0".into(),
            abi: "1.2".into(),
            sha256: sha256.into(),
            node: "a".into(),
            at: "2026-12-06T08:00:00Z".into(),
            removed: false,
        }
    }

    /// A record signed by a trusted key verifies; the same signature on a
    /// record of another file, a changed statement, an untrusted key and
    /// no signature are each refused, naming why.
    #[test]
    fn only_a_trusted_keys_signature_over_this_record_verifies() {
        let operator = SigningKey::from_seed([3; 32]);
        let stranger = SigningKey::from_seed([4; 32]);
        let trusted = TrustedKeys::of(&[&operator]);
        let signed = operator.sign(&statement("aa").to_text());
        assert_eq!(
            trusted.check_record("traffik", "1.0.0", "aa", false, Some(&signed)),
            Ok(statement("aa"))
        );
        assert!(matches!(
            trusted.check_record("traffik", "1.0.0", "bb", false, Some(&signed)),
            Err(SigningError::NotThisRecord {
                what: "file SHA-256",
                ..
            })
        ));
        let mut changed = signed.clone();
        changed.statement = statement("bb").to_text();
        assert!(matches!(
            trusted.check_record("traffik", "1.0.0", "bb", false, Some(&changed)),
            Err(SigningError::Forged { .. })
        ));
        let theirs = stranger.sign(&statement("aa").to_text());
        let refused = trusted
            .check_record("traffik", "1.0.0", "aa", false, Some(&theirs))
            .unwrap_err();
        assert!(refused.to_string().contains(theirs.key_id()), "{refused}");
        assert!(matches!(
            trusted.check_record("traffik", "1.0.0", "aa", false, None),
            Err(SigningError::Unsigned { .. })
        ));
        // An install's signature is no removal's.
        assert!(matches!(
            trusted.check_record("traffik", "1.0.0", "aa", true, Some(&signed)),
            Err(SigningError::NotThisRecord { what: "state", .. })
        ));
    }

    /// An approval passes only the statement of its plugin, file and
    /// state: a controller cannot get another file, or an install for a
    /// removal, signed.
    #[test]
    fn an_approval_passes_only_the_statement_it_names() {
        let approval = |sha256: Option<&str>, removed| Approval {
            name: "traffik".into(),
            sha256: sha256.map(str::to_owned),
            removed,
        };
        let stated = statement("aa").to_text();
        assert_eq!(approval(Some("aa"), false).check(&stated), Ok(()));
        let other = approval(Some("bb"), false).check(&stated).unwrap_err();
        assert!(
            other.contains("nothing was signed") && other.contains("bb"),
            "{other}"
        );
        assert!(approval(None, true).check(&stated).is_err());
        let mut removal = statement("aa");
        removal.removed = true;
        assert_eq!(approval(None, true).check(&removal.to_text()), Ok(()));
        assert!(approval(Some("aa"), false).check("not json").is_err());
    }

    /// A generated key's files read back as that key: the private one only
    /// when only its owner may read it.
    #[test]
    fn generated_key_files_read_back_and_a_private_one_must_be_private() {
        use std::os::unix::fs::PermissionsExt;
        let directory = std::env::temp_dir().join(format!("voodu-signing-{}", std::process::id()));
        std::fs::create_dir_all(&directory).unwrap();
        let (private, public) = SigningKey::generate().unwrap();
        let (key_file, pub_file) = (directory.join("op.key"), directory.join("op.key.pub"));
        std::fs::write(&key_file, private).unwrap();
        std::fs::write(&pub_file, public).unwrap();
        std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let error = SigningKey::from_file(&key_file).unwrap_err().to_string();
        assert!(error.contains("chmod 600"), "{error}");
        std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o600)).unwrap();
        let key = SigningKey::from_file(&key_file).unwrap();
        let trusted = TrustedKeys::from_files(&[pub_file]).unwrap();
        assert!(trusted
            .verify(&key.sign(&statement("cc").to_text()))
            .is_ok());
        let _ = std::fs::remove_dir_all(&directory);
    }
}
