//! Store-assigned numbers on both stores: invoices for 40 orders, numbered by jobs running
//! at once on two connection pools (with every order's job enqueued twice), get exactly
//! the numbers 1 to 40, one per order.

mod common;

use common::*;
use idem::{EffectClass, EffectKey, Handler, Idem, Job, JobContext, JobError};
use idem_store_tests::harness::within;
use idem_store_tests::{TestDb, open_store};
use std::sync::Arc;

use tokio::sync::{Barrier, mpsc};

struct Invoice {
    /// Holds every round of executions until both workers' slots are full, so the two
    /// pools allocate at once.
    round: Arc<Barrier>,
    done: mpsc::UnboundedSender<(i64, i64)>,
}

#[derive(serde::Deserialize)]
struct Order {
    order: i64,
}

impl Handler for Invoice {
    const KIND: &'static str = "invoice";
    const EFFECT: EffectClass = EffectClass::Transactional;
    type Args = Order;

    async fn run(&self, cx: &mut JobContext, args: Order) -> Result<(), JobError> {
        self.round.wait().await;
        let mut tx = cx.begin().await?;
        let key = EffectKey::new("invoice-number").part(args.order);
        let n = tx.next_number("invoice", &key).await?;
        tx.complete().await?;
        let _ = self.done.send((args.order, n.number));
        Ok(())
    }
}

const ORDERS: i64 = 40;
/// Jobs each worker runs at once; the 80 jobs are five full rounds of both workers.
const SLOTS: usize = 8;

async fn concurrent_allocations_number_each_order_once(db: &TestDb) {
    let idem = client(db, None);
    let jobs = (0..ORDERS * 2)
        .map(|i| Job::new("invoice", serde_json::json!({"order": i % ORDERS})).queue("inv"))
        .collect();
    idem.enqueue_many(jobs).await.unwrap();
    let (done, mut done_rx) = mpsc::unbounded_channel();
    let round = Arc::new(Barrier::new(2 * SLOTS));
    let mut running = Vec::new();
    for _ in 0..2 {
        let store = open_store(&db.url).await.expect("another pool");
        let mut w = Idem::from_store(store.clone())
            .worker(config("inv", SLOTS))
            .unwrap();
        w.register(Invoice {
            round: round.clone(),
            done: done.clone(),
        })
        .unwrap();
        running.push((w.start(), store));
    }
    let mut by_order = std::collections::BTreeMap::new();
    for _ in 0..ORDERS * 2 {
        let (order, number) = within(60, "every job runs", done_rx.recv()).await.unwrap();
        let first = *by_order.entry(order).or_insert(number);
        assert_eq!(first, number, "order {order} got two numbers");
    }
    for (h, store) in running {
        let report = within(30, "shutdown", h.shutdown()).await;
        store.close().await;
        assert_eq!(
            report.completed, ORDERS as u64,
            "each pool ran half: {report:?}"
        );
    }
    let mut numbers: Vec<i64> = by_order.into_values().collect();
    numbers.sort_unstable();
    assert_eq!(
        numbers,
        (1..=ORDERS).collect::<Vec<_>>(),
        "1 to {ORDERS}, no gap, no repeat"
    );
}

idem_store_tests::store_cases!(concurrent_allocations_number_each_order_once);
