//! `vd logs`: [`Request::Logs`]. Its lines are printed as they come by
//! [`WatchView::log`](crate::render::WatchView::log); its answer,
//! [`Response::LogsEnded`](voodu_api::Response::LogsEnded), prints nothing
//! more.

use std::time::SystemTime;

use std::process::ExitCode;

use voodu_api::client::Client;
use voodu_api::Request;

use super::{workload_or_replica, Call, LogView};
use crate::OutputArg;
use crate::{fail, EXIT_USAGE};

/// `vd logs`'s arguments.
#[derive(Debug, clap::Args)]
pub struct LogsArgs {
    /// KIND/SCOPE/NAME, for example deployment/prod/esl; or one replica,
    /// as voodu names it: its container (prod-esl.a1f3) or SCOPE/NAME.ID.
    #[arg(value_name = "KIND/SCOPE/NAME | POD")]
    target: String,
    /// Keep streaming new lines (of the replicas running now) until
    /// Ctrl-C.
    #[arg(short = 'f', long = "follow")]
    follow: bool,
    /// Only lines written within this long (`10m`, `1h`), or since this
    /// time (`2026-12-06T10:00:00Z`, `2026-12-06 10:00:00`, UTC).
    #[arg(long, value_parser = parse_since, value_name = "DURATION|TIME")]
    since: Option<SystemTime>,
    /// Only the last N lines of each replica.
    #[arg(short = 'n', long, visible_short_alias = 't', value_name = "N")]
    tail: Option<u64>,
    /// Only lines that hold this text.
    #[arg(long, value_name = "TEXT")]
    grep: Option<String>,
    /// Print each line alone, without its replica before it.
    #[arg(long)]
    no_prefix: bool,
    #[command(flatten)]
    output: OutputArg,
}

/// `--since` as voodu takes it: a duration back from now, or a time.
fn parse_since(written: &str) -> Result<SystemTime, String> {
    if let Ok(back) = humantime::parse_duration(written) {
        return Ok(SystemTime::now()
            .checked_sub(back)
            .unwrap_or(SystemTime::UNIX_EPOCH));
    }
    humantime::parse_rfc3339_weak(written).map_err(|_| {
        format!("{written:?} is neither a duration (10m, 1h) nor a time (2026-12-06T10:00:00Z)")
    })
}

impl LogsArgs {
    /// [`Request::Logs`], `--since` as a Unix time; `--grep` and
    /// `--no-prefix` shape what is printed.
    pub fn call(self, client: &Client) -> Result<Call, ExitCode> {
        let (workload, replica) = workload_or_replica(client, &self.target)
            .map_err(|message| fail(format!("vd logs: {message}"), EXIT_USAGE))?;
        let since_unix = self.since.map(|since| {
            let at = since
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |elapsed| elapsed.as_secs());
            i64::try_from(at).unwrap_or(i64::MAX)
        });
        let mut call = Call::new(
            Request::Logs {
                workload,
                follow: self.follow,
                since_unix,
                tail: self.tail,
                replica,
            },
            self.output.output,
        );
        call.log_view = LogView {
            grep: self.grep,
            no_prefix: self.no_prefix,
        };
        Ok(call)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_is_a_duration_back_from_now_or_a_time() {
        let at = parse_since("2026-12-06T10:00:00Z").unwrap();
        assert_eq!(
            at.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs(),
            1_796_551_200
        );
        let back = parse_since("10m").unwrap();
        let ago = SystemTime::now().duration_since(back).unwrap().as_secs();
        assert!((599..=601).contains(&ago), "{ago}");
        assert!(parse_since("yesterday")
            .unwrap_err()
            .contains("neither a duration"));
    }
}
