//! The control channel between the supervisor and one worker: a stream
//! socket pair carrying one JSON message per line each way.
//!
//! A worker says when it has loaded (an upgrade's new worker only), when
//! it serves, when it asks for an upgrade, and when it has handed over; the
//! supervisor tells an old worker to hand over, a new one to go, and the
//! worker that asked how its upgrade ended. See the supervisor's module
//! doc for the sequence.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::Arc;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use voodu_api::WorkerInfo;

/// What a worker tells its supervisor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "message", rename_all = "snake_case")]
pub enum FromWorker {
    /// An upgrade's new worker has opened the store and loaded the
    /// plugins, and waits for [`ToWorker::Go`]; `unloaded` names the
    /// plugins it could not load, and why.
    Loaded {
        /// `(plugin, why)` of each plugin that did not load.
        unloaded: Vec<(String, String)>,
    },
    /// The worker serves: the API socket is accepted from and the
    /// reconciler runs.
    Ready {
        /// Its pid, version and start.
        worker: WorkerInfo,
    },
    /// An operator asked this worker for an upgrade (`vd controller
    /// upgrade`).
    UpgradeRequested,
    /// The old worker no longer accepts API requests, writes or
    /// reconciles; its plugins still serve.
    HandedOver,
    /// In a cluster: the lease the node's name is held under now (told
    /// whenever the node joins, again too). The supervisor starts every
    /// later worker with it, to take it over.
    NodeLease {
        /// The lease's id.
        lease: i64,
    },
    /// In a cluster, with Docker: the node's lease is renewed, last
    /// `renewed_ms_ago`; told every sixth of the lease's `ttl_ms`. A
    /// supervisor that hears none for two thirds of the TTL stops the
    /// node's statefulset replicas itself: no worker keeps the node's
    /// place (one died and the next cannot start, or one hangs).
    LeaseFresh {
        /// How long ago the lease was renewed, in milliseconds.
        renewed_ms_ago: u64,
        /// The lease's TTL, in milliseconds.
        ttl_ms: u64,
    },
    /// The worker recorded death number `death`
    /// ([`ToWorker::PreviousWorkerDied`]): no later worker is told it.
    DeathRecorded {
        /// The death's number.
        death: u64,
    },
    /// The old worker refuses to hand over: the new one lacks a plugin it
    /// serves.
    KeepServing {
        /// Why, for the operator.
        reason: String,
    },
}

/// What the supervisor tells a worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "message", rename_all = "snake_case")]
pub enum ToWorker {
    /// The new worker has loaded: stop accepting, writing and reconciling,
    /// unless it lacks a plugin this one serves (`unloaded`).
    HandOver {
        /// What the new worker could not load.
        unloaded: Vec<(String, String)>,
    },
    /// The old worker has handed over: start reconciling and accepting.
    Go,
    /// The upgrade this worker asked for is done: the new worker serves.
    Upgraded {
        /// The new worker.
        worker: WorkerInfo,
    },
    /// The upgrade this worker asked for did not happen; it keeps serving.
    UpgradeFailed {
        /// Why, for the operator.
        reason: String,
    },
    /// This worker replaces one that died.
    PreviousWorkerDied {
        /// How it ended, in words ("was killed by signal 9").
        how: String,
        /// `(plugin, count)`: the connections open through each plugin's
        /// kept sockets when it was last looked at (every
        /// [`super::SAMPLE_EVERY`]), cut with it.
        connections_cut: Vec<(String, usize)>,
        /// The death's number, which the worker answers with
        /// [`FromWorker::DeathRecorded`] once it recorded it (0 from a
        /// supervisor that numbers none).
        #[serde(default)]
        death: u64,
    },
}

/// Writes one message as a line.
pub fn send(stream: &UnixStream, message: &impl Serialize) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(message).map_err(std::io::Error::other)?;
    line.push(b'\n');
    (&*stream).write_all(&line)
}

/// The supervisor's non-blocking reader of one worker's messages.
#[derive(Debug)]
pub struct Inbox {
    stream: UnixStream,
    partial: Vec<u8>,
    closed: bool,
}

impl Inbox {
    /// Reads `stream` without blocking from now on.
    pub fn new(stream: UnixStream) -> std::io::Result<Inbox> {
        stream.set_nonblocking(true)?;
        Ok(Inbox {
            stream,
            partial: Vec::new(),
            closed: false,
        })
    }

    /// The stream, to answer on.
    pub fn stream(&self) -> &UnixStream {
        &self.stream
    }

    /// Tells the worker `message`; a worker that is gone is not an error
    /// here (its exit is seen by the supervisor's loop).
    pub fn tell(&self, message: &ToWorker) {
        // The worker reads as it goes; a full buffer means it is stuck,
        // and its exit or the deadline settles that.
        self.stream.set_nonblocking(false).ok();
        if let Err(error) = send(&self.stream, message) {
            tracing::debug!(%error, ?message, "a worker could not be told");
        }
        self.stream.set_nonblocking(true).ok();
    }

    /// The messages that arrived since the last call. A line that is not a
    /// message is logged and skipped.
    pub fn drain(&mut self) -> Vec<FromWorker> {
        let mut buffer = [0u8; 4096];
        while !self.closed {
            match self.stream.read(&mut buffer) {
                Ok(0) => self.closed = true,
                Ok(read) => self.partial.extend_from_slice(&buffer[..read]),
                Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => self.closed = true,
            }
        }
        let mut messages = Vec::new();
        while let Some(end) = self.partial.iter().position(|&byte| byte == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=end).collect();
            match serde_json::from_slice(&line) {
                Ok(message) => messages.push(message),
                Err(error) => tracing::warn!(%error, "a worker sent a line that is no message"),
            }
        }
        messages
    }
}

/// What a worker awaits from its supervisor, handed to whoever waits.
#[derive(Debug, Default)]
struct Waiters {
    /// `vd controller upgrade` waiting for [`ToWorker::Upgraded`] or
    /// [`ToWorker::UpgradeFailed`].
    upgrade: Option<std::sync::mpsc::Sender<Result<WorkerInfo, String>>>,
}

/// The worker's end of the control channel.
#[derive(Debug)]
pub struct WorkerLink {
    writer: Mutex<UnixStream>,
    waiters: Mutex<Waiters>,
}

/// What a worker does when told to hand over: given what the new worker
/// could not load, `Ok` once it has stopped accepting, writing and
/// reconciling, or `Err` with why it keeps serving.
pub type HandOver = Box<dyn FnOnce(&[(String, String)]) -> Result<(), String> + Send>;

/// What a worker does when told the one before it died: how, and the
/// connections cut by plugin.
pub type PreviousWorkerDied = Box<dyn Fn(&str, &[(String, usize)]) + Send>;

impl WorkerLink {
    /// Takes the worker's end of the channel.
    pub fn new(stream: UnixStream) -> Arc<WorkerLink> {
        Arc::new(WorkerLink {
            writer: Mutex::new(stream),
            waiters: Mutex::new(Waiters::default()),
        })
    }

    /// Tells the supervisor `message`.
    pub fn tell(&self, message: &FromWorker) -> std::io::Result<()> {
        send(&self.writer.lock(), message)
    }

    /// An upgrade's new worker: tells the supervisor it has loaded and
    /// blocks until it is told to go (`Ok`), or the channel ends (the
    /// supervisor called the upgrade off).
    pub fn await_go(&self, unloaded: Vec<(String, String)>) -> std::io::Result<()> {
        self.tell(&FromWorker::Loaded { unloaded })?;
        let reader = self.writer.lock().try_clone()?;
        let mut line = String::new();
        BufReader::new(reader).read_line(&mut line)?;
        match serde_json::from_str::<ToWorker>(&line) {
            Ok(ToWorker::Go) => Ok(()),
            Ok(other) => Err(std::io::Error::other(format!(
                "told {other:?} while waiting to go"
            ))),
            Err(_) => Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the supervisor called the upgrade off",
            )),
        }
    }

    /// Reads the supervisor's messages on a thread of its own from now on:
    /// a hand-over runs `hand_over` (once), news of the previous worker's
    /// death runs `previous_worker_died`, and an upgrade's outcome goes to
    /// [`WorkerLink::request_upgrade`]'s caller.
    pub fn listen(
        self: &Arc<Self>,
        hand_over: HandOver,
        previous_worker_died: PreviousWorkerDied,
    ) -> std::io::Result<()> {
        let reader = self.writer.lock().try_clone()?;
        let link = self.clone();
        std::thread::Builder::new()
            .name("voodu-supervisor-link".into())
            .spawn(move || {
                let mut hand_over = Some(hand_over);
                for line in BufReader::new(reader).lines() {
                    let Ok(line) = line else { return };
                    let message = match serde_json::from_str::<ToWorker>(&line) {
                        Ok(message) => message,
                        Err(error) => {
                            tracing::warn!(%error, "the supervisor sent a line that is no message");
                            continue;
                        }
                    };
                    match message {
                        ToWorker::HandOver { unloaded } => {
                            let answer = match hand_over.take() {
                                Some(hand_over) => match hand_over(&unloaded) {
                                    Ok(()) => FromWorker::HandedOver,
                                    Err(reason) => FromWorker::KeepServing { reason },
                                },
                                None => FromWorker::HandedOver,
                            };
                            if let Err(error) = link.tell(&answer) {
                                tracing::warn!(%error, "the supervisor could not be answered");
                            }
                        }
                        ToWorker::Upgraded { worker } => link.settle_upgrade(Ok(worker)),
                        ToWorker::UpgradeFailed { reason } => {
                            tracing::warn!("the upgrade did not happen: {reason}");
                            link.settle_upgrade(Err(reason));
                        }
                        ToWorker::PreviousWorkerDied {
                            how,
                            connections_cut,
                            death,
                        } => {
                            previous_worker_died(&how, &connections_cut);
                            if let Err(error) = link.tell(&FromWorker::DeathRecorded { death }) {
                                tracing::warn!(%error, "the supervisor could not be told a death was recorded");
                            }
                        }
                        ToWorker::Go => {}
                    }
                }
            })?;
        Ok(())
    }

    fn settle_upgrade(&self, outcome: Result<WorkerInfo, String>) {
        if let Some(waiter) = self.waiters.lock().upgrade.take() {
            let _ = waiter.send(outcome);
        }
    }

    /// Asks the supervisor for an upgrade and waits, at most `deadline`,
    /// for how it ended: the new worker, or why the old one keeps serving.
    pub fn request_upgrade(&self, deadline: std::time::Duration) -> Result<WorkerInfo, String> {
        let (sender, outcome) = std::sync::mpsc::channel();
        {
            let mut waiters = self.waiters.lock();
            if waiters.upgrade.is_some() {
                return Err("an upgrade is already under way — wait for it".into());
            }
            waiters.upgrade = Some(sender);
        }
        if let Err(error) = self.tell(&FromWorker::UpgradeRequested) {
            self.waiters.lock().upgrade = None;
            return Err(format!("the supervisor could not be asked: {error}"));
        }
        outcome.recv_timeout(deadline).unwrap_or_else(|_| {
            self.waiters.lock().upgrade = None;
            Err(format!(
                "no outcome within {} — see the controller's log",
                humantime::format_duration(deadline)
            ))
        })
    }
}
