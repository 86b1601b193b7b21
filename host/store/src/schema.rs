//! The store's schema, as an ordered list of migrations. Append a migration
//! to change the schema; never edit a released one. The schema version lives
//! in SQLite's `user_version`.

use rusqlite::{params, Transaction};
use rusqlite_migration::{HookError, HookResult, Migrations, M};
use serde_json::Value;
use voodu_model::resources::Resources;
use voodu_model::{CoreSpec, NormalisedBlock};

use crate::workloads::spec_hash;

/// Every migration written in SQL alone, oldest first; [`migrations`] adds
/// those that rewrite JSON after them.
const SQL_MIGRATIONS: &[M<'static>] = &[
    M::up(
        r#"
CREATE TABLE workloads (
    kind        TEXT    NOT NULL,
    scope       TEXT    NOT NULL,
    name        TEXT    NOT NULL,
    revision    INTEGER NOT NULL,
    spec_hash   TEXT    NOT NULL,
    core_spec   TEXT    NOT NULL,   -- JSON: the workload's core spec
    source      TEXT,               -- file:line:column it was declared at
    created_ms  INTEGER NOT NULL,
    updated_ms  INTEGER NOT NULL,
    PRIMARY KEY (kind, scope, name)
) STRICT;

-- The normalised plugin blocks of each workload's current revision, in
-- source order.
CREATE TABLE blocks (
    kind        TEXT    NOT NULL,
    scope       TEXT    NOT NULL,
    name        TEXT    NOT NULL,
    position    INTEGER NOT NULL,
    block_type  TEXT    NOT NULL,
    labels      TEXT    NOT NULL,   -- JSON array of strings
    spec        TEXT    NOT NULL,   -- JSON: the spec the plugin normalised
    endpoints   TEXT    NOT NULL,   -- JSON: what the plugin asked to publish
    PRIMARY KEY (kind, scope, name, position),
    FOREIGN KEY (kind, scope, name) REFERENCES workloads (kind, scope, name) ON DELETE CASCADE
) STRICT;
CREATE INDEX blocks_by_type ON blocks (block_type);

-- Every revision ever applied, kept after the workload is deleted.
CREATE TABLE revisions (
    kind        TEXT    NOT NULL,
    scope       TEXT    NOT NULL,
    name        TEXT    NOT NULL,
    revision    INTEGER NOT NULL,
    spec_hash   TEXT    NOT NULL,
    core_spec   TEXT    NOT NULL,
    blocks      TEXT    NOT NULL,   -- JSON array of normalised blocks
    applied_ms  INTEGER NOT NULL,
    PRIMARY KEY (kind, scope, name, revision)
) STRICT;

-- What happened to each workload: applies, refusals, deletes and later
-- publishes and drains.
CREATE TABLE events (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    kind        TEXT    NOT NULL,
    scope       TEXT    NOT NULL,
    name        TEXT    NOT NULL,
    at_ms       INTEGER NOT NULL,
    level       TEXT    NOT NULL,   -- info, warning or error
    reason      TEXT    NOT NULL,
    message     TEXT    NOT NULL
) STRICT;
CREATE INDEX events_by_workload ON events (kind, scope, name, id);
"#,
    ),
    M::up(
        r#"
-- The last endpoint set published to each block, and its generation.
CREATE TABLE publications (
    kind        TEXT    NOT NULL,
    scope       TEXT    NOT NULL,
    name        TEXT    NOT NULL,
    block_type  TEXT    NOT NULL,
    labels      TEXT    NOT NULL,   -- JSON array of strings
    generation  INTEGER NOT NULL,
    endpoints   TEXT    NOT NULL,   -- JSON array of {replica_id, address}
    at_ms       INTEGER NOT NULL,
    PRIMARY KEY (kind, scope, name, block_type, labels)
) STRICT;
"#,
    ),
    M::up(
        r#"
-- Workloads deleted whose replicas and plugin blocks the reconciler has not
-- finished with: removed once every replica is drained and removed and
-- every block forgotten, so a controller killed half way finishes the job.
CREATE TABLE deletions (
    kind        TEXT    NOT NULL,
    scope       TEXT    NOT NULL,
    name        TEXT    NOT NULL,
    core_spec   TEXT    NOT NULL,   -- JSON, as of the deleted revision
    blocks      TEXT    NOT NULL,   -- JSON array of normalised blocks
    at_ms       INTEGER NOT NULL,
    PRIMARY KEY (kind, scope, name)
) STRICT;
"#,
    ),
    M::up(
        r#"
-- The store's identity, made once when the store is created. Every
-- container carries it (the voodu.store label), so a container made for
-- another store (one lost, deleted or replaced) is told from one of this
-- store's own and is never removed unasked.
CREATE TABLE meta (
    key         TEXT    NOT NULL PRIMARY KEY,
    value       TEXT    NOT NULL
) STRICT;
INSERT INTO meta (key, value) VALUES ('store_id', lower(hex(randomblob(8))));

-- A finished deletion stays, as a tombstone: only containers made before a
-- workload's deletion are removed by its sweep; any other container of a
-- workload that is not stored is an orphan, reported and left running.
ALTER TABLE deletions ADD COLUMN finished_ms INTEGER;

-- 1 on the revision that applied a deleted workload again: its history
-- then tells of the delete between two revisions.
ALTER TABLE revisions ADD COLUMN recreated INTEGER NOT NULL DEFAULT 0;
"#,
    ),
];

/// The store's migrations.
pub fn migrations() -> Migrations<'static> {
    let mut all = SQL_MIGRATIONS.to_vec();
    // 5: core specs are stored as their type: `resources` as limits
    // (`memory_bytes`, `nano_cpus`, `pids`) and `probes` with their
    // defaults, both beside `blocks` instead of inside it, and ports in
    // their shortest form. Spec hashes are recomputed over the new form, so
    // applying an unchanged manifest again stores no new revision.
    all.push(M::up_with_hook("", type_core_specs));
    all.push(M::up(
        r#"
-- 6: when a block's plugin was told to forget it (a later revision dropped
-- the block), its publication is marked, not deleted: its last set is no
-- longer shown, and its generation is kept, so a block of the same identity
-- added again continues from it and a plugin that missed the forget never
-- sees the count go back. Rows of blocks dropped before are marked now.
ALTER TABLE publications ADD COLUMN forgotten_ms INTEGER;
UPDATE publications SET forgotten_ms = at_ms, endpoints = '[]'
WHERE NOT EXISTS (
    SELECT 1 FROM blocks b
    WHERE b.kind = publications.kind AND b.scope = publications.scope
      AND b.name = publications.name AND b.block_type = publications.block_type
      AND b.labels = publications.labels);
"#,
    ));
    all.push(M::up(
        r#"
-- 7: voodu's config buckets (`vd config`): one row per variable.
CREATE TABLE config (
    bucket      TEXT    NOT NULL,   -- scope/name
    key         TEXT    NOT NULL,
    value       TEXT    NOT NULL,
    secret      INTEGER NOT NULL DEFAULT 0,
    updated_ms  INTEGER NOT NULL,
    PRIMARY KEY (bucket, key)
) STRICT;
"#,
    ));
    all.push(M::up(
        r#"
-- 8: exclusive claims (a block's listen address). Each block keeps the
-- claims its plugin named; `claims` holds every stored workload's, one row
-- per claim, filed by protocol and port, so an apply reads only the ports
-- it claims. A claim is the JSON of `claims::HeldClaim`.
ALTER TABLE blocks ADD COLUMN claims TEXT NOT NULL DEFAULT '[]';
CREATE TABLE claims (
    protocol  TEXT    NOT NULL,
    port      INTEGER NOT NULL,
    kind      TEXT    NOT NULL,
    scope     TEXT    NOT NULL,
    name      TEXT    NOT NULL,
    held      TEXT    NOT NULL
) STRICT;
CREATE INDEX claims_by_port ON claims (protocol, port);
CREATE INDEX claims_by_workload ON claims (kind, scope, name);
"#,
    ));
    all.push(M::up(
        r#"
-- 9: when `vd restart` last asked for a workload's replicas to be replaced
-- (its spec and revision unchanged); an apply leaves it as it is.
ALTER TABLE workloads ADD COLUMN restarted_ms INTEGER;
"#,
    ));
    all.push(M::up(
        r#"
-- 10: the replicas `vd stop` froze (a JSON list of replica ids): passes
-- leave them as they are, stopped, until `vd start`; an apply keeps it.
ALTER TABLE workloads ADD COLUMN frozen TEXT NOT NULL DEFAULT '[]';
"#,
    ));
    all.push(M::up(
        r#"
-- 11: the secrets key a secret is sealed under (its value then the nonce
-- and ciphertext in hex); NULL: stored plain.
ALTER TABLE config ADD COLUMN sealed_with TEXT;
"#,
    ));
    all.push(M::up(
        r#"
-- 12: the replicas a config change made with --no-restart keeps: those of
-- a workload whose container hash is `hash`, while the workload stays at
-- the revision, spec hash and restart mark beside it.
CREATE TABLE config_holds (
    kind         TEXT    NOT NULL,
    scope        TEXT    NOT NULL,
    name         TEXT    NOT NULL,
    hash         TEXT    NOT NULL,
    revision     INTEGER NOT NULL,
    spec_hash    TEXT    NOT NULL,
    restarted_ms INTEGER,
    PRIMARY KEY (kind, scope, name, hash)
) STRICT;
"#,
    ));
    Migrations::new(all)
}

/// A core spec as stored before schema 5, in the shape of today's
/// [`CoreSpec`]: the raw `resources` block read into limits, the `probes`
/// block moved out of `blocks`. The error says what does not read.
pub(crate) fn upgrade_core_spec(stored: &str) -> Result<CoreSpec, String> {
    let mut spec: Value =
        serde_json::from_str(stored).map_err(|error| format!("not JSON: {error}"))?;
    let Some(fields) = spec.as_object_mut() else {
        return Err("not a JSON object".into());
    };
    if let Some(Value::Object(blocks)) = fields.get_mut("blocks") {
        let resources = blocks.remove("resources");
        let probes = blocks.remove("probes");
        if blocks.is_empty() {
            fields.remove("blocks");
        }
        if let Some(body) = resources {
            let limits = Resources::from_schema_4_block(&body)?;
            let limits = serde_json::to_value(limits).map_err(|error| error.to_string())?;
            fields.insert("resources".into(), limits);
        }
        if let Some(probes) = probes {
            fields.insert("probes".into(), probes);
        }
    }
    serde_json::from_value(spec).map_err(|error| error.to_string())
}

/// A row's workload: kind, scope and name, as the tables key it.
type RowKey = (String, String, String);

/// A stored revision as migration 5 reads it: its key, number, core spec
/// and blocks, as JSON text.
type RevisionRow = (RowKey, i64, String, String);

fn type_core_specs(transaction: &Transaction<'_>) -> HookResult {
    let unreadable = |table: &str, key: &RowKey, why: String| {
        HookError::Hook(format!(
            "{}/{}/{} in {table}: the stored core spec does not read ({why}) — restore the store from a backup (vd store backup) or delete the workload's rows",
            key.0, key.1, key.2
        ))
    };
    let to_text = |spec: &CoreSpec| {
        serde_json::to_string(spec).map_err(|error| HookError::Hook(error.to_string()))
    };

    let revisions: Vec<RevisionRow> = transaction
        .prepare("SELECT kind, scope, name, revision, core_spec, blocks FROM revisions")?
        .query_map([], |row| {
            Ok((
                (row.get(0)?, row.get(1)?, row.get(2)?),
                row.get(3)?,
                row.get(4)?,
                row.get(5)?,
            ))
        })?
        .collect::<Result<_, _>>()?;
    for (key, revision, core_spec, blocks) in revisions {
        let spec =
            upgrade_core_spec(&core_spec).map_err(|why| unreadable("revisions", &key, why))?;
        let blocks: Vec<NormalisedBlock> = serde_json::from_str(&blocks)
            .map_err(|error| unreadable("revisions", &key, error.to_string()))?;
        transaction.execute(
            "UPDATE revisions SET core_spec = ?5, spec_hash = ?6
             WHERE kind = ?1 AND scope = ?2 AND name = ?3 AND revision = ?4",
            params![
                key.0,
                key.1,
                key.2,
                revision,
                to_text(&spec)?,
                spec_hash(&spec, &blocks)
            ],
        )?;
    }

    for table in ["workloads", "deletions"] {
        let rows: Vec<(RowKey, String)> = transaction
            .prepare(&format!("SELECT kind, scope, name, core_spec FROM {table}"))?
            .query_map([], |row| {
                Ok(((row.get(0)?, row.get(1)?, row.get(2)?), row.get(3)?))
            })?
            .collect::<Result<_, _>>()?;
        for (key, core_spec) in rows {
            let spec = upgrade_core_spec(&core_spec).map_err(|why| unreadable(table, &key, why))?;
            transaction.execute(
                &format!("UPDATE {table} SET core_spec = ?4 WHERE kind = ?1 AND scope = ?2 AND name = ?3"),
                params![key.0, key.1, key.2, to_text(&spec)?],
            )?;
        }
    }
    // A workload's hash is its current revision's.
    transaction.execute(
        "UPDATE workloads SET spec_hash = (
             SELECT r.spec_hash FROM revisions r
             WHERE r.kind = workloads.kind AND r.scope = workloads.scope
               AND r.name = workloads.name AND r.revision = workloads.revision)
         WHERE EXISTS (
             SELECT 1 FROM revisions r
             WHERE r.kind = workloads.kind AND r.scope = workloads.scope
               AND r.name = workloads.name AND r.revision = workloads.revision)",
        [],
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_migrations_are_valid() {
        assert!(super::migrations().validate().is_ok());
    }
}
