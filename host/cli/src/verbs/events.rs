//! `vd events`: [`Request::Events`], and the lines of its answer,
//! [`Response::Events`](voodu_api::Response::Events) (and of `-w`'s
//! notices, which [`WatchView`](crate::render::WatchView) prints as they
//! come).

use anstream::println;
use anstyle::Style;

use voodu_api::{Notice, Request, WorkloadId};

use super::Call;
use crate::render::{ERROR, WARNING};
use crate::OutputArg;

/// `vd events`'s arguments.
#[derive(Debug, clap::Args)]
pub struct EventsArgs {
    /// KIND/SCOPE/NAME; every workload's when left out.
    workload: Option<WorkloadId>,
    /// How many recent events to show first.
    #[arg(long, default_value_t = 20)]
    limit: usize,
    /// Keep streaming events as they happen (one JSON object per line
    /// with -o json).
    #[arg(short = 'w', long = "watch")]
    watch: bool,
    #[command(flatten)]
    output: OutputArg,
}

impl EventsArgs {
    /// [`Request::Events`]; `-w` follows.
    pub fn call(self) -> Call {
        Call::new(
            Request::Events {
                workload: self.workload,
                limit: self.limit,
                follow: self.watch,
            },
            self.output.output,
        )
    }
}

/// Prints the recent events, a line each.
pub fn events(events: &[Notice]) {
    for notice in events {
        println!("{}", notice_line(notice));
    }
}

/// In a cluster, the node an event was recorded on, before its message:
/// `a: `; nothing on one host.
pub fn on_node(node: Option<&str>) -> String {
    node.map(|node| format!("{node}: ")).unwrap_or_default()
}

/// One event as a line: when, workload, reason, node, message.
pub fn notice_line(notice: &Notice) -> String {
    let style = match notice.level {
        voodu_api::EventLevel::Info => Style::new(),
        voodu_api::EventLevel::Warning => WARNING,
        voodu_api::EventLevel::Error => ERROR,
    };
    format!(
        "{}  {}  {style}{:<16}{style:#} {}{}",
        notice.at.as_deref().unwrap_or("-"),
        notice.workload,
        notice.reason,
        on_node(notice.node.as_deref()),
        notice.message
    )
}
