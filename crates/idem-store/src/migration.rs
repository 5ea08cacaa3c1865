//! Embedded migrations: the numbering shared by every store and the plan of what to run.
//!
//! Each store embeds its own SQL for each version (same numbers, same names, its own
//! dialect) and records applied versions in its `idem_migration` table. `plan` is the one
//! place that decides what is pending and what is newer than this build: [`pending`] (what
//! `migrate()` applies, refusing a newer schema) and [`SchemaStatus`] (what a store reports
//! without writing anything) both ask it.

use serde::{Deserialize, Serialize};

use crate::{StoreError, StoreResult, Timestamp};

/// One embedded migration.
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    /// Version number, starting at 1, the same on every store.
    pub version: i64,
    /// Short name, the same on every store.
    pub name: &'static str,
    /// The store's SQL; may hold several statements.
    pub sql: &'static str,
}

impl Migration {
    /// The error of this migration failing with `cause` (the store's own error).
    pub fn failed(&self, cause: StoreError) -> StoreError {
        StoreError::Migration(format!(
            "migration {:04}_{} failed: {cause}",
            self.version, self.name
        ))
    }
}

/// How many migrations this build has.
pub const COUNT: usize = 18;

/// Every migration's version and name, the same on every store, in order.
pub const NAMES: [(i64, &str); COUNT] = [
    (1, "job"),
    (2, "effect"),
    (3, "ledger"),
    (4, "counter"),
    (5, "enqueue_key"),
    (6, "counter_number_key"),
    (7, "enqueue_key_window"),
    (8, "job_snoozes"),
    (9, "intent"),
    (10, "job_enqueue_key"),
    (11, "http_key"),
    (12, "batch"),
    (13, "queue_pause"),
    (14, "job_trace"),
    (15, "state_checks"),
    (16, "job_awaits_intent"),
    (17, "job_awaited_intent"),
    (18, "leader"),
];

/// A store's migrations: `sql[i]` is the store's SQL for `NAMES[i]`. A store that lacks
/// a migration, or has one too many, does not compile.
pub fn with_sql(sql: [&'static str; COUNT]) -> [Migration; COUNT] {
    std::array::from_fn(|i| Migration {
        version: NAMES[i].0,
        name: NAMES[i].1,
        sql: sql[i],
    })
}

/// The migrations of `all` not in `applied`, in version order. Refuses a database that
/// has a version this build does not know (it was migrated by a newer idem) with
/// [`StoreError::SchemaNotCurrent`].
pub fn pending<'a>(all: &'a [Migration], applied: &[i64]) -> StoreResult<Vec<&'a Migration>> {
    let known: Vec<i64> = all.iter().map(|m| m.version).collect();
    let plan = plan(&known, applied);
    if let Some(&newer) = plan.newer.first() {
        return Err(StoreError::SchemaNotCurrent(newer_schema(newer, &known)));
    }
    let mut out: Vec<&Migration> = all
        .iter()
        .filter(|m| plan.pending.contains(&m.version))
        .collect();
    out.sort_by_key(|m| m.version);
    Ok(out)
}

/// What a database that recorded `applied` lacks of `known`, and what it has beyond it.
struct Plan {
    /// Known versions not applied, in no particular order.
    pending: Vec<i64>,
    /// Applied versions above the newest known one: a newer idem migrated the database.
    newer: Vec<i64>,
}

/// The one decision: a known version not recorded is pending; a recorded version above
/// every known one is newer than this build.
fn plan(known: &[i64], applied: &[i64]) -> Plan {
    let newest_known = known.iter().copied().max().unwrap_or(0);
    Plan {
        pending: known
            .iter()
            .copied()
            .filter(|v| !applied.contains(v))
            .collect(),
        newer: applied
            .iter()
            .copied()
            .filter(|v| *v > newest_known)
            .collect(),
    }
}

fn newer_schema(newer: i64, known: &[i64]) -> String {
    let newest_known = known.iter().copied().max().unwrap_or(0);
    format!(
        "the database has schema version {newer}, newer than this build of idem knows \
         ({newest_known}); upgrade idem before using this database"
    )
}

/// One migration: as a database recorded it (`applied_at` set), or as this build would
/// apply it (`applied_at` is `None`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchemaMigration {
    /// Version number.
    pub version: i64,
    /// Short name.
    pub name: String,
    /// When the database recorded it; `None` for a pending migration.
    pub applied_at: Option<Timestamp>,
}

impl std::fmt::Display for SchemaMigration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:04}_{}", self.version, self.name)
    }
}

/// Where a database's schema stands against this build ([`crate::Store::schema_status`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchemaStatus {
    /// Migrations the database recorded that this build knows, in version order.
    pub applied: Vec<SchemaMigration>,
    /// Migrations of this build the database has not recorded, in version order: what
    /// `migrate()` would apply.
    pub pending: Vec<SchemaMigration>,
    /// Migrations the database recorded that this build does not know (a newer idem
    /// migrated it), in version order. `migrate()` refuses such a database.
    pub newer: Vec<SchemaMigration>,
}

impl SchemaStatus {
    /// The status of a database that recorded `recorded`, against this build's
    /// migrations ([`NAMES`]). A database without idem's migrations table recorded none.
    pub fn of(recorded: Vec<SchemaMigration>) -> SchemaStatus {
        SchemaStatus::against(&NAMES, recorded)
    }

    /// [`SchemaStatus::of`] against the migrations `known` (version, name).
    pub fn against(known: &[(i64, &str)], mut recorded: Vec<SchemaMigration>) -> SchemaStatus {
        recorded.sort_by_key(|m| m.version);
        let versions: Vec<i64> = known.iter().map(|(v, _)| *v).collect();
        let applied: Vec<i64> = recorded.iter().map(|m| m.version).collect();
        let plan = plan(&versions, &applied);
        let pending = known
            .iter()
            .filter(|(v, _)| plan.pending.contains(v))
            .map(|(version, name)| SchemaMigration {
                version: *version,
                name: (*name).to_owned(),
                applied_at: None,
            })
            .collect();
        let (newer, applied) = recorded
            .into_iter()
            .partition(|m| plan.newer.contains(&m.version));
        SchemaStatus {
            applied,
            pending,
            newer,
        }
    }

    /// Whether the schema is exactly this build's: nothing pending, nothing newer.
    pub fn is_current(&self) -> bool {
        self.pending.is_empty() && self.newer.is_empty()
    }

    /// `Ok` when the schema is current; otherwise [`StoreError::SchemaNotCurrent`] saying
    /// which migrations are pending or newer and what to do.
    pub fn require_current(&self) -> StoreResult<()> {
        if let Some(newer) = self.newer.last() {
            let known: Vec<i64> = NAMES.iter().map(|(v, _)| *v).collect();
            return Err(StoreError::SchemaNotCurrent(newer_schema(
                newer.version,
                &known,
            )));
        }
        if self.pending.is_empty() {
            return Ok(());
        }
        Err(StoreError::SchemaNotCurrent(self.pending_message()))
    }

    fn pending_message(&self) -> String {
        let all = self.applied.len() + self.pending.len();
        if self.applied.is_empty() {
            return format!(
                "the database holds no idem schema (none of this build's {all} migrations \
                 applied); create it with `idem migrate`"
            );
        }
        let names: Vec<String> = self.pending.iter().map(|m| m.to_string()).collect();
        format!(
            "the database's schema is older than this build: {} of {all} migrations pending \
             ({}); apply them with `idem migrate`",
            self.pending.len(),
            names.join(", ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [Migration; 2] = [
        Migration {
            version: 1,
            name: "a",
            sql: "",
        },
        Migration {
            version: 2,
            name: "b",
            sql: "",
        },
    ];

    #[test]
    fn pending_lists_missing_versions_in_order() {
        let todo = pending(&ALL, &[1]).unwrap();
        assert_eq!(todo.iter().map(|m| m.version).collect::<Vec<_>>(), vec![2]);
        assert_eq!(pending(&ALL, &[]).unwrap().len(), 2);
        assert!(pending(&ALL, &[1, 2]).unwrap().is_empty());
    }

    #[test]
    fn pending_refuses_a_newer_schema() {
        let err = pending(&ALL, &[1, 2, 3]).unwrap_err();
        assert!(matches!(err, StoreError::SchemaNotCurrent(_)), "{err:?}");
        assert!(err.to_string().contains("schema version 3"), "{err}");
    }

    const KNOWN: [(i64, &str); 2] = [(1, "a"), (2, "b")];

    fn recorded(version: i64) -> SchemaMigration {
        SchemaMigration {
            version,
            name: format!("m{version}"),
            applied_at: Some(Timestamp::UNIX_EPOCH),
        }
    }

    #[test]
    fn status_splits_applied_pending_and_newer() {
        let s = SchemaStatus::against(&KNOWN, vec![recorded(1)]);
        assert_eq!(s.applied, vec![recorded(1)]);
        assert_eq!(
            s.pending.iter().map(|m| m.to_string()).collect::<Vec<_>>(),
            ["0002_b"]
        );
        assert!(s.newer.is_empty() && !s.is_current());
        let s = SchemaStatus::against(&KNOWN, vec![recorded(3), recorded(1), recorded(2)]);
        assert_eq!(s.applied, vec![recorded(1), recorded(2)]);
        assert_eq!(s.newer, vec![recorded(3)]);
        assert!(s.pending.is_empty() && !s.is_current());
        assert!(SchemaStatus::against(&KNOWN, vec![recorded(1), recorded(2)]).is_current());
    }

    #[test]
    fn status_of_an_older_or_empty_schema_is_refused_naming_the_pending() {
        let err = SchemaStatus::of(vec![recorded(1)])
            .require_current()
            .unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, StoreError::SchemaNotCurrent(_)), "{err:?}");
        assert!(
            msg.contains("0002_effect") && msg.contains("idem migrate"),
            "{msg}"
        );
        let msg = SchemaStatus::of(vec![])
            .require_current()
            .unwrap_err()
            .to_string();
        assert!(msg.contains("no idem schema"), "{msg}");
        let future = recorded(COUNT as i64 + 1);
        let msg = SchemaStatus::of(vec![future])
            .require_current()
            .unwrap_err()
            .to_string();
        assert!(msg.contains("upgrade idem"), "{msg}");
    }
}
