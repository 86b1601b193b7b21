//! The engine, through bollard: voodu's containers, the `voodu0` network,
//! and the event stream of voodu's containers.

use std::collections::{BTreeMap, HashMap};

use bollard::errors::Error as BollardError;
use bollard::models::{
    ContainerCreateBody, DeviceMapping, EndpointSettings, HostConfig, HostConfigLogConfig,
    NetworkConnectRequest, NetworkCreateRequest, NetworkingConfig, PortBinding, ResourcesUlimits,
    RestartPolicy, RestartPolicyNameEnum,
};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, CreateImageOptionsBuilder, EventsOptionsBuilder,
    ListContainersOptionsBuilder, RemoveContainerOptionsBuilder, StopContainerOptionsBuilder,
};
use bollard::Docker;
use futures_util::stream::BoxStream;
use futures_util::StreamExt;

use super::naming::{self, NETWORK};
use super::{
    ContainerRuntime, ExecCommand, ExecInput, ExecOutput, ExecSession, InitOutcome, JobRun,
    JobRunEnd, JobRunRequest, LogRequest, Replica, ReplicaSpec, ReplicaUsage, RuntimeEvent,
    StepContainer,
};
use voodu_model::build::Build;
use voodu_model::container::{default_ulimits, InitStep, Ulimit};
use voodu_model::interpolation::fill_replica_variables;
use voodu_model::ports::Protocol;
use voodu_model::probes::Probes;
use voodu_model::WorkloadId;
use voodu_plugin_abi::messages::WorkloadKind;

/// What went wrong talking to the engine.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The engine could not be reached.
    #[error("cannot reach the Docker engine: {0} — is dockerd running, and may this user open /var/run/docker.sock?")]
    Unreachable(BollardError),
    /// The engine refused an operation.
    #[error("Docker could not {action} {target}: {source}")]
    Docker {
        /// What was being done.
        action: &'static str,
        /// To what.
        target: String,
        /// The engine's answer.
        source: BollardError,
    },
    /// The container name is taken by a container this controller does not
    /// own (another voodu root on the host, or a container made by hand).
    #[error("the container name {container} is taken by a container this controller does not own — another voodu root or a hand-made container uses it; remove it, or rename the workload")]
    NameTaken {
        /// The container's name.
        container: String,
    },
    /// The image is not on this host, and the engine could not pull it.
    #[error("the image {image} is not on this host and could not be pulled ({reason}) — `docker images` lists the images here: check the name and tag in the manifest, or load the image (`docker load`, `docker build`) and apply again")]
    ImageUnavailable {
        /// The image as the manifest names it.
        image: String,
        /// What the engine said of the pull.
        reason: String,
    },
    /// A build failed: at which step, and its last lines.
    #[error("the build of {tag} failed: {error}\n{last_lines}")]
    BuildFailed {
        /// The image it was to make.
        tag: String,
        /// What the engine said (`The command '/bin/sh -c false' returned
        /// a non-zero code: 1`).
        error: String,
        /// The build's last lines before it, each indented.
        last_lines: String,
    },
    /// A replica stopped right after it started.
    #[error("replica {container} exited right after it started (state {state}) — check `docker logs {container}`")]
    NotRunning {
        /// The container's name.
        container: String,
        /// Its state.
        state: String,
    },
}

/// A failed build, with its last lines.
fn build_failed(
    tag: &str,
    error: String,
    last: &std::collections::VecDeque<String>,
) -> RuntimeError {
    RuntimeError::BuildFailed {
        tag: tag.to_owned(),
        error: error.trim().to_owned(),
        last_lines: last
            .iter()
            .map(|line| format!("    {line}"))
            .collect::<Vec<_>>()
            .join("\n"),
    }
}

fn status_code(error: &BollardError) -> Option<u16> {
    match error {
        BollardError::DockerResponseServerError { status_code, .. } => Some(*status_code),
        _ => None,
    }
}

/// A connection to the local Docker engine, for the containers of one
/// owner (one controller root).
#[derive(Debug, Clone)]
pub struct DockerRuntime {
    docker: Docker,
    owner: String,
}

impl DockerRuntime {
    /// Connects to the local engine (`DOCKER_HOST` or the default socket),
    /// agrees on an API version, and checks that it answers. `owner` is the
    /// `voodu.owner` label of this controller's containers: the only ones it
    /// lists, removes and hears events of.
    pub async fn connect(owner: impl Into<String>) -> Result<DockerRuntime, RuntimeError> {
        let docker = Docker::connect_with_local_defaults().map_err(RuntimeError::Unreachable)?;
        let docker = docker
            .negotiate_version()
            .await
            .map_err(RuntimeError::Unreachable)?;
        docker.ping().await.map_err(RuntimeError::Unreachable)?;
        Ok(DockerRuntime {
            docker,
            owner: owner.into(),
        })
    }

    fn owned_filters(&self, workload: Option<&WorkloadId>) -> Vec<String> {
        let mut filters = naming::label_filters(workload);
        filters.push(format!("{}={}", naming::OWNER_LABEL, self.owner));
        filters
    }
}

#[async_trait::async_trait]
impl ContainerRuntime for DockerRuntime {
    async fn ensure_network(&self) -> Result<(), RuntimeError> {
        // Engines before Docker 25 accept two networks of one name, and
        // then refuse the name as ambiguous. Every voodu controller on the
        // host takes this lock around looking and creating, so only one
        // creates it.
        let _creating = tokio::task::spawn_blocking(|| {
            let lock = std::fs::File::create(std::env::temp_dir().join("voodu0-network.lock"))?;
            lock.lock()?;
            Ok::<_, std::io::Error>(lock)
        })
        .await
        .ok()
        .and_then(|locked| {
            locked
                .map_err(|error| tracing::warn!(%error, "the network lock is unavailable"))
                .ok()
        });
        match self.docker.inspect_network(NETWORK, None).await {
            Ok(_) => Ok(()),
            Err(error) if status_code(&error) == Some(404) => {
                let request = NetworkCreateRequest {
                    name: NETWORK.to_owned(),
                    driver: Some("bridge".to_owned()),
                    labels: Some(HashMap::from([(
                        naming::CREATED_BY.0.to_owned(),
                        naming::CREATED_BY.1.to_owned(),
                    )])),
                    ..Default::default()
                };
                match self.docker.create_network(request).await {
                    Ok(_) => Ok(()),
                    // Created meanwhile by someone else.
                    Err(error) if status_code(&error) == Some(409) => Ok(()),
                    Err(source) => Err(RuntimeError::Docker {
                        action: "create network",
                        target: NETWORK.to_owned(),
                        source,
                    }),
                }
            }
            Err(source) => Err(RuntimeError::Docker {
                action: "inspect network",
                target: NETWORK.to_owned(),
                source,
            }),
        }
    }

    async fn remove_network_if_unused(&self) -> Result<bool, RuntimeError> {
        // Any owner's container keeps the shared network.
        if !self
            .list_labelled(naming::label_filters(None), None)
            .await?
            .is_empty()
        {
            return Ok(false);
        }
        match self.docker.remove_network(NETWORK).await {
            Ok(()) => Ok(true),
            Err(error) if matches!(status_code(&error), Some(403 | 404 | 409)) => Ok(false),
            Err(source) => Err(RuntimeError::Docker {
                action: "remove network",
                target: NETWORK.to_owned(),
                source,
            }),
        }
    }

    async fn list(&self, workload: Option<&WorkloadId>) -> Result<Vec<Replica>, RuntimeError> {
        self.list_labelled(self.owned_filters(workload), workload)
            .await
    }

    async fn create(&self, spec: &ReplicaSpec) -> Result<Replica, RuntimeError> {
        self.create_replica(spec).await
    }

    async fn start(&self, replica: &Replica) -> Result<Replica, RuntimeError> {
        self.start_replica(replica).await
    }

    async fn remove(&self, replica: &Replica, stop_timeout_secs: i32) -> Result<(), RuntimeError> {
        self.remove_replica(replica, stop_timeout_secs).await
    }

    async fn stop(&self, replica: &Replica, stop_timeout_secs: i32) -> Result<(), RuntimeError> {
        let stop = StopContainerOptionsBuilder::new()
            .t(stop_timeout_secs)
            .build();
        match self
            .docker
            .stop_container(&replica.container_id, Some(stop))
            .await
        {
            Ok(()) => Ok(()),
            Err(error) if matches!(status_code(&error), Some(304 | 404)) => Ok(()),
            Err(source) => Err(RuntimeError::Docker {
                action: "stop",
                target: replica.container_name.clone(),
                source,
            }),
        }
    }

    fn logs(
        &self,
        replica: &Replica,
        request: &LogRequest,
    ) -> BoxStream<'static, Result<String, RuntimeError>> {
        let options = bollard::query_parameters::LogsOptions {
            follow: request.follow,
            stdout: true,
            stderr: true,
            since: request
                .since_unix
                .map_or(0, |since| i32::try_from(since).unwrap_or(i32::MAX)),
            tail: request
                .tail
                .map_or_else(|| "all".to_owned(), |tail| tail.to_string()),
            ..Default::default()
        };
        let container = replica.container_name.clone();
        let mut pending = String::new();
        self.docker
            .logs(&replica.container_id, Some(options))
            .flat_map(move |output| {
                let lines: Vec<Result<String, RuntimeError>> = match output {
                    Ok(output) => {
                        pending.push_str(&output.to_string());
                        let mut lines = Vec::new();
                        while let Some(end) = pending.find('\n') {
                            let line: String = pending.drain(..=end).collect();
                            lines.push(Ok(line.trim_end_matches(['\n', '\r']).to_owned()));
                        }
                        lines
                    }
                    Err(source) => vec![Err(RuntimeError::Docker {
                        action: "read the log of",
                        target: container.clone(),
                        source,
                    })],
                };
                futures_util::stream::iter(lines)
            })
            .boxed()
    }

    async fn exec(
        &self,
        replica: &Replica,
        command: &ExecCommand,
        sink: Option<&tokio::sync::mpsc::UnboundedSender<ExecOutput>>,
        session: Option<ExecSession>,
    ) -> Result<i64, RuntimeError> {
        let failed = |source| RuntimeError::Docker {
            action: "run a command in",
            target: replica.container_name.clone(),
            source,
        };
        let tty = session.as_ref().and_then(|session| session.tty);
        let config = bollard::models::ExecConfig {
            cmd: Some(command.argv.clone()),
            env: (!command.env.is_empty()).then(|| command.env.clone()),
            working_dir: command.workdir.clone(),
            user: command.user.clone(),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            attach_stdin: Some(session.is_some()),
            tty: Some(tty.is_some()),
            ..Default::default()
        };
        let created = self
            .docker
            .create_exec(&replica.container_id, config)
            .await
            .map_err(failed)?;
        let start = bollard::exec::StartExecOptions {
            detach: false,
            tty: tty.is_some(),
            ..Default::default()
        };
        if let bollard::exec::StartExecResults::Attached {
            mut output,
            mut input,
        } = self
            .docker
            .start_exec(&created.id, Some(start))
            .await
            .map_err(failed)?
        {
            // The session's input goes to the command as it comes; its
            // end closes the command's standard input.
            let feeding = session.map(|mut session| {
                let docker = self.docker.clone();
                let exec = created.id.clone();
                tokio::spawn(async move {
                    use tokio::io::AsyncWriteExt;
                    let resize = |cols: u16, rows: u16| {
                        let docker = docker.clone();
                        let exec = exec.clone();
                        async move {
                            let size = bollard::query_parameters::ResizeExecOptions {
                                h: i32::from(rows),
                                w: i32::from(cols),
                            };
                            let _ = docker.resize_exec(&exec, size).await;
                        }
                    };
                    if let Some((cols, rows)) = session.tty {
                        resize(cols, rows).await;
                    }
                    while let Some(piece) = session.input.recv().await {
                        match piece {
                            ExecInput::Stdin(bytes) => {
                                if input.write_all(&bytes).await.is_err() {
                                    break;
                                }
                                let _ = input.flush().await;
                            }
                            ExecInput::Resize { cols, rows } => resize(cols, rows).await,
                            ExecInput::Eof => break,
                        }
                    }
                    let _ = input.shutdown().await;
                })
            });
            // Reading the output to its end waits for the command to
            // finish; it goes to the sink when there is one.
            while let Some(piece) = output.next().await {
                forward_output(sink, piece);
            }
            if let Some(feeding) = feeding {
                feeding.abort();
            }
        }
        let inspected = self
            .docker
            .inspect_exec(&created.id)
            .await
            .map_err(failed)?;
        Ok(inspected.exit_code.unwrap_or(-1))
    }

    fn events(&self) -> BoxStream<'static, Result<RuntimeEvent, RuntimeError>> {
        self.event_stream()
    }

    async fn usage(&self, replica: &Replica) -> Result<ReplicaUsage, RuntimeError> {
        let failed = |source| RuntimeError::Docker {
            action: "read the stats of",
            target: replica.container_name.clone(),
            source,
        };
        // Not one-shot: the engine takes two samples a second apart, so
        // the CPU figure is over that second.
        let options = bollard::query_parameters::StatsOptionsBuilder::new()
            .stream(false)
            .one_shot(false)
            .build();
        let mut stats = self.docker.stats(&replica.container_id, Some(options));
        let Some(sample) = stats.next().await else {
            return Ok(ReplicaUsage::default());
        };
        let mut usage = usage_of(&sample.map_err(failed)?);
        // The engine reports the host's memory as the limit of a container
        // that has none: its own config says whether it has one.
        let inspected = self
            .docker
            .inspect_container(
                &replica.container_id,
                None::<bollard::query_parameters::InspectContainerOptions>,
            )
            .await
            .map_err(failed)?;
        let limited = inspected
            .host_config
            .and_then(|config| config.memory)
            .is_some_and(|bytes| bytes > 0);
        if !limited {
            usage.memory_limit_bytes = None;
        }
        Ok(usage)
    }

    async fn run_init(
        &self,
        replica: &ReplicaSpec,
        step: &InitStep,
    ) -> Result<InitOutcome, RuntimeError> {
        self.run_init_step(replica, step).await
    }

    async fn has_image(&self, tag: &str) -> Result<bool, RuntimeError> {
        match self.docker.inspect_image(tag).await {
            Ok(_) => Ok(true),
            Err(error) if status_code(&error) == Some(404) => Ok(false),
            Err(source) => Err(RuntimeError::Docker {
                action: "look for the image",
                target: tag.to_owned(),
                source,
            }),
        }
    }

    async fn build_image(
        &self,
        tag: &str,
        archive: Vec<u8>,
        build: &Build,
        progress: &(dyn Fn(String) + Send + Sync),
    ) -> Result<(), RuntimeError> {
        let options = bollard::query_parameters::BuildImageOptions {
            dockerfile: build.dockerfile.clone(),
            t: Some(tag.to_owned()),
            rm: true,
            forcerm: true,
            buildargs: Some(build.args.clone().into_iter().collect()),
            labels: Some(HashMap::from([
                (
                    naming::CREATED_BY.0.to_owned(),
                    naming::CREATED_BY.1.to_owned(),
                ),
                (naming::OWNER_LABEL.to_owned(), self.owner.clone()),
            ])),
            ..Default::default()
        };
        let mut stream =
            self.docker
                .build_image(options, None, Some(bollard::body_full(archive.into())));
        // The build's last lines, for a failure's message.
        let mut last: std::collections::VecDeque<String> = std::collections::VecDeque::new();
        while let Some(item) = stream.next().await {
            let info = match item {
                Ok(info) => info,
                Err(BollardError::DockerStreamError { error }) => {
                    return Err(build_failed(tag, error, &last));
                }
                Err(source) => {
                    return Err(RuntimeError::Docker {
                        action: "build the image",
                        target: tag.to_owned(),
                        source,
                    })
                }
            };
            if let Some(detail) = info.error_detail.and_then(|detail| detail.message) {
                return Err(build_failed(tag, detail, &last));
            }
            let lines: Vec<String> = info
                .stream
                .iter()
                .flat_map(|text| text.lines())
                .map(str::trim_end)
                .filter(|line| !line.is_empty())
                .map(str::to_owned)
                .collect();
            for line in lines {
                progress(line.clone());
                last.push_back(line);
                if last.len() > 10 {
                    last.pop_front();
                }
            }
        }
        Ok(())
    }

    async fn step_containers(
        &self,
        workload: Option<&WorkloadId>,
    ) -> Result<Vec<StepContainer>, RuntimeError> {
        let summaries = self
            .list_summaries(INIT_LABEL, workload, "list the init containers of")
            .await?;
        let mut steps: Vec<StepContainer> = summaries
            .into_iter()
            .filter_map(|summary| {
                let labels = summary.labels.as_ref()?;
                Some(StepContainer {
                    workload: naming::identify_workload(labels)?,
                    step: labels.get(INIT_LABEL)?.clone(),
                    store_id: labels.get(naming::STORE_LABEL).cloned(),
                    container_id: summary.id.clone()?,
                    container_name: summary_name(&summary),
                    state: summary_state(&summary),
                    created: summary.created.unwrap_or(0),
                })
            })
            .collect();
        steps.sort_by(|a, b| (a.created, &a.container_name).cmp(&(b.created, &b.container_name)));
        Ok(steps)
    }

    async fn job_runs(&self, workload: Option<&WorkloadId>) -> Result<Vec<JobRun>, RuntimeError> {
        let summaries = self
            .list_summaries(naming::RUN_LABEL, workload, "list the runs of")
            .await?;
        let mut runs = Vec::with_capacity(summaries.len());
        for summary in summaries {
            let Some(labels) = summary.labels.as_ref() else {
                continue;
            };
            let (Some(workload), Some(run_id), Some(container_id)) = (
                naming::identify_workload(labels),
                labels.get(naming::RUN_LABEL),
                summary.id.clone(),
            ) else {
                continue;
            };
            let state = summary_state(&summary);
            // A finished run's exit code is the container's; only the
            // engine's inspection says it.
            let exit_code = if matches!(state.as_str(), "exited" | "dead") {
                match self.docker.inspect_container(&container_id, None).await {
                    Ok(inspected) => inspected.state.and_then(|state| state.exit_code),
                    Err(error) if status_code(&error) == Some(404) => continue,
                    Err(source) => {
                        return Err(RuntimeError::Docker {
                            action: "inspect the run",
                            target: summary_name(&summary),
                            source,
                        })
                    }
                }
            } else {
                None
            };
            runs.push(JobRun {
                run_id: run_id.clone(),
                trigger: labels
                    .get(naming::RUN_TRIGGER_LABEL)
                    .and_then(|trigger| serde_json::from_str(trigger).ok()),
                store_id: labels.get(naming::STORE_LABEL).cloned(),
                container_name: summary_name(&summary),
                container_id,
                workload,
                state,
                created: summary.created.unwrap_or(0),
                exit_code,
            });
        }
        runs.sort_by(|a, b| (a.created, &a.container_name).cmp(&(b.created, &b.container_name)));
        Ok(runs)
    }

    async fn remove_job_run(&self, run: &JobRun) -> Result<(), RuntimeError> {
        self.remove_container(&run.container_id, &run.container_name, 0, true)
            .await
    }

    async fn run_job(
        &self,
        spec: &ReplicaSpec,
        run: &JobRunRequest,
        output: Option<&tokio::sync::mpsc::UnboundedSender<ExecOutput>>,
    ) -> Result<JobRunEnd, RuntimeError> {
        self.run_job_container(spec, run, output).await
    }

    async fn remove_step_container(&self, step: &StepContainer) -> Result<(), RuntimeError> {
        // A step's container has no volumes of its own to keep.
        self.remove_container(&step.container_id, &step.container_name, 0, true)
            .await
    }
}

/// Sends one piece of what a command or a run wrote to `sink`, on the
/// side it was written to, when there is a sink; standard input echoed
/// back and a piece the engine could not read are dropped.
fn forward_output(
    sink: Option<&tokio::sync::mpsc::UnboundedSender<ExecOutput>>,
    piece: Result<bollard::container::LogOutput, BollardError>,
) {
    let (Some(sink), Ok(piece)) = (sink, piece) else {
        return;
    };
    let (stderr, bytes) = match piece {
        bollard::container::LogOutput::StdErr { message } => (true, message),
        bollard::container::LogOutput::StdOut { message }
        | bollard::container::LogOutput::Console { message } => (false, message),
        bollard::container::LogOutput::StdIn { .. } => return,
    };
    let _ = sink.send(ExecOutput {
        stderr,
        bytes: bytes.to_vec(),
    });
}

/// A container's name as the engine lists it, without its leading `/`.
fn summary_name(summary: &bollard::models::ContainerSummary) -> String {
    summary
        .names
        .as_ref()
        .and_then(|names| names.first())
        .map(|name| name.trim_start_matches('/').to_owned())
        .unwrap_or_default()
}

/// A container's state as the engine lists it: `running`, `exited`, ...
fn summary_state(summary: &bollard::models::ContainerSummary) -> String {
    summary
        .state
        .map(|state| state.to_string())
        .unwrap_or_default()
}

/// The label an init step's container carries, with the step's name; it
/// has no replica id, so no listing takes it for a replica.
pub const INIT_LABEL: &str = "voodu.init";

/// The body of a container that runs to its end (an init step, a job's
/// run): a replica's, without a replica id or probes (so no listing
/// takes it for a replica), without network aliases (so no name of the
/// workload resolves to it, as voodu does for jobs), with `labels` added.
fn one_shot_body<const N: usize>(
    spec: &ReplicaSpec,
    labels: [(&str, String); N],
) -> ContainerCreateBody {
    let mut body = container_body(spec);
    let mut all = body.labels.take().unwrap_or_default();
    all.remove(naming::REPLICA_LABEL);
    all.remove(naming::PROBES_LABEL);
    all.extend(labels.map(|(key, value)| (key.to_owned(), value)));
    body.labels = Some(all);
    if let Some(networking) = body.networking_config.as_mut() {
        for endpoint in networking
            .endpoints_config
            .iter_mut()
            .flat_map(|e| e.values_mut())
        {
            endpoint.aliases = None;
        }
    }
    body
}

impl DockerRuntime {
    /// Creates a container named `name`, pulling `image` first if the
    /// engine does not have it; the outer error is the pull's.
    async fn create_pulling(
        &self,
        name: &str,
        body: ContainerCreateBody,
        image: &str,
    ) -> Result<Result<bollard::models::ContainerCreateResponse, BollardError>, RuntimeError> {
        let options = CreateContainerOptionsBuilder::new().name(name).build();
        Ok(
            match self
                .docker
                .create_container(Some(options.clone()), body.clone())
                .await
            {
                Err(error) if status_code(&error) == Some(404) => {
                    self.pull(image).await?;
                    self.docker.create_container(Some(options), body).await
                }
                other => other,
            },
        )
    }

    async fn run_init_step(
        &self,
        replica: &ReplicaSpec,
        step: &InitStep,
    ) -> Result<InitOutcome, RuntimeError> {
        let name = format!(
            "{}.init-{}",
            naming::container_name(&replica.workload, &replica.replica_id),
            step.name
        );
        let failed = |action: &'static str| {
            let name = name.clone();
            move |source| RuntimeError::Docker {
                action,
                target: name,
                source,
            }
        };
        // A failed run of this step left its container: this run replaces it.
        let remove = RemoveContainerOptionsBuilder::new().force(true).build();
        match self.docker.remove_container(&name, Some(remove)).await {
            Ok(()) => {}
            Err(error) if status_code(&error) == Some(404) => {}
            Err(source) => return Err(failed("remove the earlier init container")(source)),
        }
        // The replica's env, volumes, networks, extra hosts and
        // capabilities; the step's own image, command and limits.
        let mut spec = replica.clone();
        spec.image = step.image.clone().unwrap_or_else(|| replica.image.clone());
        spec.command = step.command.clone();
        spec.ports = Vec::new();
        spec.resources = step.resources;
        if let Some(ulimits) = &step.ulimits {
            spec.shape.ulimits = ulimits.clone();
        }
        if let Some(options) = &step.docker_options {
            spec.shape.docker_options = options.clone();
        }
        let body = one_shot_body(&spec, [(INIT_LABEL, step.name.clone())]);
        let created = self
            .create_pulling(&name, body, &spec.image)
            .await?
            .map_err(failed("create init container"))?;
        self.docker
            .start_container(&created.id, None)
            .await
            .map_err(failed("start init container"))?;
        let waited = tokio::time::timeout(step.timeout, async {
            let mut wait = self.docker.wait_container(
                &created.id,
                None::<bollard::query_parameters::WaitContainerOptions>,
            );
            match wait.next().await {
                Some(Ok(response)) => Ok(response.status_code),
                // A non-zero exit arrives as this error.
                Some(Err(BollardError::DockerContainerWaitError { code, .. })) => Ok(code),
                Some(Err(source)) => Err(failed("wait for init container")(source)),
                None => Ok(-1),
            }
        })
        .await;
        let exit_code = match waited {
            Ok(code) => Some(code?),
            Err(_) => {
                let kill = bollard::query_parameters::KillContainerOptions {
                    signal: "SIGKILL".to_owned(),
                };
                let _ = self.docker.kill_container(&created.id, Some(kill)).await;
                None
            }
        };
        if exit_code == Some(0) {
            let remove = RemoveContainerOptionsBuilder::new().force(true).build();
            let _ = self
                .docker
                .remove_container(&created.id, Some(remove))
                .await;
            return Ok(InitOutcome::Succeeded);
        }
        let logs = bollard::query_parameters::LogsOptions {
            stdout: true,
            stderr: true,
            tail: "5".to_owned(),
            ..Default::default()
        };
        let output: Vec<String> = self
            .docker
            .logs(&created.id, Some(logs))
            .filter_map(|line| async move { line.ok().map(|line| line.to_string()) })
            .collect()
            .await;
        Ok(InitOutcome::Failed {
            exit_code,
            output: output.concat().trim().to_owned(),
            container: name,
        })
    }
}

impl DockerRuntime {
    /// The engine's summaries of the containers matching label filters,
    /// running or not; `action` names the listing in an error.
    async fn list_filtered(
        &self,
        labels: Vec<String>,
        workload: Option<&WorkloadId>,
        action: &'static str,
    ) -> Result<Vec<bollard::models::ContainerSummary>, RuntimeError> {
        let filters = HashMap::from([("label", labels)]);
        let options = ListContainersOptionsBuilder::new()
            .all(true)
            .filters(&filters)
            .build();
        self.docker
            .list_containers(Some(options))
            .await
            .map_err(|source| RuntimeError::Docker {
                action,
                target: workload.map_or_else(|| "voodu".to_owned(), ToString::to_string),
                source,
            })
    }

    /// This controller's containers (of one workload or all) that carry
    /// the label `key`.
    async fn list_summaries(
        &self,
        key: &str,
        workload: Option<&WorkloadId>,
        action: &'static str,
    ) -> Result<Vec<bollard::models::ContainerSummary>, RuntimeError> {
        let mut labels = self.owned_filters(workload);
        labels.push(key.to_owned());
        self.list_filtered(labels, workload, action).await
    }

    /// Runs one of a job's runs to its end or its timeout: created from
    /// the job's spec, its output streamed to `output` as it comes, its
    /// container kept (for `vd logs`; the history limits remove it).
    async fn run_job_container(
        &self,
        spec: &ReplicaSpec,
        run: &JobRunRequest,
        output: Option<&tokio::sync::mpsc::UnboundedSender<ExecOutput>>,
    ) -> Result<JobRunEnd, RuntimeError> {
        let name = naming::container_name(&spec.workload, &format!("run-{}", run.run_id));
        let failed = |action: &'static str| {
            let name = name.clone();
            move |source| RuntimeError::Docker {
                action,
                target: name,
                source,
            }
        };
        let trigger = serde_json::to_string(&run.trigger).unwrap_or_default();
        let body = one_shot_body(
            spec,
            [
                (naming::RUN_LABEL, run.run_id.clone()),
                (naming::RUN_TRIGGER_LABEL, trigger),
            ],
        );
        let created = self
            .create_pulling(&name, body, &spec.image)
            .await?
            .map_err(failed("create the run's container"))?;
        self.docker
            .start_container(&created.id, None)
            .await
            .map_err(failed("start the run's container"))?;
        let finished = async {
            // Its log from the start, followed to its end, which is the
            // container's exit.
            let options = bollard::query_parameters::LogsOptions {
                follow: true,
                stdout: true,
                stderr: true,
                ..Default::default()
            };
            let mut log = self.docker.logs(&created.id, Some(options));
            while let Some(piece) = log.next().await {
                forward_output(output, piece);
            }
            let mut wait = self.docker.wait_container(
                &created.id,
                None::<bollard::query_parameters::WaitContainerOptions>,
            );
            match wait.next().await {
                Some(Ok(response)) => Ok(response.status_code),
                // A non-zero exit arrives as this error.
                Some(Err(BollardError::DockerContainerWaitError { code, .. })) => Ok(code),
                Some(Err(source)) => Err(failed("wait for the run's container")(source)),
                None => Ok(-1),
            }
        };
        let exit_code = match run.timeout {
            None => Some(finished.await?),
            Some(timeout) => match tokio::time::timeout(timeout, finished).await {
                Ok(code) => Some(code?),
                Err(_) => {
                    let kill = bollard::query_parameters::KillContainerOptions {
                        signal: "SIGKILL".to_owned(),
                    };
                    let _ = self.docker.kill_container(&created.id, Some(kill)).await;
                    None
                }
            },
        };
        Ok(JobRunEnd {
            container_name: name,
            exit_code,
        })
    }

    /// voodu's containers matching label filters, running or not.
    async fn list_labelled(
        &self,
        labels: Vec<String>,
        workload: Option<&WorkloadId>,
    ) -> Result<Vec<Replica>, RuntimeError> {
        let summaries = self
            .list_filtered(labels, workload, "list containers of")
            .await?;
        let mut replicas = Vec::with_capacity(summaries.len());
        for summary in summaries {
            let Some(labels) = summary.labels.as_ref() else {
                continue;
            };
            let Some((workload, replica_id)) = naming::identify(labels) else {
                continue;
            };
            let host_network = summary
                .host_config
                .as_ref()
                .and_then(|config| config.network_mode.as_deref())
                == Some("host");
            // On the host's network, a replica is reached at the host's
            // loopback.
            let ip = if host_network {
                Some("127.0.0.1".to_owned())
            } else {
                summary
                    .network_settings
                    .as_ref()
                    .and_then(|settings| settings.networks.as_ref())
                    .and_then(|networks| networks.get(NETWORK))
                    .and_then(|endpoint| endpoint.ip_address.clone())
                    .filter(|ip| !ip.is_empty())
            };
            let published: Vec<_> = summary
                .ports
                .iter()
                .flatten()
                .filter(|port| port.typ == Some(bollard::models::PortSummaryTypeEnum::TCP))
                .filter_map(|port| Some((port.private_port, port.public_port?, port.ip.clone())))
                .collect();
            let host_ip = published
                .iter()
                .filter_map(|(_, _, ip)| ip.clone())
                .find(|ip| !ip.is_empty() && ip != "0.0.0.0" && ip != "::");
            let host_ports = published
                .into_iter()
                .map(|(container, host, _)| (container, host))
                .collect();
            replicas.push(Replica {
                container_id: summary.id.clone().unwrap_or_default(),
                container_name: summary
                    .names
                    .as_ref()
                    .and_then(|names| names.first())
                    .map(|name| name.trim_start_matches('/').to_owned())
                    .unwrap_or_default(),
                spec_hash: labels.get(naming::HASH_LABEL).cloned().unwrap_or_default(),
                owner: labels.get(naming::OWNER_LABEL).cloned(),
                store_id: labels.get(naming::STORE_LABEL).cloned(),
                probes: labelled_probes(labels),
                workload,
                replica_id,
                state: summary
                    .state
                    .map(|state| state.to_string())
                    .unwrap_or_default(),
                ip,
                host_ports,
                host_ip,
                created: summary.created.unwrap_or(0),
                health: summary.status.as_deref().and_then(health_of_status),
                ready: None,
                last_probe_failure: None,
                restarts: 0,
            });
        }
        replicas.sort_by(|a, b| (a.created, &a.replica_id).cmp(&(b.created, &b.replica_id)));
        Ok(replicas)
    }

    /// Creates and starts one replica, pulling its image if the engine does
    /// not have it, and checks that it is running. A replica that does not
    /// stay up is removed again and reported.
    async fn create_replica(&self, spec: &ReplicaSpec) -> Result<Replica, RuntimeError> {
        let name = naming::container_name(&spec.workload, &spec.replica_id);
        let body = container_body(spec);
        let created = self
            .create_pulling(&name, body, &spec.image)
            .await?
            .map_err(|source| {
                if status_code(&source) == Some(409) {
                    RuntimeError::NameTaken {
                        container: name.clone(),
                    }
                } else {
                    RuntimeError::Docker {
                        action: "create container",
                        target: name.clone(),
                        source,
                    }
                }
            })?;
        for network in &spec.networks {
            let request = NetworkConnectRequest {
                container: created.id.clone(),
                endpoint_config: Some(EndpointSettings {
                    aliases: Some(naming::network_aliases(&spec.workload, &spec.replica_id)),
                    ..Default::default()
                }),
            };
            if let Err(source) = self.docker.connect_network(network, request).await {
                let _ = self.remove_container(&created.id, &name, 0, true).await;
                return Err(RuntimeError::Docker {
                    action: "connect to network",
                    target: format!("{name} → {network}"),
                    source,
                });
            }
        }
        if let Err(source) = self.docker.start_container(&created.id, None).await {
            let _ = self.remove_container(&created.id, &name, 0, true).await;
            return Err(RuntimeError::Docker {
                action: "start container",
                target: name,
                source,
            });
        }
        self.running_replica(&spec.workload, &spec.replica_id, &name, true)
            .await
    }

    /// Starts a stopped replica again.
    async fn start_replica(&self, replica: &Replica) -> Result<Replica, RuntimeError> {
        self.docker
            .start_container(&replica.container_id, None)
            .await
            .map_err(|source| RuntimeError::Docker {
                action: "start container",
                target: replica.container_name.clone(),
                source,
            })?;
        self.running_replica(
            &replica.workload,
            &replica.replica_id,
            &replica.container_name,
            false,
        )
        .await
    }

    /// The replica, if it is running with an address. One that is not is
    /// reported; with `remove_on_failure` (a container just created) it is
    /// also removed, while an existing one is kept, with its data.
    async fn running_replica(
        &self,
        workload: &WorkloadId,
        replica_id: &str,
        name: &str,
        remove_on_failure: bool,
    ) -> Result<Replica, RuntimeError> {
        let replica = self
            .list(Some(workload))
            .await?
            .into_iter()
            .find(|replica| replica.replica_id == replica_id);
        match replica {
            Some(replica) if replica.is_running() && replica.ip.is_some() => Ok(replica),
            Some(replica) => {
                if remove_on_failure {
                    let _ = self
                        .remove_container(&replica.container_id, name, 0, true)
                        .await;
                }
                Err(RuntimeError::NotRunning {
                    container: name.to_owned(),
                    state: replica.state,
                })
            }
            None => Err(RuntimeError::NotRunning {
                container: name.to_owned(),
                state: "gone".to_owned(),
            }),
        }
    }

    async fn pull(&self, image: &str) -> Result<(), RuntimeError> {
        // Without a tag the engine would pull every tag of the repository.
        let last_part = image.rsplit('/').next().unwrap_or(image);
        let tagged = last_part.contains(':') || last_part.contains('@');
        let mut options = CreateImageOptionsBuilder::new().from_image(image);
        if !tagged {
            options = options.tag("latest");
        }
        let options = options.build();
        let mut progress = self.docker.create_image(Some(options), None, None);
        while let Some(step) = progress.next().await {
            step.map_err(|source| match &source {
                BollardError::DockerResponseServerError { message, .. } => {
                    RuntimeError::ImageUnavailable {
                        image: image.to_owned(),
                        reason: message.clone(),
                    }
                }
                BollardError::DockerStreamError { error } => RuntimeError::ImageUnavailable {
                    image: image.to_owned(),
                    reason: error.clone(),
                },
                _ => RuntimeError::Docker {
                    action: "pull image",
                    target: image.to_owned(),
                    source,
                },
            })?;
        }
        Ok(())
    }

    /// Stops a replica (giving it `stop_timeout_secs` to exit) and removes
    /// it. A deployment replica's anonymous volumes go with it; a
    /// statefulset replica's are kept, since they hold its data. A replica
    /// already gone is fine.
    async fn remove_replica(
        &self,
        replica: &Replica,
        stop_timeout_secs: i32,
    ) -> Result<(), RuntimeError> {
        let volumes = replica.workload.kind == WorkloadKind::Deployment;
        self.remove_container(
            &replica.container_id,
            &replica.container_name,
            stop_timeout_secs,
            volumes,
        )
        .await
    }

    async fn remove_container(
        &self,
        container: &str,
        name: &str,
        stop_timeout_secs: i32,
        volumes: bool,
    ) -> Result<(), RuntimeError> {
        let stop = StopContainerOptionsBuilder::new()
            .t(stop_timeout_secs)
            .build();
        match self.docker.stop_container(container, Some(stop)).await {
            Ok(()) => {}
            Err(error) if matches!(status_code(&error), Some(404)) => return Ok(()),
            Err(_) => {} // The forced removal below still ends it.
        }
        let remove = RemoveContainerOptionsBuilder::new()
            .force(true)
            .v(volumes)
            .build();
        match self.docker.remove_container(container, Some(remove)).await {
            Ok(()) => Ok(()),
            Err(error) if status_code(&error) == Some(404) => Ok(()),
            Err(error)
                if status_code(&error) == Some(409)
                    && error.to_string().contains("in progress") =>
            {
                Ok(())
            }
            Err(source) => Err(RuntimeError::Docker {
                action: "remove container",
                target: name.to_owned(),
                source,
            }),
        }
    }

    /// Docker's events for this owner's containers, as they happen.
    fn event_stream(&self) -> BoxStream<'static, Result<RuntimeEvent, RuntimeError>> {
        let filters = HashMap::from([
            ("type", vec!["container".to_owned()]),
            ("label", self.owned_filters(None)),
            (
                "event",
                [
                    "start",
                    "die",
                    "stop",
                    "kill",
                    "destroy",
                    "pause",
                    "unpause",
                    "restart",
                    "oom",
                    "health_status",
                ]
                .map(str::to_owned)
                .to_vec(),
            ),
        ]);
        let options = EventsOptionsBuilder::new().filters(&filters).build();
        self.docker
            .events(Some(options))
            .filter_map(|message| async move {
                match message {
                    Err(source) => Some(Err(RuntimeError::Docker {
                        action: "follow events of",
                        target: "voodu's containers".to_owned(),
                        source,
                    })),
                    Ok(message) => {
                        let attributes = message.actor.as_ref()?.attributes.as_ref()?;
                        let (workload, replica_id) = naming::identify(attributes)?;
                        let action = message.action.clone().unwrap_or_default();
                        // `health_status: healthy` names the status after
                        // the action.
                        let action = match action.split_once(':') {
                            Some((action, _)) => action.trim().to_owned(),
                            None => action,
                        };
                        Some(Ok(RuntimeEvent {
                            workload,
                            replica_id,
                            container_id: message
                                .actor
                                .as_ref()
                                .and_then(|actor| actor.id.clone())
                                .unwrap_or_default(),
                            exit_code: attributes
                                .get("exitCode")
                                .and_then(|code| code.parse().ok()),
                            action,
                            time_nanos: message.time_nano.unwrap_or(0),
                        }))
                    }
                }
            })
            .boxed()
    }
}

/// The engine's create request for one replica.
fn container_body(spec: &ReplicaSpec) -> ContainerCreateBody {
    let mut port_bindings: HashMap<String, Option<Vec<PortBinding>>> = HashMap::new();
    let mut exposed = Vec::new();
    // With the host's network (or none) nothing is published: the replica
    // listens on the host's ports itself, as Docker would discard them.
    let published = if spec.shape.network_mode.is_some() {
        &[][..]
    } else {
        &spec.ports[..]
    };
    for port in published {
        let protocol = match port.protocol {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
        };
        // A range maps each of its ports.
        for (container_port, host_port) in port.each_port() {
            let key = format!("{container_port}/{protocol}");
            exposed.push(key.clone());
            port_bindings
                .entry(key)
                .or_insert_with(|| Some(Vec::new()))
                .get_or_insert_with(Vec::new)
                .push(PortBinding {
                    host_ip: Some(port.host_ip.to_string()),
                    host_port: host_port.map(|host_port| host_port.to_string()),
                });
        }
    }
    let ordinal =
        (spec.workload.kind == WorkloadKind::Statefulset).then_some(spec.replica_id.as_str());
    let mut env: Vec<String> = spec
        .env
        .iter()
        .map(|(name, value)| {
            let value = fill_replica_variables(value, &spec.replica_id, ordinal);
            format!("{name}={value}")
        })
        .collect();
    env.push(format!("VOODU_REPLICA_ID={}", spec.replica_id));
    env.push(format!("VOODU_WORKLOAD={}", spec.workload));
    if spec.workload.kind == WorkloadKind::Statefulset {
        // voodu's name for a statefulset replica's ordinal.
        env.push(format!("VOODU_REPLICA_ORDINAL={}", spec.replica_id));
    }
    let shape = &spec.shape;
    let options = &shape.docker_options;
    let mut binds = spec.volumes.clone();
    // A statefulset ordinal's claims: one Docker volume each, which Docker
    // makes on first use and voodu never removes.
    for (claim, volume) in &shape.volume_claims {
        let name = voodu_model::container::claim_volume_name(
            &spec.workload.scope,
            &spec.workload.name,
            claim,
            &spec.replica_id,
        );
        binds.push(format!("{name}:{}", volume.mount_path));
    }
    // voodu's extra host first, then the workload's.
    let mut extra_hosts = vec!["host.docker.internal:host-gateway".to_owned()];
    extra_hosts.extend(shape.extra_hosts.iter().cloned());
    let logs = shape.effective_logs();
    let non_empty = |items: &Vec<String>| (!items.is_empty()).then(|| items.clone());
    let (network_mode, networking_config) = match shape.network_mode {
        Some(mode) => (<&str>::from(mode).to_owned(), None),
        None => (
            NETWORK.to_owned(),
            Some(NetworkingConfig {
                endpoints_config: Some(HashMap::from([(
                    NETWORK.to_owned(),
                    EndpointSettings {
                        aliases: Some(naming::network_aliases(&spec.workload, &spec.replica_id)),
                        ..Default::default()
                    },
                )])),
            }),
        ),
    };
    ContainerCreateBody {
        image: Some(spec.image.clone()),
        cmd: (!spec.command.is_empty()).then(|| spec.command.clone()),
        env: Some(env),
        labels: Some(replica_labels(spec)),
        exposed_ports: (!exposed.is_empty()).then_some(exposed),
        user: options.user.clone(),
        working_dir: options.workdir.clone(),
        hostname: options.hostname.clone(),
        stop_signal: options.stop_signal.clone(),
        host_config: Some(HostConfig {
            port_bindings: Some(port_bindings),
            // The controller restarts replicas itself, from their `die`
            // events, with its own back-off and events; Docker restarting
            // them too would race it.
            restart_policy: Some(RestartPolicy {
                name: Some(RestartPolicyNameEnum::NO),
                maximum_retry_count: None,
            }),
            network_mode: Some(network_mode),
            binds: (!binds.is_empty()).then_some(binds),
            memory: spec.resources.memory_bytes,
            // No swap beyond the limit: a replica over it is OOM-killed,
            // which the controller reports, rather than slowed down.
            memory_swap: spec.resources.memory_bytes,
            nano_cpus: spec.resources.nano_cpus,
            pids_limit: spec.resources.pids.or(options.pids_limit),
            ulimits: Some(
                shape
                    .effective_ulimits(default_ulimits_here())
                    .into_iter()
                    .map(|(name, limit)| ResourcesUlimits {
                        name: Some(name),
                        soft: Some(limit.soft),
                        hard: Some(limit.hard),
                    })
                    .collect(),
            ),
            cap_add: non_empty(&shape.cap_add),
            extra_hosts: Some(extra_hosts),
            log_config: Some(HostConfigLogConfig {
                typ: Some("json-file".to_owned()),
                config: Some(HashMap::from([
                    ("max-size".to_owned(), logs.max_size),
                    ("max-file".to_owned(), logs.max_files.to_string()),
                ])),
            }),
            shm_size: options.shm_size,
            sysctls: (!options.sysctls.is_empty()).then(|| {
                options
                    .sysctls
                    .iter()
                    .map(|(key, value)| (key.clone(), value.clone()))
                    .collect()
            }),
            devices: (!options.devices.is_empty()).then(|| {
                options
                    .devices
                    .iter()
                    .map(|device| device_mapping(device))
                    .collect()
            }),
            privileged: options.privileged.then_some(true),
            cap_drop: non_empty(&options.cap_drop),
            security_opt: non_empty(&options.security_opt),
            tmpfs: (!options.tmpfs.is_empty()).then(|| {
                options
                    .tmpfs
                    .iter()
                    .map(|(path, mount)| (path.clone(), mount.clone()))
                    .collect()
            }),
            init: options.init.then_some(true),
            readonly_rootfs: options.read_only.then_some(true),
            dns: non_empty(&options.dns),
            dns_search: non_empty(&options.dns_search),
            group_add: non_empty(&options.group_add),
            oom_score_adj: options.oom_score_adj,
            ipc_mode: options.ipc.clone(),
            cpu_shares: options.cpu_shares,
            cpuset_cpus: options.cpuset_cpus.clone(),
            ..Default::default()
        }),
        networking_config,
        ..Default::default()
    }
}

/// voodu's default ulimits (`nofile` 65536, `nproc` 4096), each lowered to
/// this host's hard limit where that is lower: a container cannot be
/// given more than the engine may grant, and on a host that caps open
/// files at 20,000 (as some do) every container would fail to start.
/// The controller's own hard limits stand for the host's.
fn default_ulimits_here() -> BTreeMap<String, Ulimit> {
    let hard_limit = |resource| {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes one rlimit into the struct it is given.
        let read = unsafe { libc::getrlimit(resource, &mut limit) } == 0;
        (read && limit.rlim_max != libc::RLIM_INFINITY)
            .then(|| i64::try_from(limit.rlim_max).unwrap_or(i64::MAX))
    };
    default_ulimits()
        .into_iter()
        .map(|(name, mut ulimit)| {
            let resource = match name.as_str() {
                "nofile" => Some(libc::RLIMIT_NOFILE),
                "nproc" => Some(libc::RLIMIT_NPROC),
                _ => None,
            };
            if let Some(host) = resource.and_then(hard_limit) {
                ulimit.soft = ulimit.soft.min(host);
                ulimit.hard = ulimit.hard.min(host);
            }
            (name, ulimit)
        })
        .collect()
}

/// `--device HOST[:CONTAINER[:PERMISSIONS]]` as the engine takes it.
fn device_mapping(device: &str) -> DeviceMapping {
    let mut parts = device.splitn(3, ':');
    let on_host = parts.next().unwrap_or_default().to_owned();
    let in_container = parts.next().map_or_else(|| on_host.clone(), str::to_owned);
    DeviceMapping {
        path_on_host: Some(on_host),
        path_in_container: Some(in_container),
        cgroup_permissions: Some(parts.next().unwrap_or("rwm").to_owned()),
    }
}

/// Every label of one replica's container: voodu's identity labels, the
/// store it was made for and the probes it is created with.
fn replica_labels(spec: &ReplicaSpec) -> HashMap<String, String> {
    let mut labels = naming::labels(
        &spec.workload,
        &spec.replica_id,
        &spec.spec_hash,
        &spec.owner,
    );
    labels.insert(naming::STORE_LABEL.to_owned(), spec.store_id.clone());
    labels.insert(
        naming::PROBES_LABEL.to_owned(),
        serde_json::to_string(&spec.probes).unwrap_or_else(|_| "{}".to_owned()),
    );
    labels
}

/// The probes a container was created with, from its label. A label that
/// does not read (written by another version) counts as missing, so the
/// container is probed with its workload's current probes, as before.
fn labelled_probes(labels: &HashMap<String, String>) -> Option<Probes> {
    let text = labels.get(naming::PROBES_LABEL)?;
    match serde_json::from_str(text) {
        Ok(probes) => Some(probes),
        Err(error) => {
            tracing::warn!(%error, label = %text, "a container's probes label does not read; probing it with its workload's probes");
            None
        }
    }
}

/// The health status in a container listing's status text: `Up 5 seconds
/// (healthy)`, `(unhealthy)` or `(health: starting)`.
fn health_of_status(status: &str) -> Option<String> {
    if status.contains("(healthy)") {
        Some("healthy".into())
    } else if status.contains("(unhealthy)") {
        Some("unhealthy".into())
    } else if status.contains("(health: starting)") {
        Some("starting".into())
    } else {
        None
    }
}

/// A replica's usage from one stats sample, computed as `docker stats`
/// does: CPU from the change in the container's and the host's CPU time
/// since the previous sample, memory less the reclaimable page cache.
fn usage_of(sample: &bollard::models::ContainerStatsResponse) -> ReplicaUsage {
    let total = |stats: Option<&bollard::models::ContainerCpuStats>| {
        let stats = stats?;
        Some((
            stats.cpu_usage.as_ref()?.total_usage?,
            stats.system_cpu_usage?,
            stats.online_cpus.unwrap_or(1).max(1),
        ))
    };
    let cpu_percent = match (
        total(sample.cpu_stats.as_ref()),
        total(sample.precpu_stats.as_ref()),
    ) {
        (Some((container, system, cpus)), Some((container_before, system_before, _)))
            if system > system_before =>
        {
            let container = container.saturating_sub(container_before) as f64;
            let system = (system - system_before) as f64;
            container / system * f64::from(cpus) * 100.0
        }
        _ => 0.0,
    };
    let memory = sample.memory_stats.as_ref();
    let cache = memory
        .and_then(|memory| memory.stats.as_ref())
        .and_then(|stats| {
            // cgroup v2 names it inactive_file; v1 total_inactive_file.
            stats
                .get("inactive_file")
                .or_else(|| stats.get("total_inactive_file"))
                .copied()
        })
        .unwrap_or(0);
    let (network_rx_bytes, network_tx_bytes) =
        sample
            .networks
            .iter()
            .flatten()
            .fold((0, 0), |(rx, tx), (_, network)| {
                (
                    rx + network.rx_bytes.unwrap_or(0),
                    tx + network.tx_bytes.unwrap_or(0),
                )
            });
    ReplicaUsage {
        cpu_percent,
        memory_bytes: memory
            .and_then(|memory| memory.usage)
            .unwrap_or(0)
            .saturating_sub(cache),
        memory_limit_bytes: memory
            .and_then(|memory| memory.limit)
            .filter(|limit| *limit > 0),
        network_rx_bytes,
        network_tx_bytes,
    }
}
