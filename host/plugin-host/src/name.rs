//! [`PluginName`]: the one rule for a plugin's name, which is also the block
//! type it owns and its directory under `<root>/plugins/`.

use std::fmt;

/// The longest name accepted.
pub const MAX_PLUGIN_NAME_LEN: usize = 64;

/// A checked plugin name: a lowercase ASCII letter, then lowercase letters,
/// digits, `_` or `-`, at most [`MAX_PLUGIN_NAME_LEN`] characters. Such a
/// name is a valid HCL block type and a safe directory name (no path
/// separator, no `..`, no hidden file).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PluginName(String);

/// Why a string is not a plugin name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PluginNameError {
    /// The name is empty.
    #[error("the name is empty")]
    Empty,
    /// The name is longer than [`MAX_PLUGIN_NAME_LEN`].
    #[error("{0:?} is longer than {MAX_PLUGIN_NAME_LEN} characters")]
    TooLong(String),
    /// The name does not start with a lowercase letter.
    #[error("{0:?} does not start with a lowercase letter")]
    BadStart(String),
    /// The name holds a character outside `[a-z0-9_-]`.
    #[error("{name:?} contains {bad:?}")]
    BadCharacter {
        /// The name.
        name: String,
        /// The first character outside `[a-z0-9_-]`.
        bad: char,
    },
}

impl PluginName {
    /// Checks `name` against the rule.
    pub fn new(name: impl Into<String>) -> Result<PluginName, PluginNameError> {
        let name = name.into();
        let Some(first) = name.chars().next() else {
            return Err(PluginNameError::Empty);
        };
        if name.chars().count() > MAX_PLUGIN_NAME_LEN {
            return Err(PluginNameError::TooLong(name));
        }
        if let Some(bad) = name
            .chars()
            .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_' || *c == '-'))
        {
            return Err(PluginNameError::BadCharacter { name, bad });
        }
        if !first.is_ascii_lowercase() {
            return Err(PluginNameError::BadStart(name));
        }
        Ok(PluginName(name))
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for PluginName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for PluginName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_type_names_are_accepted() {
        for name in ["traffik", "voodu-haproxy_2", "echo_c", "a"] {
            assert_eq!(PluginName::new(name).unwrap().as_str(), name);
        }
    }

    #[test]
    fn names_that_are_not_safe_block_types_are_refused_with_the_reason() {
        assert_eq!(PluginName::new(""), Err(PluginNameError::Empty));
        assert_eq!(
            PluginName::new("../etc").unwrap_err().to_string(),
            "\"../etc\" contains '.'"
        );
        assert_eq!(
            PluginName::new("a/b").unwrap_err().to_string(),
            "\"a/b\" contains '/'"
        );
        assert_eq!(
            PluginName::new("Traffik").unwrap_err().to_string(),
            "\"Traffik\" contains 'T'"
        );
        assert_eq!(
            PluginName::new("2fast").unwrap_err().to_string(),
            "\"2fast\" does not start with a lowercase letter"
        );
        assert!(matches!(
            PluginName::new("-x"),
            Err(PluginNameError::BadStart(_))
        ));
        assert!(matches!(
            PluginName::new("a".repeat(65)),
            Err(PluginNameError::TooLong(_))
        ));
    }
}
