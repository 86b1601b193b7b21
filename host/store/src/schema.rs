//! The store's schema, as an ordered list of migrations. Append a migration
//! to change the schema; never edit a released one. The schema version lives
//! in SQLite's `user_version`.

use rusqlite_migration::{Migrations, M};

/// Every migration, oldest first.
const MIGRATIONS: &[M<'static>] = &[
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
    Migrations::from_slice(MIGRATIONS)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_migrations_are_valid() {
        assert!(super::migrations().validate().is_ok());
    }
}
