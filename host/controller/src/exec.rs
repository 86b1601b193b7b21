//! `vd exec`: a command in one running replica. The node the client asks
//! runs it when the replica is its own; in a cluster, a replica of another
//! node is reached over the node-to-node channel ([`PeerRequest::Exec`]),
//! its output relayed as it comes and an interactive session's input sent
//! on after the request line. That channel must be mutual TLS on both
//! ends: an exec changes what runs, so neither the asking node nor the
//! answering one carries it over plain TCP.

use futures_util::StreamExt;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};
use tokio_util::codec::{FramedRead, LinesCodec};

use voodu_api::peer::PeerRequest;
use voodu_api::{Failure, Frame, Response};
use voodu_model::WorkloadId;
use voodu_runtime::{ExecCommand, ExecInput, ExecSession, Replica};

use crate::Controller;

/// What `vd exec` asks for, on whichever node it runs.
pub(crate) struct ExecOrder<'a> {
    /// The workload.
    pub workload: &'a WorkloadId,
    /// The replica (its id, or a statefulset's ordinal); `None`: the
    /// oldest running one, here first.
    pub replica: Option<&'a str>,
    /// The command.
    pub command: ExecCommand,
    /// An interactive session's terminal and input.
    pub session: Option<ExecSession>,
}

impl<'a> ExecOrder<'a> {
    /// The order of an exec request: its session, when it asks for one,
    /// fed by `input` (the lines after its request).
    pub fn new(
        workload: &'a WorkloadId,
        replica: Option<&'a str>,
        command: ExecCommand,
        session: Option<voodu_api::ExecSession>,
        input: Option<UnboundedReceiver<ExecInput>>,
    ) -> ExecOrder<'a> {
        ExecOrder {
            workload,
            replica,
            command,
            session: session.zip(input).map(|(session, input)| ExecSession {
                tty: session.tty.map(|size| (size.cols, size.rows)),
                input,
            }),
        }
    }
}

/// Why a replica is not reached: the fix names what to do.
fn no_mutual_tls(workload: &WorkloadId, replica: &str, node: &str) -> Failure {
    Failure::new(format!(
        "{workload}: replica {replica} runs on node {node}, and an exec there goes over the node-to-node channel, which this node keeps to reads unless it is mutual TLS — start every node with --peer-cacert, --peer-cert and --peer-key (docs/security.md), or run vd exec on {node} (vd -H ssh://{node} ...)"
    ))
}

/// `vd exec` as the client asked it: on this node's replica, or on the
/// node that runs it. Answered with [`Response::Exited`]; `None` when the
/// client hung up.
pub(crate) async fn exec(
    controller: &Controller,
    order: ExecOrder<'_>,
    frames: &UnboundedSender<Frame>,
) -> Result<Option<Response>, Failure> {
    let running = running_here(controller, order.workload).await?;
    let here = match order.replica {
        Some(wanted) => running.iter().find(|replica| replica.replica_id == wanted),
        None => running.first(),
    };
    if let Some(chosen) = here {
        return exec_in(
            controller,
            order.workload,
            chosen,
            order.command,
            order.session,
            frames,
        )
        .await;
    }
    let mut unanswered = Vec::new();
    if controller.cluster().is_some() {
        let (found, left_out) =
            running_elsewhere(controller, order.workload, order.replica).await?;
        if let Some((node, replica_id)) = found {
            return exec_on_node(controller, &node, &replica_id, order, frames).await;
        }
        unanswered = left_out;
    }
    let workload = order.workload;
    // A node that did not answer may run it: name it, not "no node".
    if !unanswered.is_empty() {
        let left_out: Vec<String> = unanswered.iter().map(ToString::to_string).collect();
        return Err(Failure::new(format!(
            "{workload}: no node that answered runs {} — {}",
            order.replica.map_or_else(
                || "a replica of it".to_owned(),
                |wanted| format!("replica {wanted}")
            ),
            left_out.join("; ")
        )));
    }
    let anywhere = if controller.cluster().is_some() {
        "on any node"
    } else {
        "here"
    };
    Err(Failure::new(match order.replica {
        Some(wanted) => {
            let listed: Vec<&str> = running.iter().map(|r| r.replica_id.as_str()).collect();
            format!(
                "{workload}: no running replica {wanted} {anywhere} — running here: {} (vd get pods {workload} lists them all)",
                if listed.is_empty() { "none".to_owned() } else { listed.join(", ") }
            )
        }
        None => format!(
            "{workload}: no replica of it runs {anywhere} — vd get pods {workload} shows its replicas"
        ),
    }))
}

/// Another node's [`PeerRequest::Exec`]: the replica must be this node's
/// own (a peer's exec is never passed on), and the channel it came on must
/// be mutual TLS.
pub(crate) async fn exec_for_peer(
    controller: &Controller,
    order: ExecOrder<'_>,
    frames: &UnboundedSender<Frame>,
) -> Result<Option<Response>, Failure> {
    let workload = order.workload;
    let node = controller.node_name().unwrap_or_default();
    let Some(wanted) = order.replica else {
        return Err(Failure::new(format!(
            "{workload}: a peer's exec names its replica"
        )));
    };
    if controller.peer_tls.is_none() {
        return Err(no_mutual_tls(workload, wanted, &node));
    }
    let running = running_here(controller, workload).await?;
    let Some(chosen) = running.iter().find(|replica| replica.replica_id == wanted) else {
        return Err(Failure::new(format!(
            "{workload}: replica {wanted} does not run on node {node} now"
        )));
    };
    exec_in(
        controller,
        workload,
        chosen,
        order.command,
        order.session,
        frames,
    )
    .await
}

/// This node's running replicas (and runs) of `workload`, oldest first.
async fn running_here(
    controller: &Controller,
    workload: &WorkloadId,
) -> Result<Vec<Replica>, Failure> {
    let Some(reconciler) = controller.reconciler() else {
        return Err(Failure::new(
            "this controller runs without Docker (--no-docker), so it has no replicas to run a command in",
        ));
    };
    let replicas = reconciler
        .replicas_and_runs(Some(workload))
        .await
        .map_err(|error| Failure::new(error.to_string()))?;
    Ok(replicas
        .into_iter()
        .filter(|replica| replica.is_running())
        .collect())
}

/// Runs the command in `chosen`, here, what it writes sent as `output`
/// frames as it comes.
async fn exec_in(
    controller: &Controller,
    workload: &WorkloadId,
    chosen: &Replica,
    command: ExecCommand,
    session: Option<ExecSession>,
    frames: &UnboundedSender<Frame>,
) -> Result<Option<Response>, Failure> {
    let Some(reconciler) = controller.reconciler() else {
        return Ok(None);
    };
    let exit_code = match crate::stream::forward_output(frames, |sender| async move {
        reconciler
            .exec_in(chosen, &command, &sender, session)
            .await
            .map_err(|error| Failure::new(format!("{workload}: {error}")))
    })
    .await?
    {
        Some(code) => code,
        None => return Ok(None),
    };
    Ok(Some(Response::Exited {
        replica_id: chosen.replica_id.clone(),
        exit_code,
    }))
}

/// The node that runs `wanted` of `workload` (or, with none wanted, the
/// first running replica of another node), with the replica's id; and the
/// nodes that did not answer.
async fn running_elsewhere(
    controller: &Controller,
    workload: &WorkloadId,
    wanted: Option<&str>,
) -> Result<(Option<(String, String)>, Vec<voodu_api::peer::Unanswered>), Failure> {
    let asked = PeerRequest::Pods {
        workload: Some(workload.clone()),
    };
    let (answers, unanswered) =
        crate::peers::ask_every_node(controller, asked, false, &|_, _| {}).await?;
    let mut running = answers.into_iter().flat_map(|(node, answer)| match answer {
        Response::Pods { replicas, .. } => replicas
            .into_iter()
            .filter(|replica| replica.state == "running")
            .map(|replica| (node.clone(), replica.replica_id))
            .collect(),
        _ => Vec::new(),
    });
    let found = match wanted {
        Some(wanted) => running.find(|(_, replica_id)| replica_id == wanted),
        None => running.next(),
    };
    Ok((found, unanswered))
}

/// Runs the command on `node`'s replica `replica_id`, relaying its output
/// frames and the session's input.
async fn exec_on_node(
    controller: &Controller,
    node: &str,
    replica_id: &str,
    order: ExecOrder<'_>,
    frames: &UnboundedSender<Frame>,
) -> Result<Option<Response>, Failure> {
    let workload = order.workload;
    if controller.peer_tls.is_none() {
        return Err(no_mutual_tls(workload, replica_id, node));
    }
    let ExecCommand {
        argv,
        env,
        workdir,
        user,
    } = order.command;
    let (session, input) = match order.session {
        Some(ExecSession { tty, input }) => (
            Some(voodu_api::ExecSession {
                tty: tty.map(|(cols, rows)| voodu_api::TerminalSize { cols, rows }),
            }),
            Some(input_lines(input)),
        ),
        None => (None, None),
    };
    let request = PeerRequest::Exec {
        workload: workload.clone(),
        replica: replica_id.to_owned(),
        command: argv,
        env,
        workdir,
        user,
        session,
    };
    let relay = |_: &str, frame: Frame| {
        let _ = frames.send(frame);
    };
    let asked = crate::peers::ask_node(controller, node, request, &relay, input);
    tokio::select! {
        answer = asked => answer
            .map(Some)
            .map_err(|reason| Failure::new(format!("{workload}: the exec on node {node} ended without its exit code: {reason}"))),
        // The client hung up: dropping the peer's connection ends the
        // command's session there.
        () = frames.closed() => Ok(None),
    }
}

/// An interactive session's input, as the lines a peer reads.
fn input_lines(mut input: UnboundedReceiver<ExecInput>) -> UnboundedReceiver<voodu_api::ExecInput> {
    let (sender, lines) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(piece) = input.recv().await {
            let line = match piece {
                ExecInput::Stdin(bytes) => voodu_api::ExecInput::Stdin(bytes),
                ExecInput::Resize { cols, rows } => {
                    voodu_api::ExecInput::Resize(voodu_api::TerminalSize { cols, rows })
                }
                ExecInput::Eof => voodu_api::ExecInput::Eof,
            };
            let last = line == voodu_api::ExecInput::Eof;
            if sender.send(line).is_err() || last {
                return;
            }
        }
    });
    lines
}

/// The [`voodu_api::ExecInput`] lines a client (or the asking node) sends
/// after an interactive exec's request, as they come; a line that does not
/// read, or the sender hanging up, ends its standard input.
pub(crate) fn session_input<R>(mut lines: FramedRead<R, LinesCodec>) -> UnboundedReceiver<ExecInput>
where
    R: tokio::io::AsyncRead + Unpin + Send + 'static,
{
    let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(Ok(line)) = lines.next().await {
            let input = match serde_json::from_str::<voodu_api::ExecInput>(&line) {
                Ok(voodu_api::ExecInput::Stdin(bytes)) => ExecInput::Stdin(bytes),
                Ok(voodu_api::ExecInput::Resize(size)) => ExecInput::Resize {
                    cols: size.cols,
                    rows: size.rows,
                },
                Ok(voodu_api::ExecInput::Eof) | Err(_) => break,
            };
            if sender.send(input).is_err() {
                return;
            }
        }
        let _ = sender.send(ExecInput::Eof);
    });
    receiver
}
