//! `vd store backup FILE`: a consistent copy of the store, taken while the
//! controller runs, through SQLite's online backup API
//! ([`voodu_store::Store::backup_to`]). Restoring is done with the
//! controller stopped, by putting the copy in place of `<root>/state.db`
//! (README, "Backups"); a restored store keeps its identity, and the
//! replicas of workloads it lacks are reported as orphans, never removed.

use std::path::Path;

use voodu_api::{Failure, Response};
use voodu_store::StateStore;

/// Writes the copy to `path`, which must not exist yet.
pub(crate) fn backup(store: &dyn StateStore, path: &Path) -> Result<Response, Failure> {
    if path.exists() {
        return Err(Failure::new(format!(
            "store backup: {} already exists — name a new file, or remove it first",
            path.display()
        )));
    }
    let store_id = {
        store
            .backup_to(path)
            .map_err(|error| Failure::new(format!("store backup: {error}")))?;
        store.id().to_owned()
    };
    let bytes = std::fs::metadata(path)
        .map(|metadata| metadata.len())
        .map_err(|error| {
            Failure::new(format!(
                "store backup: the copy {} cannot be read back: {error}",
                path.display()
            ))
        })?;
    Ok(Response::BackedUp {
        path: path.to_owned(),
        bytes,
        store_id,
    })
}
