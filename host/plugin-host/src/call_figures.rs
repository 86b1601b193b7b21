//! Each plugin handle's own figures of its calls, for `vd plugins:list`:
//! by call, how many were made since the plugin was loaded, how many the
//! plugin refused or failed, and the 99th percentile of the last
//! [`RECENT_CALLS`] durations. Kept whether or not metrics are served; one
//! uncontended lock per call, held to bump two counters and write one slot.

use std::time::Duration;

use parking_lot::Mutex;

use crate::handle::PluginCall;
use crate::observe::CallResult;

/// How many of each call's latest durations the percentile is taken over.
pub const RECENT_CALLS: usize = 1000;

/// The figures of one call of one plugin, as read.
#[derive(Debug, Clone, PartialEq)]
pub struct CallFigures {
    /// The call.
    pub call: PluginCall,
    /// Calls made since the plugin was loaded.
    pub calls: u64,
    /// Of those, refused by the plugin (the operator's input).
    pub refused: u64,
    /// Of those, failed: an error, a timeout or a panic.
    pub errors: u64,
    /// The 99th percentile of the last [`RECENT_CALLS`] durations.
    pub p99: Duration,
}

/// One call's running figures.
#[derive(Debug, Default)]
struct Running {
    calls: u64,
    refused: u64,
    errors: u64,
    /// The latest durations, a ring of [`RECENT_CALLS`].
    recent: Vec<Duration>,
    /// Where the next duration goes once the ring is full.
    next: usize,
}

/// A plugin's figures of each call (see the module doc).
#[derive(Debug, Default)]
pub struct CallTally {
    /// Indexed by [`slot`].
    calls: [Mutex<Running>; CALLS.len()],
}

/// The index of `call` in [`CallTally::calls`].
fn slot(call: PluginCall) -> usize {
    match call {
        PluginCall::Init => 0,
        PluginCall::Validate => 1,
        PluginCall::Publish => 2,
        PluginCall::Drain => 3,
        PluginCall::Forget => 4,
        PluginCall::Describe => 5,
        PluginCall::DescribeSettings => 6,
        PluginCall::Configure => 7,
    }
}

const CALLS: [PluginCall; 8] = [
    PluginCall::Init,
    PluginCall::Validate,
    PluginCall::Publish,
    PluginCall::Drain,
    PluginCall::Forget,
    PluginCall::Describe,
    PluginCall::DescribeSettings,
    PluginCall::Configure,
];

impl CallTally {
    /// Counts one call that ended with `result` after `took`.
    pub fn record(&self, call: PluginCall, result: CallResult, took: Duration) {
        let mut running = self.calls[slot(call)].lock();
        running.calls += 1;
        match result {
            CallResult::Ok => {}
            CallResult::Refused => running.refused += 1,
            CallResult::Error | CallResult::Timeout | CallResult::Panic => running.errors += 1,
        }
        if running.recent.len() < RECENT_CALLS {
            running.recent.push(took);
        } else {
            let at = running.next;
            running.recent[at] = took;
            running.next = (at + 1) % RECENT_CALLS;
        }
    }

    /// The figures of every call made at least once, in call order.
    pub fn figures(&self) -> Vec<CallFigures> {
        CALLS
            .iter()
            .filter_map(|call| {
                let running = self.calls[slot(*call)].lock();
                if running.calls == 0 {
                    return None;
                }
                let mut recent = running.recent.clone();
                recent.sort_unstable();
                // The nearest-rank 99th percentile.
                let rank = (recent.len() * 99).div_ceil(100).max(1);
                Some(CallFigures {
                    call: *call,
                    calls: running.calls,
                    refused: running.refused,
                    errors: running.errors,
                    p99: recent[rank - 1],
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_are_counted_by_outcome_and_the_p99_is_the_nearest_rank_of_the_latest() {
        let tally = CallTally::default();
        for ms in 1..=100 {
            tally.record(
                PluginCall::Publish,
                CallResult::Ok,
                Duration::from_millis(ms),
            );
        }
        tally.record(PluginCall::Validate, CallResult::Refused, Duration::ZERO);
        tally.record(PluginCall::Validate, CallResult::Timeout, Duration::ZERO);
        let figures = tally.figures();
        assert_eq!(figures.len(), 2, "{figures:?}");
        assert_eq!(
            (
                figures[0].call,
                figures[0].calls,
                figures[0].refused,
                figures[0].errors
            ),
            (PluginCall::Validate, 2, 1, 1)
        );
        assert_eq!(figures[1].p99, Duration::from_millis(99));
        // Only the latest RECENT_CALLS count for the percentile.
        for _ in 0..RECENT_CALLS {
            tally.record(
                PluginCall::Publish,
                CallResult::Ok,
                Duration::from_millis(2),
            );
        }
        let publish = &tally.figures()[1];
        assert_eq!(publish.calls, 100 + RECENT_CALLS as u64);
        assert_eq!(publish.p99, Duration::from_millis(2));
    }
}
