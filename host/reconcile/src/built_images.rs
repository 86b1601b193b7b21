//! Images built from source on a node of a cluster that lacks them. The
//! node that took the apply built the image ([`crate::Reconciler::build_image`])
//! and keeps its context; any other node that is to start a replica or a
//! run of the workload, and whose engine lacks the image, fetches that
//! context through its [`crate::cluster::ClusterView`] and builds the same
//! image before it creates the container. One build of a tag at a time:
//! the passes and runs that need it meanwhile wait for it and build
//! nothing more.

use voodu_model::core_spec::CoreSpec;
use voodu_model::EventReason;
use voodu_model::WorkloadId;
use voodu_store::EventLevel;

use crate::{event, ReconcileError, Reconciler};

impl Reconciler {
    /// Makes sure this node's engine has the image `core` runs, when it is
    /// built from source (`build` with a digest) and this node is in a
    /// cluster: an image it lacks is built here from the context the node
    /// that built it keeps. An image named with `image = "..."` is left to
    /// the engine's pull, as ever; on one host the apply built it here.
    pub(crate) async fn ensure_built_image(
        &self,
        workload: &WorkloadId,
        core: &CoreSpec,
    ) -> Result<(), ReconcileError> {
        let (Some(build), Some(tag), Some(cluster)) = (
            core.build.as_ref(),
            core.image.as_deref(),
            self.cluster.get(),
        ) else {
            return Ok(());
        };
        if build.digest.is_none() || self.runtime.has_image(tag).await? {
            return Ok(());
        }
        let lock = self.built_images.of(&tag.to_owned());
        let _building = lock.lock().await;
        // Another pass or run may have built it while this one waited.
        if self.runtime.has_image(tag).await? {
            return Ok(());
        }
        let from = build
            .kept_by
            .as_deref()
            .map_or_else(|| "another node".to_owned(), |node| format!("node {node}"));
        self.record(&[event(
            workload,
            EventLevel::Info,
            EventReason::Building,
            format!("this node lacks {tag}: building it from the context {from} keeps"),
        )]);
        let failed = |why: String| {
            let message = format!("cannot build {tag} on this node: {why}");
            self.record(&[event(
                workload,
                EventLevel::Error,
                EventReason::BuildFailed,
                message.clone(),
            )]);
            ReconcileError::Build(message)
        };
        let archive = cluster.build_context(build).await.map_err(failed)?;
        let tag_for_log = tag.to_owned();
        self.runtime
            .build_image(tag, archive, &build.as_built(), &|line| {
                tracing::debug!(image = %tag_for_log, "build: {line}");
            })
            .await
            .map_err(|error| failed(error.to_string()))?;
        self.record(&[event(
            workload,
            EventLevel::Info,
            EventReason::Built,
            format!("built {tag} from the context {from} keeps"),
        )]);
        Ok(())
    }
}
