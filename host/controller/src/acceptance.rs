//! `vd plugins:test FILE.so -f MANIFEST [--through ADDR]`: an acceptance run
//! of a plugin on the engine, what an author would otherwise script by hand.
//!
//! A throwaway controller (this `vd`, on a root of its own, so nothing of a
//! live controller is touched) gets the plugin installed and the manifest
//! applied; then each workload is rolled (`vd restart`), one replica is
//! killed behind voodu's back (the engine stops it at once), one workload
//! is scaled down by one replica (the manifest applied again with one
//! fewer), and every workload is deleted. Every step but the kill is the
//! `vd` verb an operator would type, run against the throwaway root, so
//! the run meets the plugin exactly as a controller does. With `--through`,
//! clients send requests through the address the plugin serves the whole
//! time, and each step counts those answered and those lost while it ran.
//! Last, the plugin's calls over the run (`vd plugins:list`): how many,
//! refused, failed, and their 99th percentile.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use voodu_api::acceptance::{RequestCount, StepOutcome, TestPlan, TestReport, TestStep, Through};
use voodu_model::WorkloadId;
use voodu_runtime::{ContainerRuntime, DockerRuntime};

/// How many clients send requests at once under `--through`.
const CLIENTS: usize = 4;

/// The pause of each client between two requests.
const PACE: Duration = Duration::from_millis(5);

/// The longest any step may take.
const STEP_BOUND: Duration = Duration::from_secs(300);

/// Runs the plan, telling each step to `emit` as it ends, and answers the
/// whole report.
pub fn run_acceptance(plan: &TestPlan, emit: &mut dyn FnMut(&TestStep)) -> TestReport {
    let mut run = Run {
        plan,
        steps: Vec::new(),
        emit,
        load: None,
        requests: None,
        root: None,
        failed_calls: 0,
    };
    // Private to the owner, removed when dropped.
    let root = tempfile::Builder::new()
        .prefix("voodu-plugins-test-")
        .tempdir();
    let calls = match root {
        Ok(root) => run.against(root.path()),
        Err(error) => {
            run.record(
                "throwaway controller",
                StepOutcome::Fail,
                format!("no root for it: {error}"),
                Duration::ZERO,
            );
            Vec::new()
        }
    };
    run.stop_load();
    let requests = run.requests;
    TestReport {
        file: plan.plugin.display().to_string(),
        steps: run.steps,
        calls,
        requests,
    }
}

/// One run under way.
struct Run<'a> {
    plan: &'a TestPlan,
    steps: Vec<TestStep>,
    emit: &'a mut dyn FnMut(&TestStep),
    /// The clients, while they run.
    load: Option<Load>,
    /// Their requests over the run, once they stopped.
    requests: Option<RequestCount>,
    /// The throwaway controller's root, once it answers.
    root: Option<std::path::PathBuf>,
    /// The plugin's failed calls counted so far, so that each step names
    /// those made during it.
    failed_calls: u64,
}

/// What one `vd` step printed.
struct Ran {
    success: bool,
    said: String,
}

impl Run<'_> {
    /// The run against a controller on `root`; the plugin's calls.
    fn against(&mut self, root: &Path) -> Vec<voodu_api::CallFigures> {
        let started = Instant::now();
        let log = root.join("controller.log");
        let controller = std::fs::File::create(&log).and_then(|out| {
            let err = out.try_clone()?;
            Command::new(&self.plan.vd)
                .arg("--root")
                .arg(root)
                .arg("controller")
                .stdin(Stdio::null())
                .stdout(out)
                .stderr(err)
                .spawn()
        });
        let mut controller = match controller {
            Ok(child) => Controller(child),
            Err(error) => {
                self.record(
                    "throwaway controller",
                    StepOutcome::Fail,
                    format!("`vd controller` did not start: {error}"),
                    started.elapsed(),
                );
                return Vec::new();
            }
        };
        let answering = wait_for(Duration::from_secs(30), || {
            self.vd(root, &["version"], None).success
        });
        if !answering {
            let said = std::fs::read_to_string(&log).unwrap_or_default();
            self.record(
                "throwaway controller",
                StepOutcome::Fail,
                format!(
                    "it did not answer within 30 s: {}",
                    said.lines().last().unwrap_or("it said nothing")
                ),
                started.elapsed(),
            );
            return Vec::new();
        }
        self.record(
            "throwaway controller",
            StepOutcome::Pass,
            format!("answering on {}", root.display()),
            started.elapsed(),
        );
        self.root = Some(root.to_owned());
        let plugin = self.plan.plugin.display().to_string();
        if self.step(
            root,
            "install",
            &["plugins:install", &plugin],
            None,
            "installed",
        ) {
            self.operate(root);
        }
        let calls = self.calls(root);
        self.stop_load();
        // Whatever a failed step left running goes with the root.
        for id in self.workloads(root) {
            let _ = self.vd(root, &["delete", &id.to_string()], None);
        }
        controller.stop();
        sweep(root);
        calls
    }

    /// Apply, then each operator step, while the plugin is installed.
    fn operate(&mut self, root: &Path) {
        let manifest = self.plan.manifest.display().to_string();
        if !self.step(root, "apply", &["apply", "-f", &manifest], None, "applied") {
            return;
        }
        let workloads = self.workloads(root);
        if let Some(through) = &self.plan.through {
            self.load = Some(Load::start(through.clone()));
            // The first answers, before any step is counted.
            let load = self.load.as_ref().expect("just started");
            let started = Instant::now();
            let answered = wait_for(Duration::from_secs(30), || load.total().answered > 0);
            let outcome = if answered {
                StepOutcome::Pass
            } else {
                StepOutcome::Fail
            };
            let total = load.total();
            self.record_with(
                &format!("load through {through}"),
                outcome,
                if answered {
                    format!("{CLIENTS} clients answered")
                } else {
                    format!(
                        "nothing answered within 30 s: {}",
                        total.first_failure.unwrap_or_default()
                    )
                },
                started.elapsed(),
                None,
            );
        }
        for id in &workloads {
            self.step(
                root,
                &format!("rolling update of {id}"),
                &["restart", &id.to_string()],
                None,
                "every replica replaced, each new one ready before an old one drained",
            );
        }
        if let Some(id) = workloads.first() {
            self.kill_one(root, id);
        }
        if let Some(id) = workloads.first() {
            self.scale_down(root, id);
        }
        // Nothing serves once the workloads are deleted.
        self.stop_load();
        for id in &workloads {
            self.step(
                root,
                &format!("delete {id}"),
                &["delete", &id.to_string()],
                None,
                "drained, removed and forgotten",
            );
        }
    }

    /// Kills one running replica of `id` behind voodu's back, and waits for
    /// the workload to run as many as before.
    fn kill_one(&mut self, root: &Path, id: &WorkloadId) {
        let name = format!("a replica of {id} killed");
        let counted = self.load.as_ref().map(Load::mark);
        let started = Instant::now();
        let outcome = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|error| error.to_string())
            .and_then(|runtime| {
                runtime.block_on(async {
                    let engine = DockerRuntime::connect(crate::server::owner_id(root))
                        .await
                        .map_err(|error| error.to_string())?;
                    let before = running_replicas(&engine, id).await?;
                    let Some(victim) = before.first().cloned() else {
                        return Err("no replica of it runs".to_owned());
                    };
                    engine
                        .stop(&victim, 0)
                        .await
                        .map_err(|error| error.to_string())?;
                    let deadline = Instant::now() + STEP_BOUND;
                    loop {
                        let now = running_replicas(&engine, id).await?;
                        // Stopped when `stop` returned: any count back
                        // up is the workload healed (the same container
                        // started again, or a new one).
                        if now.len() >= before.len() {
                            return Ok(format!(
                                "{} stopped at once by the engine; {} running again",
                                victim.replica_id,
                                now.len()
                            ));
                        }
                        if Instant::now() > deadline {
                            return Err(format!(
                                "{} running {:?} after the kill, not {} again",
                                now.len(),
                                STEP_BOUND,
                                before.len()
                            ));
                        }
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                })
            });
        let (outcome, detail) = match outcome {
            Ok(detail) => (StepOutcome::Pass, detail),
            Err(error) => (StepOutcome::Fail, error),
        };
        let requests = counted.and_then(|mark| self.load.as_ref().map(|load| load.since(mark)));
        // Requests in flight to a replica killed are lost with it: counted,
        // not held against the plugin.
        self.record_step(
            &name,
            outcome,
            detail,
            started.elapsed(),
            requests,
            LossAllowed::Yes,
        );
    }

    /// Applies the manifest again with one replica fewer of `id`.
    fn scale_down(&mut self, root: &Path, id: &WorkloadId) {
        let name = format!("scale down of {id} by one replica");
        let file = self.plan.manifest.display().to_string();
        let text = match std::fs::read_to_string(&self.plan.manifest) {
            Ok(text) => text,
            Err(error) => {
                self.record(&name, StepOutcome::Fail, error.to_string(), Duration::ZERO);
                return;
            }
        };
        let fewer = match one_replica_fewer(&file, &text, id) {
            Ok(fewer) => fewer,
            Err(why) => {
                self.record(
                    &name,
                    StepOutcome::Warn,
                    format!("not run: {why}"),
                    Duration::ZERO,
                );
                return;
            }
        };
        self.step(
            root,
            &name,
            &["apply", "-f", "-"],
            Some(&fewer),
            "the replica drained and removed",
        );
        // Back to the manifest as written, so the deletes meet it whole.
        let _ = self.vd(root, &["apply", "-f", &file], None);
    }

    /// Stops the clients, keeping their count over the run.
    fn stop_load(&mut self) {
        if let Some(load) = self.load.take() {
            load.stop();
            self.requests = Some(load.total());
        }
    }

    /// Runs one `vd` step and records it; whether it succeeded.
    fn step(
        &mut self,
        root: &Path,
        name: &str,
        args: &[&str],
        input: Option<&str>,
        done: &str,
    ) -> bool {
        let counted = self.load.as_ref().map(Load::mark);
        let started = Instant::now();
        let ran = self.vd(root, args, input);
        let (outcome, detail) = if ran.success {
            (StepOutcome::Pass, done.to_owned())
        } else {
            (
                StepOutcome::Fail,
                format!("`vd {}` failed: {}", args.join(" "), errors_said(&ran.said)),
            )
        };
        let requests = counted.and_then(|mark| self.load.as_ref().map(|load| load.since(mark)));
        self.record_with(name, outcome, detail, started.elapsed(), requests);
        ran.success
    }

    /// Runs `vd --root ROOT ARGS`, with `input` on its standard input, in
    /// the manifest's directory (where its relative paths start).
    fn vd(&self, root: &Path, args: &[&str], input: Option<&str>) -> Ran {
        let directory = self
            .plan
            .manifest
            .parent()
            .filter(|parent| !parent.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let child = Command::new(&self.plan.vd)
            .arg("--root")
            .arg(root)
            .args(args)
            .current_dir(directory)
            .env("NO_COLOR", "1")
            .stdin(if input.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn();
        let Ok(mut child) = child else {
            return Ran {
                success: false,
                said: format!("cannot run {}", self.plan.vd.display()),
            };
        };
        if let (Some(input), Some(mut stdin)) = (input, child.stdin.take()) {
            let _ = std::io::Write::write_all(&mut stdin, input.as_bytes());
        }
        match child.wait_with_output() {
            Ok(output) => Ran {
                success: output.status.success(),
                said: format!(
                    "{}{}",
                    String::from_utf8_lossy(&output.stdout),
                    String::from_utf8_lossy(&output.stderr)
                ),
            },
            Err(error) => Ran {
                success: false,
                said: error.to_string(),
            },
        }
    }

    /// The workloads the controller stores.
    fn workloads(&self, root: &Path) -> Vec<WorkloadId> {
        let listed = self.vd(root, &["get", "workloads", "-o", "json"], None);
        let Ok(listed) = serde_json::from_str::<serde_json::Value>(&listed.said) else {
            return Vec::new();
        };
        serde_json::from_value::<Vec<voodu_api::WorkloadSummary>>(listed["workloads"].clone())
            .unwrap_or_default()
            .into_iter()
            .map(|summary| summary.id)
            .collect()
    }

    /// The plugin's calls over the run, as `vd plugins:list` counts them.
    fn calls(&self, root: &Path) -> Vec<voodu_api::CallFigures> {
        self.plugin_row(root)
            .map(|row| row.calls)
            .unwrap_or_default()
    }

    /// The plugin's row of `vd plugins:list`.
    fn plugin_row(&self, root: &Path) -> Option<voodu_api::PluginRow> {
        let listed = self.vd(root, &["plugins:list", "-o", "json"], None);
        serde_json::from_str::<serde_json::Value>(&listed.said)
            .ok()
            .and_then(|listed| listed["plugins"].get(0).cloned())
            .and_then(|row| serde_json::from_value::<voodu_api::PluginRow>(row).ok())
    }

    /// The calls the plugin failed (an error, not a refusal) since the
    /// last step, with the last one's error; `None` when it failed none.
    fn failures_since_last_step(&mut self) -> Option<(u64, String)> {
        let row = self.plugin_row(self.root.as_deref()?)?;
        let failed: u64 = row.calls.iter().map(|call| call.errors).sum();
        let new = failed.checked_sub(self.failed_calls).filter(|new| *new > 0);
        self.failed_calls = failed;
        new.map(|new| {
            (
                new,
                row.last_error
                    .unwrap_or_else(|| "its error was not kept".to_owned()),
            )
        })
    }

    fn record(&mut self, name: &str, outcome: StepOutcome, detail: String, took: Duration) {
        self.record_with(name, outcome, detail, took, None);
    }

    /// Records a step in which no request may be lost.
    fn record_with(
        &mut self,
        name: &str,
        outcome: StepOutcome,
        detail: String,
        took: Duration,
        requests: Option<RequestCount>,
    ) {
        self.record_step(name, outcome, detail, took, requests, LossAllowed::No);
    }

    /// Records a step; one that lost requests where none may be lost fails.
    fn record_step(
        &mut self,
        name: &str,
        outcome: StepOutcome,
        detail: String,
        took: Duration,
        requests: Option<RequestCount>,
        loss: LossAllowed,
    ) {
        let (outcome, detail) = match (&requests, loss) {
            (Some(requests), LossAllowed::No) if requests.failed > 0 => (
                StepOutcome::Fail,
                format!(
                    "{detail}, but {} request(s) through the plugin failed meanwhile",
                    requests.failed
                ),
            ),
            _ => (outcome, detail),
        };
        // A call the plugin failed during the step fails it: the host
        // went on, but what the call was for (a set, a drain) did not
        // happen in the plugin.
        let (outcome, detail) = match self.failures_since_last_step() {
            Some((failed, last)) => (
                StepOutcome::Fail,
                format!(
                    "{detail}, but the plugin failed {failed} call(s) meanwhile, the last: {last}"
                ),
            ),
            None => (outcome, detail),
        };
        let step = TestStep {
            name: name.to_owned(),
            outcome,
            detail,
            took_ms: took.as_millis() as u64,
            requests,
        };
        (self.emit)(&step);
        self.steps.push(step);
    }
}

/// Whether a step may lose requests through the plugin: only one that
/// kills a replica behind voodu's back, which cuts what was in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LossAllowed {
    Yes,
    No,
}

/// The throwaway controller, stopped (SIGTERM, then killed) when done.
struct Controller(std::process::Child);

impl Controller {
    fn stop(&mut self) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            self.stop();
        }
    }
}

/// The replicas of `id` that run.
async fn running_replicas(
    engine: &DockerRuntime,
    id: &WorkloadId,
) -> Result<Vec<voodu_runtime::Replica>, String> {
    Ok(engine
        .list(Some(id))
        .await
        .map_err(|error| error.to_string())?
        .into_iter()
        .filter(|replica| replica.is_running())
        .collect())
}

/// Removes every container the throwaway controller of `root` made that is
/// still there (a delete that failed, a controller that died): they are
/// the run's own, told apart by the root's owner label.
fn sweep(root: &Path) {
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return;
    };
    runtime.block_on(async {
        let Ok(engine) = DockerRuntime::connect(crate::server::owner_id(root)).await else {
            return;
        };
        for replica in engine.list(None).await.unwrap_or_default() {
            if let Err(error) = engine.remove(&replica, 0).await {
                tracing::warn!(container = %replica.container_name, %error, "left behind by plugins:test");
            }
        }
    });
}

/// Whether `done` holds within `bound`, asked every 100 ms.
fn wait_for(bound: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + bound;
    loop {
        if done() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The `error:` lines `vd` printed (each problem, then the summary),
/// else its last line.
fn errors_said(said: &str) -> String {
    let errors: Vec<&str> = said
        .lines()
        .filter_map(|line| line.strip_prefix("error: "))
        .collect();
    if errors.is_empty() {
        return said
            .lines()
            .rev()
            .find(|line| !line.trim().is_empty())
            .unwrap_or("it said nothing")
            .to_owned();
    }
    errors.join("; ")
}

/// The manifest `text` (of `file`) with one replica fewer of `id`: its
/// `replicas` value lowered by one, or `replicas = 0` written when it runs
/// the default one.
fn one_replica_fewer(file: &str, text: &str, id: &WorkloadId) -> Result<String, String> {
    let (workloads, problems) = voodu_manifest::parse_manifest(file, text);
    if !problems.is_empty() {
        return Err(format!("{file} does not parse: {}", problems[0]));
    }
    let workload = workloads
        .iter()
        .find(|workload| workload.id == *id)
        .ok_or_else(|| format!("{file} does not declare {id}"))?;
    let replicas = workload.core.replicas;
    if replicas == 0 {
        return Err(format!("{id} runs no replica"));
    }
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    match workload
        .attributes_at
        .iter()
        .find(|(name, _)| name == "replicas")
    {
        Some((_, at)) => {
            let line = lines
                .get_mut(at.line - 1)
                .ok_or_else(|| format!("{at} is past the end of {file}"))?;
            let Some(value) = line.find('=') else {
                return Err(format!("{at}: replicas is not written as `replicas = N`"));
            };
            let after = line[value + 1..].trim_start();
            let count = replicas.to_string();
            if !after.starts_with(&count) {
                return Err(format!(
                    "{at}: replicas is not a number written there ({}), so it is not lowered",
                    line.trim()
                ));
            }
            let rest = after[count.len()..].to_owned();
            *line = format!("{}= {}{rest}", &line[..value], replicas - 1);
        }
        None => {
            let opening = workload.location.line - 1;
            let brace = (opening..lines.len())
                .find(|index| lines[*index].contains('{'))
                .ok_or_else(|| format!("{}: the block's `{{` is not found", workload.location))?;
            lines.insert(brace + 1, "  replicas = 0".to_owned());
        }
    }
    Ok(lines.join("\n") + "\n")
}

/// Clients sending requests through the plugin's address, counting those
/// answered and those lost.
struct Load {
    answered: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
    first_failures: Arc<parking_lot::Mutex<Vec<(u64, String)>>>,
    stop: Arc<AtomicBool>,
    threads: parking_lot::Mutex<Vec<std::thread::JoinHandle<()>>>,
}

/// The counts at one moment, to count a step's requests from.
#[derive(Clone, Copy)]
struct Mark {
    answered: u64,
    failed: u64,
}

impl Load {
    fn start(through: Through) -> Load {
        let load = Load {
            answered: Arc::default(),
            failed: Arc::default(),
            first_failures: Arc::default(),
            stop: Arc::default(),
            threads: parking_lot::Mutex::new(Vec::new()),
        };
        for _ in 0..CLIENTS {
            let (answered, failed, failures, stop, through) = (
                load.answered.clone(),
                load.failed.clone(),
                load.first_failures.clone(),
                load.stop.clone(),
                through.clone(),
            );
            let client = std::thread::spawn(move || {
                let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                else {
                    return;
                };
                while !stop.load(Ordering::SeqCst) {
                    // Paced: a steady load, not one that starves the
                    // controller of the host's cores.
                    std::thread::sleep(PACE);
                    match runtime.block_on(one_request(&through)) {
                        Ok(()) => {
                            answered.fetch_add(1, Ordering::SeqCst);
                        }
                        Err(why) => {
                            let number = failed.fetch_add(1, Ordering::SeqCst);
                            let mut kept = failures.lock();
                            if kept.len() < 100 {
                                kept.push((number, why));
                            }
                            drop(kept);
                            // A refused connection is asked again soon, not
                            // in a tight loop.
                            std::thread::sleep(Duration::from_millis(20));
                        }
                    }
                }
            });
            load.threads.lock().push(client);
        }
        load
    }

    fn mark(&self) -> Mark {
        Mark {
            answered: self.answered.load(Ordering::SeqCst),
            failed: self.failed.load(Ordering::SeqCst),
        }
    }

    /// The requests since `mark`.
    fn since(&self, mark: Mark) -> RequestCount {
        let now = self.mark();
        RequestCount {
            answered: now.answered - mark.answered,
            failed: now.failed - mark.failed,
            first_failure: self
                .first_failures
                .lock()
                .iter()
                .find(|(number, _)| *number >= mark.failed)
                .map(|(_, why)| why.clone()),
        }
    }

    fn total(&self) -> RequestCount {
        self.since(Mark {
            answered: 0,
            failed: 0,
        })
    }

    fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        for thread in self.threads.lock().drain(..) {
            let _ = thread.join();
        }
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop();
    }
}

/// One request through `through`, bounded: a TCP line sent and one read
/// back, or an HTTP GET answered below 500.
async fn one_request(through: &Through) -> Result<(), String> {
    let bound = Duration::from_secs(5);
    let request = async {
        match through {
            Through::Tcp(address) => {
                use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
                let mut stream = tokio::net::TcpStream::connect(address)
                    .await
                    .map_err(|error| format!("connect to {address}: {error}"))?;
                stream
                    .write_all(b"voodu plugins:test\n")
                    .await
                    .map_err(|error| format!("write to {address}: {error}"))?;
                let mut line = String::new();
                let read = tokio::io::BufReader::new(stream)
                    .read_line(&mut line)
                    .await
                    .map_err(|error| format!("read from {address}: {error}"))?;
                if read == 0 {
                    return Err(format!("{address} closed the connection unanswered"));
                }
                Ok(())
            }
            Through::Http { address, path } => {
                let status = voodu_reconcile::http_get(
                    &address.ip().to_string(),
                    address.port(),
                    path,
                    &Default::default(),
                    None,
                )
                .await?;
                if status >= 500 {
                    return Err(format!("GET {path} answered {status}"));
                }
                Ok(())
            }
        }
    };
    tokio::time::timeout(bound, request)
        .await
        .map_err(|_| format!("no answer within {bound:?}"))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_replica_fewer_lowers_the_written_count_or_writes_zero_for_the_default() {
        let id: WorkloadId = "deployment/t/web".parse().unwrap();
        let written =
            "deployment \"t\" \"web\" {\n  image    = \"e:1\"\n  replicas = 3 # three\n}\n";
        assert_eq!(
            one_replica_fewer("m.hcl", written, &id).unwrap(),
            "deployment \"t\" \"web\" {\n  image    = \"e:1\"\n  replicas = 2 # three\n}\n"
        );
        let default = "deployment \"t\" \"web\" {\n  image = \"e:1\"\n}\n";
        assert_eq!(
            one_replica_fewer("m.hcl", default, &id).unwrap(),
            "deployment \"t\" \"web\" {\n  replicas = 0\n  image = \"e:1\"\n}\n"
        );
        let none = "deployment \"t\" \"web\" {\n  image = \"e:1\"\n  replicas = 0\n}\n";
        assert!(one_replica_fewer("m.hcl", none, &id)
            .unwrap_err()
            .contains("runs no replica"));
        let other: WorkloadId = "deployment/t/api".parse().unwrap();
        assert!(one_replica_fewer("m.hcl", written, &other)
            .unwrap_err()
            .contains("does not declare"));
    }
}
