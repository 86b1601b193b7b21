//! Config buckets, as voodu documents them: named sets of variables
//! (`scope/name`), kept in the store and set with `vd config`. Every
//! workload takes its scope's bucket (`prod`, voodu's scope-level
//! bucket) first, then those `env_from = ["prod/shared"]` names, in order,
//! and its own bucket (the one named as the workload, `prod/api` for
//! `deployment "prod" "api"`) last; later buckets win over earlier ones,
//! and every bucket over `env`.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::interpolation::is_variable_name;

/// A bucket's name, `scope/name`, or `scope` alone for the bucket every
/// workload of the scope takes.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct BucketName {
    /// Its scope (`prod`, or a tool's name: `aws`).
    pub scope: String,
    /// Its name; empty for the scope's own bucket.
    pub name: String,
}

/// Why a string does not name a bucket.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a config bucket — write scope/name, such as \"prod/shared\", or a scope alone (\"prod\") for the bucket all its workloads take, in lowercase letters, digits and dashes")]
pub struct BucketNameError(String);

fn is_part(part: &str) -> bool {
    !part.is_empty()
        && part.len() <= 63
        && part
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
        && !part.starts_with('-')
}

impl BucketName {
    /// The bucket every workload of `scope` takes (voodu's scope-level
    /// bucket).
    pub fn of_scope(scope: &str) -> BucketName {
        BucketName {
            scope: scope.to_owned(),
            name: String::new(),
        }
    }

    /// Whether it is a scope's own bucket.
    pub fn is_scope(&self) -> bool {
        self.name.is_empty()
    }

    /// A bucket as `env_from` writes it: `scope/name`, or `name` in the
    /// workload's own scope.
    pub fn in_scope(written: &str, scope: &str) -> Result<BucketName, BucketNameError> {
        match written.split_once('/') {
            Some(_) => written.parse(),
            None => format!("{scope}/{written}").parse(),
        }
    }
}

impl FromStr for BucketName {
    type Err = BucketNameError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.split_once('/') {
            Some((scope, name)) if is_part(scope) && is_part(name) => Ok(BucketName {
                scope: scope.to_owned(),
                name: name.to_owned(),
            }),
            None if is_part(text) => Ok(BucketName::of_scope(text)),
            _ => Err(BucketNameError(text.to_owned())),
        }
    }
}

impl TryFrom<String> for BucketName {
    type Error = BucketNameError;

    fn try_from(text: String) -> Result<Self, Self::Error> {
        text.parse()
    }
}

impl From<BucketName> for String {
    fn from(bucket: BucketName) -> String {
        bucket.to_string()
    }
}

impl fmt::Display for BucketName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_scope() {
            write!(f, "{}", self.scope)
        } else {
            write!(f, "{}/{}", self.scope, self.name)
        }
    }
}

/// One value of a bucket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigValue {
    /// The value.
    pub value: String,
    /// Whether it is a secret: `vd config get` prints it only when asked,
    /// and `vd config list` never.
    #[serde(default)]
    pub secret: bool,
}

/// A bucket's variables, by name.
pub type Bucket = BTreeMap<String, ConfigValue>;

/// Why a key cannot be a bucket's variable.
pub fn key_problem(key: &str) -> Option<String> {
    (!is_variable_name(key)).then(|| {
        format!("{key:?} is not a variable name — names are letters, digits and underscores, not starting with a digit, such as DATABASE_URL")
    })
}

/// `env` with each bucket's variables laid over it, in order: later
/// buckets win over earlier ones, and every bucket over `env`.
pub fn layered_env<'a>(
    env: &BTreeMap<String, String>,
    buckets: impl IntoIterator<Item = &'a Bucket>,
) -> BTreeMap<String, String> {
    let mut layered = env.clone();
    for bucket in buckets {
        layered.extend(
            bucket
                .iter()
                .map(|(key, value)| (key.clone(), value.value.clone())),
        );
    }
    layered
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_names_are_scope_slash_name_or_a_name_in_the_workloads_scope() {
        let shared: BucketName = "prod/shared".parse().unwrap();
        assert_eq!(
            (shared.scope.as_str(), shared.name.as_str()),
            ("prod", "shared")
        );
        assert_eq!(BucketName::in_scope("shared", "prod").unwrap(), shared);
        assert_eq!(
            BucketName::in_scope("aws/cli", "prod").unwrap().to_string(),
            "aws/cli"
        );
        assert!("Prod/shared".parse::<BucketName>().is_err());
        // A scope alone is the bucket all its workloads take.
        let scope: BucketName = "prod".parse().unwrap();
        assert!(scope.is_scope());
        assert_eq!(scope.to_string(), "prod");
        assert_eq!(scope, BucketName::of_scope("prod"));
        assert!("a/b/c".parse::<BucketName>().is_err());
    }

    #[test]
    fn buckets_win_over_env_and_later_buckets_over_earlier() {
        let value = |text: &str| ConfigValue {
            value: text.to_owned(),
            secret: false,
        };
        let env = BTreeMap::from([
            ("A".to_owned(), "env".to_owned()),
            ("B".to_owned(), "env".to_owned()),
        ]);
        let first = Bucket::from([
            ("A".to_owned(), value("first")),
            ("C".to_owned(), value("first")),
        ]);
        let second = Bucket::from([("C".to_owned(), value("second"))]);
        let layered = layered_env(&env, [&first, &second]);
        assert_eq!(layered["A"], "first");
        assert_eq!(layered["B"], "env");
        assert_eq!(layered["C"], "second");
        assert!(key_problem("DATABASE_URL").is_none());
        assert!(key_problem("1X").is_some());
    }
}
