//! `job` and `cronjob`, as voodu documents them (its `jobs.mdx`): a
//! workload whose container runs to completion. A job runs when an
//! operator asks (`vd run SCOPE/NAME`); a cronjob also runs on its
//! `schedule`. Each run is a container of its own, kept after it ends
//! (for `vd logs`) within the history limits.
//!
//! Schedules are cron expressions as voodu writes them: five fields
//! (`minute hour day-of-month month day-of-week`, Sunday is 0, names
//! such as `Mon-Fri`, the `@hourly` ... `@yearly` macros), read by the
//! `croner` crate, which also takes an optional leading seconds field
//! (`*/5 * * * * *`: every five seconds). The `cron` crate was not taken:
//! it requires the seconds field and numbers weekdays from 1 (Sunday), so
//! voodu's `0 0 * * 0` would fail or mean another day.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// How many successful runs a job keeps when `successful_history_limit` is
/// not written, as voodu does.
pub const DEFAULT_SUCCESSFUL_HISTORY_LIMIT: u32 = 3;
/// How many failed runs a job keeps when `failed_history_limit` is not
/// written, as voodu does.
pub const DEFAULT_FAILED_HISTORY_LIMIT: u32 = 1;
/// The largest history limit accepted.
pub const MAX_HISTORY_LIMIT: u32 = 100;

/// The attributes a job takes beside the container's (image, command,
/// env, volumes, ...).
pub const JOB_ATTRIBUTES: &[&str] = &[
    "timeout",
    "successful_history_limit",
    "failed_history_limit",
];

/// The attributes only a cronjob takes.
pub const CRONJOB_ATTRIBUTES: &[&str] = &["schedule", "timezone", "suspend", "concurrency_policy"];

/// A workload's attributes that a job or cronjob does not take: they are
/// about replicas that serve, and a run serves nothing.
pub const NOT_FOR_JOBS: &[&str] = &[
    "replicas",
    "ports",
    "restart",
    "health_check",
    "post_deploy",
    "drain_timeout",
    "max_surge",
    "progress_deadline",
    "nodes",
];

/// voodu's blocks that a job or cronjob does not take.
pub const BLOCKS_NOT_FOR_JOBS: &[&str] = &[
    "release",
    "probes",
    "autoscale",
    "on_deploy",
    "on_probe",
    "init",
];

/// What a job or cronjob adds to the container it runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobSpec {
    /// How long a run may take before it is killed; `None`: no limit.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "humantime_serde::option"
    )]
    pub timeout: Option<Duration>,
    /// How many successful runs' containers are kept, newest first.
    pub successful_history_limit: u32,
    /// How many failed runs' containers are kept, newest first.
    pub failed_history_limit: u32,
    /// A cronjob's schedule; `None` for a job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron: Option<CronSpec>,
}

impl Default for JobSpec {
    fn default() -> Self {
        JobSpec {
            timeout: None,
            successful_history_limit: DEFAULT_SUCCESSFUL_HISTORY_LIMIT,
            failed_history_limit: DEFAULT_FAILED_HISTORY_LIMIT,
            cron: None,
        }
    }
}

/// When a cronjob runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CronSpec {
    /// The cron expression.
    pub schedule: Schedule,
    /// The time zone the expression is read in (default UTC).
    pub timezone: TimeZone,
    /// Paused: the schedule starts no run (`vd run` still does).
    #[serde(default)]
    pub suspend: bool,
    /// What a tick does while an earlier run still runs.
    pub concurrency_policy: ConcurrencyPolicy,
}

impl CronSpec {
    /// The first tick strictly after `after`, in UTC.
    pub fn next_tick_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let local = after.with_timezone(&self.timezone.0);
        self.schedule
            .cron
            .find_next_occurrence(&local, false)
            .ok()
            .map(|tick| tick.with_timezone(&Utc))
    }
}

/// What a cronjob's tick does while an earlier run of it still runs.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    strum::EnumString,
    strum::IntoStaticStr,
)]
pub enum ConcurrencyPolicy {
    /// Runs anyway, beside it (voodu's default).
    #[default]
    Allow,
    /// Skips the tick.
    Forbid,
    /// Stops the earlier run, then runs.
    Replace,
}

impl ConcurrencyPolicy {
    /// The policy as voodu writes it: `Allow`, `Forbid`, `Replace`.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// A cron expression, checked once where it is written and kept with its
/// text (stored and shown as written).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Schedule {
    text: String,
    cron: croner::Cron,
}

impl Schedule {
    /// The expression as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl FromStr for Schedule {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let trimmed = text.trim();
        let fields = trimmed.split_whitespace().count();
        if !trimmed.starts_with('@') && !(5..=6).contains(&fields) {
            return Err(format!(
                "schedule {text:?} has {fields} field(s); a schedule has five (minute hour day-of-month month day-of-week, as in \"*/15 * * * *\"), or six with seconds first (\"*/5 * * * * *\")"
            ));
        }
        let cron = croner::parser::CronParser::builder()
            .seconds(croner::parser::Seconds::Optional)
            .year(croner::parser::Year::Disallowed)
            .build()
            .parse(trimmed)
            .map_err(|error| {
                format!(
                    "schedule {text:?} is not a cron expression ({error}) — write five fields, minute hour day-of-month month day-of-week, as in \"*/15 * * * *\" or \"0 3 * * Mon-Fri\", or a macro such as \"@daily\""
                )
            })?;
        Ok(Schedule {
            text: trimmed.to_owned(),
            cron,
        })
    }
}

impl TryFrom<String> for Schedule {
    type Error = String;

    fn try_from(text: String) -> Result<Self, Self::Error> {
        text.parse()
    }
}

impl From<Schedule> for String {
    fn from(schedule: Schedule) -> String {
        schedule.text
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// An IANA time zone (`America/Sao_Paulo`), checked where it is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct TimeZone(pub chrono_tz::Tz);

impl Default for TimeZone {
    fn default() -> Self {
        TimeZone(chrono_tz::UTC)
    }
}

impl FromStr for TimeZone {
    type Err = String;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        name.parse::<chrono_tz::Tz>().map(TimeZone).map_err(|_| {
            format!(
                "timezone {name:?} is not an IANA time zone — write one such as \"UTC\" or \"America/Sao_Paulo\""
            )
        })
    }
}

impl TryFrom<String> for TimeZone {
    type Error = String;

    fn try_from(name: String) -> Result<Self, Self::Error> {
        name.parse()
    }
}

impl From<TimeZone> for String {
    fn from(zone: TimeZone) -> String {
        zone.0.name().to_owned()
    }
}

impl fmt::Display for TimeZone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.name())
    }
}

/// What started a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "by")]
pub enum RunTrigger {
    /// `vd run`.
    Manual,
    /// The cronjob's schedule, at this tick (Unix seconds).
    Schedule {
        /// The tick, in Unix seconds.
        tick: i64,
    },
}

/// One finished run, as much as the history limits need of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FinishedRun<Id> {
    /// What names the run (its container).
    pub id: Id,
    /// When it was created, in Unix seconds.
    pub created: i64,
    /// Whether it exited 0.
    pub succeeded: bool,
}

/// The finished runs the history limits no longer keep: all but the newest
/// `successful` successful ones and the newest `failed` failed ones.
pub fn runs_past_history<Id: Clone>(
    runs: &[FinishedRun<Id>],
    successful: u32,
    failed: u32,
) -> Vec<Id> {
    let mut newest_first: Vec<&FinishedRun<Id>> = runs.iter().collect();
    newest_first.sort_by_key(|run| std::cmp::Reverse(run.created));
    let (mut kept_successful, mut kept_failed) = (0u32, 0u32);
    let mut past = Vec::new();
    for run in newest_first {
        let (kept, limit) = if run.succeeded {
            (&mut kept_successful, successful)
        } else {
            (&mut kept_failed, failed)
        };
        if *kept < limit {
            *kept += 1;
        } else {
            past.push(run.id.clone());
        }
    }
    past
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> DateTime<Utc> {
        text.parse().unwrap()
    }

    #[test]
    fn schedules_read_voodus_five_fields_with_sunday_as_zero_and_an_optional_seconds_field() {
        let spec = |schedule: &str, zone: &str| CronSpec {
            schedule: schedule.parse().unwrap(),
            timezone: zone.parse().unwrap(),
            suspend: false,
            concurrency_policy: ConcurrencyPolicy::Allow,
        };
        // 2026-12-05 is a Saturday: Sunday midnight is the next day.
        let sunday = spec("0 0 * * 0", "UTC");
        assert_eq!(
            sunday.next_tick_after(at("2026-12-05T10:00:00Z")),
            Some(at("2026-12-06T00:00:00Z"))
        );
        let weekdays = spec("0 12 * * Mon-Fri", "UTC");
        assert_eq!(
            weekdays.next_tick_after(at("2026-12-05T10:00:00Z")),
            Some(at("2026-12-07T12:00:00Z"))
        );
        let every_five_seconds = spec("*/5 * * * * *", "UTC");
        assert_eq!(
            every_five_seconds.next_tick_after(at("2026-12-05T10:00:03Z")),
            Some(at("2026-12-05T10:00:05Z"))
        );
        // 03:00 in São Paulo (UTC-3) is 06:00 UTC.
        let nightly = spec("0 3 * * *", "America/Sao_Paulo");
        assert_eq!(
            nightly.next_tick_after(at("2026-12-05T10:00:00Z")),
            Some(at("2026-12-06T06:00:00Z"))
        );
        let daily = spec("@daily", "UTC");
        assert_eq!(
            daily.next_tick_after(at("2026-12-05T10:00:00Z")),
            Some(at("2026-12-06T00:00:00Z"))
        );
    }

    #[test]
    fn a_wrong_schedule_or_zone_is_refused_with_the_form_to_write() {
        let four = "* * * *".parse::<Schedule>().unwrap_err();
        assert!(four.contains("has 4 field(s)"), "{four}");
        let wrong = "61 * * * *".parse::<Schedule>().unwrap_err();
        assert!(wrong.contains("is not a cron expression"), "{wrong}");
        let zone = "Mars/Olympus".parse::<TimeZone>().unwrap_err();
        assert!(zone.contains("\"America/Sao_Paulo\""), "{zone}");
        let stored = serde_json::to_value("*/15 * * * *".parse::<Schedule>().unwrap()).unwrap();
        assert_eq!(stored, serde_json::json!("*/15 * * * *"));
    }

    #[test]
    fn history_keeps_the_newest_runs_of_each_outcome_up_to_its_limit() {
        let run = |id: &'static str, created: i64, succeeded: bool| FinishedRun {
            id,
            created,
            succeeded,
        };
        let runs = [
            run("s1", 1, true),
            run("f1", 2, false),
            run("s2", 3, true),
            run("f2", 4, false),
            run("s3", 5, true),
        ];
        let mut past = runs_past_history(&runs, 2, 1);
        past.sort();
        assert_eq!(past, vec!["f1", "s1"]);
        assert_eq!(runs_past_history(&runs, 0, 0).len(), 5);
        assert!(runs_past_history(&runs, 3, 2).is_empty());
    }
}
