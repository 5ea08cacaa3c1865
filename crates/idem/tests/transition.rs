//! Guarded transitions on both stores: a row moves once; a repeat finds it already there;
//! another state is a conflict; two transactions on two pools racing on one row move it
//! once.

mod common;

use std::sync::Arc;

use common::*;
use idem::{Guard, Idem, Transition};
use idem_store_tests::harness::within;
use idem_store_tests::{TestDb, open_store};
use tokio::sync::Barrier;

async fn orders(idem: &Idem) -> Guard {
    let mut tx = idem.begin().await.unwrap();
    tx.execute(
        "CREATE TABLE orders (id BIGINT PRIMARY KEY, status TEXT NOT NULL)",
        &[],
    )
    .await
    .unwrap();
    tx.execute(
        "INSERT INTO orders (id, status) VALUES (1, 'pending'), (2, 'pending')",
        &[],
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    Guard::new("orders", "id", "status").unwrap()
}

async fn a_row_moves_once_and_says_why_not(db: &TestDb) {
    let idem = client(db, None);
    let guard = orders(&idem).await;
    let mut tx = idem.begin().await.unwrap();
    let mut step = async |id: i64, from: &str, to: &str| {
        guard.apply(tx.store_tx(), id, from, to).await.unwrap()
    };
    assert_eq!(step(1, "pending", "paid").await, Transition::Changed);
    assert_eq!(step(1, "pending", "paid").await, Transition::AlreadyThere);
    let conflict = Transition::Conflict {
        current: Some("paid".into()),
    };
    assert_eq!(step(1, "pending", "cancelled").await, conflict);
    assert_eq!(
        step(9, "pending", "paid").await,
        Transition::Conflict { current: None }
    );
    tx.commit().await.unwrap();
    let err = Guard::new("orders", "id; --", "status")
        .unwrap_err()
        .to_string();
    assert!(err.contains("not a plain identifier"), "{err}");
}

async fn two_transactions_race_on_one_row(db: &TestDb) {
    let idem = client(db, None);
    let guard = Arc::new(orders(&idem).await);
    let barrier = Arc::new(Barrier::new(2));
    let mut tasks = Vec::new();
    for _ in 0..2 {
        let store = open_store(&db.url).await.expect("another pool");
        let (guard, barrier) = (guard.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            let other = Idem::from_store(store.clone());
            barrier.wait().await;
            let mut tx = other.begin().await.unwrap();
            let t = guard
                .apply(tx.store_tx(), 2_i64, "pending", "paid")
                .await
                .unwrap();
            tx.commit().await.unwrap();
            store.close().await;
            t
        }));
    }
    let mut got = Vec::new();
    for t in tasks {
        got.push(within(60, "both transactions end", t).await.unwrap());
    }
    got.sort_by_key(|t| format!("{t:?}"));
    assert_eq!(got, vec![Transition::AlreadyThere, Transition::Changed]);
}

idem_store_tests::store_cases!(
    a_row_moves_once_and_says_why_not,
    two_transactions_race_on_one_row
);
