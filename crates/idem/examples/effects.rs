//! The four effect-once tools in one handler, in one fenced transaction.
//!
//! A shop's payment callback marks an order paid: the order moves from `pending` to
//! `paid` (a guarded transition), the customer's wallet pays the shop (two ledger
//! entries), the invoice gets the next number (a store-assigned number) and the receipt
//! mail goes to an outbox (an effect key). Every callback arrives twice, as a provider
//! that retries would send it; the database ends up with each effect once.
//!
//! Run it with `cargo run -p idem --example effects` (an SQLite file in a temporary
//! directory; nothing else is needed).

use std::time::Duration;

use idem::{
    EffectClass, EffectKey, Guard, Handler, Idem, Job, JobContext, JobError, SqlValue, Transition,
    WorkerConfig,
};
use serde::Deserialize;
use tokio::sync::mpsc;

/// The shop's own tables.
const SCHEMA: [&str; 2] = [
    "CREATE TABLE orders (id BIGINT PRIMARY KEY, customer TEXT NOT NULL, \
     amount BIGINT NOT NULL, status TEXT NOT NULL)",
    "CREATE TABLE outbox (order_id BIGINT NOT NULL, invoice BIGINT NOT NULL)",
];

/// Orders: id, customer, amount in cents.
const ORDERS: [(i64, &str, i64); 3] = [(1, "alice", 500), (2, "bob", 250), (3, "alice", 120)];

#[derive(Deserialize)]
struct Payment {
    order_id: i64,
    customer: String,
    amount: i64,
}

struct OrderPaid {
    orders: Guard,
    done: mpsc::UnboundedSender<(i64, Transition)>, // tells `main` a job finished
}

impl Handler for OrderPaid {
    const KIND: &'static str = "order-paid";
    const EFFECT: EffectClass = EffectClass::Transactional;
    type Args = Payment;

    async fn run(&self, cx: &mut JobContext, p: Payment) -> Result<(), JobError> {
        let id = p.order_id;
        let mut tx = cx.begin().await?; // refused if this claim is stale
        // 1. Guarded transition: pending → paid, once; a repeat finds it already paid.
        let moved = self
            .orders
            .apply(tx.store_tx(), id, "pending", "paid")
            .await?;
        if let Transition::Conflict { current } = &moved {
            return Err(JobError::permanent(format!("order {id} is {current:?}")));
        }
        // 2. Ledger: the wallet pays the shop; a repeated post changes nothing.
        let entry = |side: &str| EffectKey::new("payment").part(id).part(side);
        let wallet = format!("wallet:{}", p.customer);
        tx.ledger_post(&entry("debit"), &wallet, -p.amount).await?;
        tx.ledger_post(&entry("credit"), "shop", p.amount).await?;
        // 3. Store-assigned number: the invoice keeps the number it got first.
        let number_key = EffectKey::new("invoice-number").part(id);
        let invoice = tx.next_number("invoice", &number_key).await?.number;
        // 4. Effect key: one receipt mail per order.
        let mail = EffectKey::new("receipt-mail").part(id);
        if tx.claim_effect(&mail).await?.is_new() {
            let sql = "INSERT INTO outbox (order_id, invoice) VALUES ($1, $2)";
            tx.execute(sql, &[id.into(), invoice.into()]).await?;
        }
        tx.complete().await?; // all four commit with the job's completion, or none does
        let _ = self.done.send((id, moved));
        Ok(())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let idem = Idem::connect(&format!("sqlite://{}/shop.db", dir.path().display())).await?;
    let jobs = setup(&idem).await?;

    let (done, mut finished) = mpsc::unbounded_channel();
    let mut worker = idem.worker(WorkerConfig::default())?;
    let orders = Guard::new("orders", "id", "status")?;
    worker.register(OrderPaid { orders, done })?;
    let running = worker.start();
    for _ in 0..jobs {
        let finished = tokio::time::timeout(Duration::from_secs(30), finished.recv());
        if let Some((id, moved)) = finished.await? {
            println!("callback for order {id}: {moved:?}");
        }
    }
    running.shutdown().await;

    check(&idem).await
}

/// Creates the shop's tables and its pending orders, and enqueues every order's payment
/// callback twice, in one transaction.
async fn setup(idem: &Idem) -> Result<usize, idem::IdemError> {
    let mut tx = idem.begin().await?;
    for sql in SCHEMA {
        tx.execute(sql, &[]).await?;
    }
    let mut jobs = Vec::new();
    for (id, customer, amount) in ORDERS {
        let sql = "INSERT INTO orders (id, customer, amount, status) \
                   VALUES ($1, $2, $3, 'pending')";
        tx.execute(sql, &[id.into(), customer.into(), amount.into()])
            .await?;
        let args = serde_json::json!({"order_id": id, "customer": customer, "amount": amount});
        let job = Job::new(OrderPaid::KIND, args);
        jobs.extend([job.clone(), job]);
    }
    let n = idem.enqueue_many_tx(&mut tx, jobs).await?.len();
    tx.commit().await?;
    Ok(n)
}

/// Prints what the database holds and checks that each effect happened once.
async fn check(idem: &Idem) -> Result<(), Box<dyn std::error::Error>> {
    let rows = |sql| async move { idem.store().query(sql, &[]).await };
    let text = |v: &SqlValue| v.as_str().unwrap_or("?").to_owned();
    let int = |v: &SqlValue| v.as_i64().unwrap_or(i64::MIN);

    let states: Vec<_> = rows("SELECT status FROM orders ORDER BY id").await?;
    let states: Vec<String> = states.iter().map(|r| text(&r[0])).collect();
    println!("orders:   {}", states.join(", "));
    let sql = "SELECT account, balance FROM idem_ledger_balance ORDER BY account";
    let balances: Vec<(String, i64)> = rows(sql)
        .await?
        .iter()
        .map(|r| (text(&r[0]), int(&r[1])))
        .collect();
    let shown: Vec<_> = balances.iter().map(|(a, b)| format!("{a} {b}")).collect();
    println!("balances: {}", shown.join(", "));
    let sql = "SELECT order_id, invoice FROM outbox ORDER BY order_id";
    let mails: Vec<(i64, i64)> = rows(sql)
        .await?
        .iter()
        .map(|r| (int(&r[0]), int(&r[1])))
        .collect();
    let shown: Vec<_> = mails
        .iter()
        .map(|(o, n)| format!("{o}: invoice {n}"))
        .collect();
    println!("mails:    order {}", shown.join(", order "));

    assert_eq!(states, ["paid", "paid", "paid"], "each order moved once");
    let expected = [("shop", 870), ("wallet:alice", -620), ("wallet:bob", -250)];
    let expected: Vec<_> = expected.map(|(a, b)| (a.to_owned(), b)).into();
    assert_eq!(balances, expected, "each payment moved money once");
    assert!(idem.ledger_verify().await?.is_empty(), "totals = entries");
    let mut numbers: Vec<i64> = mails.iter().map(|m| m.1).collect();
    numbers.sort_unstable();
    assert_eq!(numbers, [1, 2, 3], "one mail per order; invoices 1 to 3");
    println!("each effect happened once: 3 orders paid, 3 payments, 3 invoices, 3 mails");
    Ok(())
}
