//! The ledger on both stores: the same transfer posted by many concurrent executions, on
//! two connection pools, moves each balance once. (Verify, repair and the fence check of a
//! post are conformance cases: `idem-store-tests/src/cases/ledger.rs`.)

mod common;

use std::sync::Arc;

use common::*;
use idem::{EffectClass, EffectKey, Handler, Idem, Job, JobContext, JobError};
use idem_store_tests::harness::within;
use idem_store_tests::{TestDb, open_store};
use tokio::sync::{Barrier, mpsc};

#[derive(serde::Deserialize)]
struct Transfer {
    id: i64,
    from: String,
    to: String,
    amount: i64,
}

/// Posts a transfer as two entries, after a barrier shared by every execution.
struct PostTransfer {
    barrier: Arc<Barrier>,
    posted: mpsc::UnboundedSender<(bool, bool)>,
}

impl Handler for PostTransfer {
    const KIND: &'static str = "transfer";
    const EFFECT: EffectClass = EffectClass::Transactional;
    type Args = Transfer;

    async fn run(&self, cx: &mut JobContext, t: Transfer) -> Result<(), JobError> {
        self.barrier.wait().await;
        let mut tx = cx.begin().await?;
        let key = |side: &str| EffectKey::new("transfer").part(t.id).part(side);
        let debit = tx.ledger_post(&key("debit"), &t.from, -t.amount).await?;
        let credit = tx.ledger_post(&key("credit"), &t.to, t.amount).await?;
        tx.complete().await?;
        let _ = self.posted.send((debit.is_new(), credit.is_new()));
        Ok(())
    }
}

const COPIES: usize = 6;

async fn one_transfer_posted_many_times_moves_once(db: &TestDb) {
    let idem = client(db, None);
    let args = serde_json::json!({"id": 7, "from": "alice", "to": "bob", "amount": 100});
    let jobs = (0..COPIES).map(|_| Job::new("transfer", args.clone()).queue("ledger"));
    idem.enqueue_many(jobs.collect()).await.unwrap();
    let (barrier, (posted, mut posted_rx)) =
        (Arc::new(Barrier::new(COPIES)), mpsc::unbounded_channel());
    let mut running = Vec::new();
    for _ in 0..2 {
        let store = open_store(&db.url).await.expect("another pool");
        let mut w = Idem::from_store(store.clone())
            .worker(config("ledger", COPIES / 2))
            .unwrap();
        w.register(PostTransfer {
            barrier: barrier.clone(),
            posted: posted.clone(),
        })
        .unwrap();
        running.push((w.start(), store));
    }
    let mut news = (0, 0);
    for _ in 0..COPIES {
        let (d, c) = within(60, "every copy runs", posted_rx.recv())
            .await
            .unwrap();
        news = (news.0 + usize::from(d), news.1 + usize::from(c));
    }
    for (h, store) in running {
        let report = within(30, "shutdown", h.shutdown()).await;
        store.close().await;
        // The barrier holds every copy until all run at once, and each worker has room
        // for half of them: both pools are in the race.
        assert_eq!(report.completed, COPIES as u64 / 2, "{report:?}");
    }
    assert_eq!(
        news,
        (1, 1),
        "one execution posted, the others were told it was done"
    );
    assert!(idem.ledger_verify().await.unwrap().is_empty());
    assert_eq!(
        balances(&idem).await,
        vec![("alice".into(), -100), ("bob".into(), 100)]
    );
}

async fn balances(idem: &Idem) -> Vec<(String, i64)> {
    let sql = "SELECT account, balance FROM idem_ledger_balance ORDER BY account";
    let rows = idem.store().query(sql, &[]).await.unwrap();
    rows.into_iter()
        .map(|r| (r[0].as_str().unwrap().to_owned(), r[1].as_i64().unwrap()))
        .collect()
}

idem_store_tests::store_cases!(one_transfer_posted_many_times_moves_once);
