//! The node-to-node views of a cluster: each node answers the others'
//! requests for its own share of a view on its **peer listener** (its
//! `--advertise` address, `--peer-port`), and asks every other live node
//! for theirs when a client asks it for the whole cluster's
//! ([`ask_every_node`]). So `vd get pods`, `vd stats`, `vd logs`, `vd
//! describe` and `vd rollout status` answer the same from any node.
//!
//! A node that does not answer (within [`CONNECT_WITHIN`], or
//! [`ANSWER_WITHIN`] for a view that does not stream), that is lost while
//! it streams, or that the cluster counts lost, is named in the answer
//! ([`Unanswered`]), never silently left out.
//!
//! Peer requests only read ([`PeerRequest`]), but for an exec into a
//! replica ([`crate::exec`]), which both ends carry only over mutual
//! TLS. With `--peer-cacert`,
//! `--peer-cert` and `--peer-key` the channel is mutual TLS ([`tls`]): a
//! peer without a certificate of the cluster's CA is refused. Without
//! them, the listener is as open as the advertise address: put it on the
//! hosts' private network.

pub mod tls;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc::UnboundedSender;
use tokio_util::codec::{FramedRead, LinesCodec};
use voodu_api::peer::{PeerRequest, PeerRequestLine, MAX_PEER_REQUEST_BYTES};
use voodu_api::{Failure, Frame, Response, Unanswered, PROTOCOL_VERSION};

use voodu_store_etcd::EtcdStore;

use crate::server::write_frame;
use crate::Controller;

/// How long a node waits to connect to another.
pub const CONNECT_WITHIN: Duration = Duration::from_secs(2);
/// How long a node waits for another's answer to a view that does not
/// stream (its replicas, their usage).
pub const ANSWER_WITHIN: Duration = Duration::from_secs(5);
/// How often a node streaming from another (logs, a rollout) checks that
/// the cluster still counts it alive: a frozen or cut-off host answers
/// nothing, and is named once its lease lapses.
const ALIVE_CHECK_EVERY: Duration = Duration::from_secs(1);
/// How long an asking node may take to send its request line.
const REQUEST_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The owner the peer port is held for in the socket table: no plugin can
/// take the name (a plugin name has no space).
pub const PEERS_OWNER: &str = "controller peers";

/// The file in the root that keeps the address a port-0 peer listener got,
/// so the next worker of the root (an upgrade's, or one replacing a worker
/// that died) asks for the same socket, which its supervisor holds.
const PEER_ADDRESS_FILE: &str = "peer-address";

/// Binds the peer listener at `address` and serves it until the runtime
/// ends; the address bound, with the port chosen for port 0. It is asked
/// of the socket table, so under a supervisor the socket is the
/// supervisor's and every later worker serves the same one. A port held by
/// another process (another node on this host) fails the start: give each
/// node on one host its own `--peer-port`.
pub fn listen(
    controller: Arc<Controller>,
    root: &std::path::Path,
    address: SocketAddr,
) -> std::io::Result<SocketAddr> {
    let table = voodu_plugin_host::listeners::ListenerTable::process();
    let kept = root.join(PEER_ADDRESS_FILE);
    let earlier: Option<SocketAddr> = std::fs::read_to_string(&kept)
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .filter(|earlier: &SocketAddr| address.port() == 0 && earlier.ip() == address.ip());
    let held = earlier
        .and_then(|earlier| table.listen_at(PEERS_OWNER, earlier, false).ok())
        .map_or_else(|| table.listen_at(PEERS_OWNER, address, false), Ok)
        .map_err(|error| std::io::Error::other(error.to_string()))?;
    let (socket, bound) = held;
    if address.port() == 0 {
        let _ = std::fs::write(&kept, bound.to_string());
    }
    let listener = std::net::TcpListener::from(socket);
    listener.set_nonblocking(true)?;
    let listener = TcpListener::from_std(listener)?;
    tokio::spawn(serve(controller, listener));
    Ok(bound)
}

/// A connection to or from a peer: plain TCP, or TLS over it.
trait PeerStream: AsyncRead + AsyncWrite + Unpin + Send {}

impl<T: AsyncRead + AsyncWrite + Unpin + Send> PeerStream for T {}

async fn serve(controller: Arc<Controller>, listener: TcpListener) {
    loop {
        match listener.accept().await {
            Ok((stream, from)) => {
                let _ = stream.set_nodelay(true);
                let controller = controller.clone();
                tokio::spawn(async move {
                    let Some(tls) = controller.peer_tls.clone() else {
                        return answer(controller, Box::new(stream), from).await;
                    };
                    match tokio::time::timeout(REQUEST_READ_TIMEOUT, tls.accept(stream)).await {
                        Ok(Ok(stream)) => answer(controller, Box::new(stream), from).await,
                        Ok(Err(error)) => {
                            tracing::warn!(%from, %error, "refused a peer connection without a certificate of the cluster's CA")
                        }
                        Err(_) => {
                            tracing::warn!(%from, "refused a peer connection that did not finish its TLS handshake in time")
                        }
                    }
                });
            }
            Err(error) => {
                tracing::warn!(%error, "accepting a peer's connection failed");
                tokio::time::sleep(crate::server::ACCEPT_BACKOFF).await;
            }
        }
    }
}

/// Answers one peer's request on `stream`.
async fn answer(controller: Arc<Controller>, stream: Box<dyn PeerStream>, from: SocketAddr) {
    let (reader, mut writer) = tokio::io::split(stream);
    let mut lines = FramedRead::new(
        reader,
        LinesCodec::new_with_max_length(MAX_PEER_REQUEST_BYTES),
    );
    let request = match tokio::time::timeout(REQUEST_READ_TIMEOUT, lines.next()).await {
        Ok(Some(Ok(line))) => match serde_json::from_str::<PeerRequestLine>(&line) {
            Ok(line) if line.protocol != PROTOCOL_VERSION => Err(Failure::new(format!(
                "node {} speaks protocol {}, this node {PROTOCOL_VERSION} — run one voodu version on every node",
                line.from, line.protocol
            ))),
            Ok(line) if controller.node_name().as_deref() != Some(line.to.as_str()) => {
                Err(Failure::new(format!(
                    "this is node {}, not {} — does another node answer at this address?",
                    controller.node_name().unwrap_or_default(),
                    line.to
                )))
            }
            Ok(line) => Ok(line),
            Err(error) => Err(Failure::new(format!("malformed peer request: {error}"))),
        },
        Ok(Some(Err(error))) => Err(Failure::new(format!("cannot read the peer request: {error}"))),
        Ok(None) => return,
        Err(_) => Err(Failure::new("no peer request line in time")),
    };
    let request = match request {
        Ok(line) => {
            tracing::debug!(from = %line.from, %from, request = ?line.request, "a peer asks");
            line.request
        }
        Err(failure) => {
            let _ = write_frame(&mut writer, &Frame::Failed(failure)).await;
            return;
        }
    };
    // An interactive exec's input: the lines after its request.
    let input = matches!(
        request,
        PeerRequest::Exec {
            session: Some(_),
            ..
        }
    )
    .then(|| crate::exec::session_input(lines));
    let (frames, mut outgoing) = tokio::sync::mpsc::unbounded_channel::<Frame>();
    tokio::spawn(answer_here(controller, request, frames, input));
    while let Some(frame) = outgoing.recv().await {
        if write_frame(&mut writer, &frame).await.is_err() {
            // The asking node went away: dropping `outgoing` ends a stream.
            break;
        }
    }
}

/// This node's own share of a view, as `frames`, ending in `done` or
/// `failed` (nothing when the asker went away first).
async fn answer_here(
    controller: Arc<Controller>,
    request: PeerRequest,
    frames: UnboundedSender<Frame>,
    input: Option<tokio::sync::mpsc::UnboundedReceiver<voodu_runtime::ExecInput>>,
) {
    let end = match request {
        PeerRequest::BuildContext { digest } => {
            let node = controller.node_name().unwrap_or_default();
            if controller.peer_tls.is_none() {
                Err(Failure::new(format!(
                    "node {node} sends a build context (the workload's source) only over mutual TLS — start every node with --peer-cacert, --peer-cert and --peer-key (docs/security.md)"
                )))
            } else {
                let root = controller.root().to_owned();
                blocking(move || {
                    crate::build_context::kept(&root, &digest)
                        .map(|archive| Some(Response::BuildContext { archive }))
                        .map_err(|error| {
                            Failure::new(format!(
                                "node {node} keeps no build context {digest}: {error}"
                            ))
                        })
                })
                .await
            }
        }
        PeerRequest::Exec {
            workload,
            replica,
            command,
            env,
            workdir,
            user,
            session,
        } => {
            let command = voodu_runtime::ExecCommand {
                argv: command,
                env,
                workdir,
                user,
            };
            let order =
                crate::exec::ExecOrder::new(&workload, Some(&replica), command, session, input);
            crate::exec::exec_for_peer(&controller, order, &frames).await
        }
        PeerRequest::Pods { workload } => {
            let controller = controller.clone();
            blocking(move || {
                crate::verbs::pods::here(&controller, workload.as_ref()).map(|replicas| {
                    Some(Response::Pods {
                        replicas,
                        unanswered: Vec::new(),
                    })
                })
            })
            .await
        }
        PeerRequest::Stats { workload } => {
            let controller = controller.clone();
            blocking(move || {
                crate::verbs::stats::here(&controller, workload.as_ref()).map(|replicas| {
                    Some(Response::Stats {
                        replicas,
                        unanswered: Vec::new(),
                    })
                })
            })
            .await
        }
        PeerRequest::Logs {
            workload,
            follow,
            since_unix,
            tail,
            replica,
        } => {
            let request = voodu_runtime::LogRequest {
                follow,
                since_unix,
                tail,
            };
            crate::stream::logs_here(
                &controller,
                &workload,
                replica.as_deref(),
                &request,
                &frames,
            )
            .await
        }
        PeerRequest::Wait {
            workloads,
            timeout_ms,
        } => crate::stream::wait_here(&controller, &workloads, None, timeout_ms, &frames).await,
    };
    let frame = match end {
        Ok(Some(response)) => Frame::Done(Box::new(response)),
        Ok(None) => return,
        Err(failure) => Frame::Failed(failure),
    };
    let _ = frames.send(frame);
}

async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, Failure> + Send + 'static,
) -> Result<T, Failure> {
    crate::off_the_runtime(work, |error| {
        Failure::new(format!("the answer failed: {error}"))
    })
    .await
}

/// Another node of the cluster, as this node asks it.
#[derive(Debug, Clone)]
struct Peer {
    name: String,
    address: SocketAddr,
}

/// The other live nodes that listen for peers, and the nodes left out of
/// any view: lost ones (until `vd node remove`), and live ones that do not
/// listen yet.
fn other_nodes(store: &EtcdStore, this: &str) -> Result<(Vec<Peer>, Vec<Unanswered>), Failure> {
    let records = store
        .nodes()
        .map_err(|error| Failure::new(format!("cannot list the cluster's nodes: {error}")))?;
    let mut peers = Vec::new();
    let mut left_out = Vec::new();
    for record in records.into_iter().filter(|record| record.name != this) {
        match (record.alive, record.report.peer) {
            (true, Some(address)) => peers.push(Peer {
                name: record.name,
                address,
            }),
            (true, None) => left_out.push(Unanswered {
                lost: false,
                reason: "it has not said where it answers the other nodes yet (it is starting, or runs an older voodu) — ask again in a few seconds".to_owned(),
                node: record.name,
            }),
            (false, _) => left_out.push(Unanswered {
                lost: true,
                reason: format!(
                    "it is lost (its lease lapsed; last seen {}) — its replicas are not seen until it is back; `vd node remove {}` once its host is gone for good",
                    voodu_store::rfc3339(record.last_seen_ms),
                    record.name
                ),
                node: record.name,
            }),
        }
    }
    Ok((peers, left_out))
}

/// Whether the cluster still counts `node` alive (true when it cannot
/// tell: the store is asked again at the next check).
async fn still_alive(store: &Arc<EtcdStore>, node: &str) -> bool {
    let store = store.clone();
    let node = node.to_owned();
    tokio::task::spawn_blocking(move || match store.nodes() {
        Ok(records) => records
            .iter()
            .any(|record| record.name == node && record.alive),
        Err(_) => true,
    })
    .await
    .unwrap_or(true)
}

/// Every other node's answer to `request`, asked at once: each answer
/// beside its node's name, and the nodes left out with why. Each node's
/// frames before its answer (log lines, a rollout's steps) go to
/// `on_frame` as they come; a stream (`streams`) is given up only when its
/// node is lost or the connection breaks, any other request after
/// [`ANSWER_WITHIN`].
/// `mine` (this node's rows of a view) with every other node's, asked
/// with `request` and taken out of each answer by `rows_of`, in `order`;
/// and the nodes left out. Without a cluster, `mine` alone, in `order`.
pub(crate) fn with_every_node<R>(
    controller: &Controller,
    mut mine: Vec<R>,
    request: PeerRequest,
    rows_of: impl Fn(Response) -> Option<Vec<R>>,
    order: impl FnMut(&R, &R) -> std::cmp::Ordering,
) -> Result<(Vec<R>, Vec<Unanswered>), Failure> {
    let mut unanswered = Vec::new();
    if controller.cluster().is_some() {
        let (answers, left_out) =
            crate::block_on(ask_every_node(controller, request, false, &|_, _| {}))?;
        for (_, answer) in answers {
            mine.extend(rows_of(answer).into_iter().flatten());
        }
        unanswered = left_out;
    }
    mine.sort_by(order);
    Ok((mine, unanswered))
}

pub(crate) async fn ask_every_node(
    controller: &Controller,
    request: PeerRequest,
    streams: bool,
    on_frame: &(dyn Fn(&str, Frame) + Sync),
) -> Result<(Vec<(String, Response)>, Vec<Unanswered>), Failure> {
    let Some(cluster) = controller.cluster() else {
        return Ok((Vec::new(), Vec::new()));
    };
    let store = cluster.store.clone();
    let from = cluster.membership.name().to_owned();
    // A node cut off from the store still answers for itself, and says
    // the others are left out.
    let (peers, mut left_out) = listed_nodes(&store, &from)
        .await
        .unwrap_or_else(|reason| (Vec::new(), vec![everyone_left_out(reason)]));
    let store = &store;
    let asks = peers.into_iter().map(|peer| {
        let line = PeerRequestLine::new(from.clone(), peer.name.clone(), request.clone());
        async move {
            let asked = ask(&peer, controller.peer_tls.as_deref(), &line, on_frame, None);
            let answer = if streams {
                unless_lost(store, &peer.name, asked).await
            } else {
                tokio::time::timeout(ANSWER_WITHIN, asked)
                    .await
                    .unwrap_or_else(|_| {
                        Err(format!(
                            "it did not answer within {}s",
                            ANSWER_WITHIN.as_secs()
                        ))
                    })
            };
            (peer, answer)
        }
    });
    let mut answers = Vec::new();
    for (peer, answer) in futures_util::future::join_all(asks).await {
        match answer {
            Ok(response) => answers.push((peer.name, response)),
            Err(reason) => left_out.push(Unanswered {
                lost: false,
                reason: format!("{reason} (asked at {})", peer.address),
                node: peer.name,
            }),
        }
    }
    left_out.sort_by(|a, b| a.node.cmp(&b.node));
    Ok((answers, left_out))
}

/// The nodes other than `this` ([`other_nodes`]), within
/// [`ANSWER_WITHIN`]; why not, when the store does not list them.
async fn listed_nodes(
    store: &Arc<EtcdStore>,
    this: &str,
) -> Result<(Vec<Peer>, Vec<Unanswered>), String> {
    let (store, this) = (store.clone(), this.to_owned());
    match tokio::time::timeout(ANSWER_WITHIN, blocking(move || other_nodes(&store, &this))).await {
        Ok(Ok(listed)) => Ok(listed),
        Ok(Err(failure)) => Err(failure.message),
        Err(_) => Err(format!(
            "the cluster store did not list the nodes within {}s",
            ANSWER_WITHIN.as_secs()
        )),
    }
}

/// `asked`'s answer, given up when `node` is lost meanwhile (its lease
/// lapsed): a stream from a dead node would otherwise wait for good.
async fn unless_lost(
    store: &Arc<EtcdStore>,
    node: &str,
    asked: impl std::future::Future<Output = Result<Response, String>>,
) -> Result<Response, String> {
    let lost = async {
        loop {
            tokio::time::sleep(ALIVE_CHECK_EVERY).await;
            if !still_alive(store, node).await {
                return;
            }
        }
    };
    tokio::select! {
        answer = asked => answer,
        () = lost => Err("it was lost while it answered (its lease lapsed)".to_owned()),
    }
}

/// One node's answer to `request`, its frames passed to `on_frame` as they
/// come and `input` sent on after the request line (an interactive exec's
/// session); given up if the node is lost meanwhile.
pub(crate) async fn ask_node(
    controller: &Controller,
    node: &str,
    request: PeerRequest,
    on_frame: &(dyn Fn(&str, Frame) + Sync),
    input: Option<tokio::sync::mpsc::UnboundedReceiver<voodu_api::ExecInput>>,
) -> Result<Response, String> {
    let Some(cluster) = controller.cluster() else {
        return Err("this node is in no cluster".to_owned());
    };
    let store = cluster.store.clone();
    let from = cluster.membership.name().to_owned();
    let (peers, left_out) = listed_nodes(&store, &from).await?;
    let Some(peer) = peers.into_iter().find(|peer| peer.name == node) else {
        return Err(left_out
            .into_iter()
            .find(|unanswered| unanswered.node == node)
            .map(|unanswered| unanswered.reason)
            .unwrap_or_else(|| "it is no live node of the cluster".to_owned()));
    };
    let line = PeerRequestLine::new(from, peer.name.clone(), request);
    let asked = ask(
        &peer,
        controller.peer_tls.as_deref(),
        &line,
        on_frame,
        input,
    );
    unless_lost(&store, &peer.name, asked).await
}

/// How long a node waits for another to send a build context (up to
/// [`voodu_api::MAX_REQUEST_BYTES`] of it).
const CONTEXT_WITHIN: Duration = Duration::from_secs(120);

/// Where a node of a cluster fetches the build contexts it lacks: from the
/// other nodes, over the node-to-node channel's mutual TLS; each context
/// fetched is kept here too, so any node that built an image can give its
/// context on.
#[derive(Debug, Clone)]
pub(crate) struct ContextSource {
    /// The cluster store, which lists the nodes.
    pub store: Arc<EtcdStore>,
    /// This node's name.
    pub node: String,
    /// The channel's TLS; without it no context is fetched.
    pub tls: Option<Arc<tls::PeerTls>>,
    /// This node's root, whose `contexts/` keeps them.
    pub root: std::path::PathBuf,
}

impl ContextSource {
    /// The context of `digest`: asked of `kept_by` first, then of every
    /// other live node in turn, until one sends it; why not, naming each
    /// node asked. Its digest is checked by the caller, who knows the
    /// build it is for.
    pub(crate) async fn fetch(
        &self,
        digest: &voodu_model::build::ContextDigest,
        kept_by: Option<&str>,
    ) -> Result<Vec<u8>, String> {
        let Some(tls) = self.tls.as_deref() else {
            return Err("a build context (the workload's source) travels between nodes only over mutual TLS — start every node with --peer-cacert, --peer-cert and --peer-key (docs/security.md)".to_owned());
        };
        let (mut peers, left_out) = listed_nodes(&self.store, &self.node).await?;
        // The node that built it first, the others after, by name.
        peers.sort_by_key(|peer| (Some(peer.name.as_str()) != kept_by, peer.name.clone()));
        let mut reasons: Vec<String> = left_out
            .iter()
            .filter(|unanswered| Some(unanswered.node.as_str()) == kept_by)
            .map(|unanswered| format!("node {}: {}", unanswered.node, unanswered.reason))
            .collect();
        for peer in peers {
            let line = PeerRequestLine::new(
                self.node.clone(),
                peer.name.clone(),
                PeerRequest::BuildContext {
                    digest: digest.clone(),
                },
            );
            let asked = ask(&peer, Some(tls), &line, &|_, _| {}, None);
            let answer =
                tokio::time::timeout(CONTEXT_WITHIN, unless_lost(&self.store, &peer.name, asked))
                    .await
                    .unwrap_or_else(|_| {
                        Err(format!(
                            "it did not send it within {}s",
                            CONTEXT_WITHIN.as_secs()
                        ))
                    });
            match answer {
                Ok(Response::BuildContext { archive }) => {
                    tracing::info!(node = %peer.name, %digest, bytes = archive.len(), "fetched a build context");
                    return Ok(archive);
                }
                Ok(_) => reasons.push(format!(
                    "node {}: it answered something other than a context",
                    peer.name
                )),
                Err(reason) => reasons.push(format!("node {}: {reason}", peer.name)),
            }
        }
        if reasons.is_empty() {
            reasons.push("no other node is live".to_owned());
        }
        Err(format!(
            "no node sent the build context {digest} ({})",
            reasons.join("; ")
        ))
    }

    /// Keeps a context fetched (and checked), for the nodes that ask next.
    pub(crate) fn keep(&self, digest: &voodu_model::build::ContextDigest, archive: &[u8]) {
        if let Err(error) = crate::build_context::keep(&self.root, digest, archive) {
            tracing::warn!(%digest, %error, "could not keep a fetched build context");
        }
    }
}

/// Every other node left out, for `reason`.
fn everyone_left_out(reason: String) -> Unanswered {
    Unanswered {
        node: String::new(),
        lost: false,
        reason,
    }
}

/// One node's answer to `line`: its final response, or why there is none.
async fn ask(
    peer: &Peer,
    tls: Option<&tls::PeerTls>,
    line: &PeerRequestLine,
    on_frame: &(dyn Fn(&str, Frame) + Sync),
    input: Option<tokio::sync::mpsc::UnboundedReceiver<voodu_api::ExecInput>>,
) -> Result<Response, String> {
    let stream = tokio::time::timeout(CONNECT_WITHIN, TcpStream::connect(peer.address))
        .await
        .map_err(|_| {
            format!(
                "it did not accept a connection within {}s",
                CONNECT_WITHIN.as_secs()
            )
        })?
        .map_err(|error| format!("cannot connect: {error}"))?;
    let _ = stream.set_nodelay(true);
    let stream: Box<dyn PeerStream> = match tls {
        Some(tls) => Box::new(
            tokio::time::timeout(CONNECT_WITHIN, tls.connect(&peer.name, stream))
                .await
                .map_err(|_| {
                    format!(
                        "it did not finish the TLS handshake within {}s",
                        CONNECT_WITHIN.as_secs()
                    )
                })??,
        ),
        None => Box::new(stream),
    };
    let (reader, mut writer) = tokio::io::split(stream);
    let mut request = serde_json::to_vec(line).map_err(|error| error.to_string())?;
    request.push(b'\n');
    writer
        .write_all(&request)
        .await
        .map_err(|error| format!("cannot send the request: {error}"))?;
    // The session's input, a line each, for as long as the answer lasts.
    let _sending = input
        .map(|mut input| {
            tokio::spawn(async move {
                while let Some(piece) = input.recv().await {
                    let Ok(mut line) = serde_json::to_vec(&piece) else {
                        return;
                    };
                    line.push(b'\n');
                    if writer.write_all(&line).await.is_err() {
                        return;
                    }
                }
            })
        })
        .map(AbortOnDrop);
    let mut frames = FramedRead::new(
        reader,
        LinesCodec::new_with_max_length(voodu_api::MAX_REQUEST_BYTES),
    );
    while let Some(frame) = frames.next().await {
        let frame = frame.map_err(|error| format!("the connection broke: {error}"))?;
        let frame: Frame = serde_json::from_str(&frame)
            .map_err(|error| format!("it answered something unreadable: {error}"))?;
        match frame {
            Frame::Done(response) => return Ok(*response),
            Frame::Failed(failure) => return Err(format!("it failed: {}", failure.message)),
            other => on_frame(&peer.name, other),
        }
    }
    Err("it closed the connection without an answer".to_owned())
}

/// Aborts a task when dropped: the input of an answer that ended stops
/// being sent.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
