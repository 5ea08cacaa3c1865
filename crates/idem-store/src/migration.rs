//! Embedded migrations: the numbering shared by every store and the plan of what to run.
//!
//! Each store embeds its own SQL for each version (same numbers, same names, its own
//! dialect) and records applied versions in its `idem_migration` table. [`pending`] is the
//! one place that decides what to apply and refuses a database whose schema is newer than
//! this build.

use crate::{StoreError, StoreResult};

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
pub const COUNT: usize = 8;

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
/// has a version this build does not know (it was migrated by a newer idem).
pub fn pending<'a>(all: &'a [Migration], applied: &[i64]) -> StoreResult<Vec<&'a Migration>> {
    let newest_known = all.iter().map(|m| m.version).max().unwrap_or(0);
    if let Some(newer) = applied.iter().copied().find(|v| *v > newest_known) {
        return Err(StoreError::Migration(format!(
            "the database has schema version {newer}, newer than this build of idem knows \
             ({newest_known}); upgrade idem before using this database"
        )));
    }
    let mut out: Vec<&Migration> = all
        .iter()
        .filter(|m| !applied.contains(&m.version))
        .collect();
    out.sort_by_key(|m| m.version);
    Ok(out)
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
        assert!(err.to_string().contains("schema version 3"), "{err}");
    }
}
