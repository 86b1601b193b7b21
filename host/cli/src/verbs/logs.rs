//! `vd logs`: [`Request::Logs`]. Its lines are printed as they come by
//! [`WatchView::log`](crate::render::WatchView::log); its answer,
//! [`Response::LogsEnded`](voodu_api::Response::LogsEnded), prints nothing
//! more.

use std::time::Duration;

use voodu_api::{Request, WorkloadId};

use super::Call;
use crate::OutputArg;

/// `vd logs`'s arguments.
#[derive(Debug, clap::Args)]
pub struct LogsArgs {
    /// KIND/SCOPE/NAME, for example deployment/prod/esl.
    workload: WorkloadId,
    /// Keep streaming new lines (of the replicas running now) until
    /// Ctrl-C.
    #[arg(short = 'f', long = "follow")]
    follow: bool,
    /// Only lines written within this long (`10m`, `1h`).
    #[arg(long, value_parser = humantime::parse_duration, value_name = "DURATION")]
    since: Option<Duration>,
    /// Only the last N lines of each replica.
    #[arg(long, value_name = "N")]
    tail: Option<u64>,
    #[command(flatten)]
    output: OutputArg,
}

impl LogsArgs {
    /// [`Request::Logs`], `--since` turned into a Unix time from now.
    pub fn call(self) -> Call {
        let since_unix = self.since.map(|since| {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |elapsed| elapsed.as_secs());
            i64::try_from(now.saturating_sub(since.as_secs())).unwrap_or(i64::MAX)
        });
        Call::new(
            Request::Logs {
                workload: self.workload,
                follow: self.follow,
                since_unix,
                tail: self.tail,
            },
            self.output.output,
        )
    }
}
