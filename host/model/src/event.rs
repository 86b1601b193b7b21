//! How serious a recorded event is.

use serde::{Deserialize, Serialize};

/// How serious an event is.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    strum::IntoStaticStr,
    strum::EnumString,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum EventLevel {
    /// Something happened as asked.
    Info,
    /// Something happened, but not entirely as asked (a drain ran out of
    /// budget, a plugin could not be told).
    Warning,
    /// Something was refused or failed.
    Error,
}

impl EventLevel {
    /// The word the store and the API write: `info`, `warning`, `error`.
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// The level a stored word names, if any.
    pub fn parse(text: &str) -> Option<EventLevel> {
        text.parse().ok()
    }
}
