//! Wake-ups between processes with LISTEN/NOTIFY.
//!
//! A producer announces the queues it enqueued into, after its transaction committed and
//! coalesced with its other enqueues (the engine's announcer sends at most one
//! announcement at a time), on a channel of the store's schema. A worker listens on a
//! dedicated connection and claims at once instead of at its next poll. Notifications are
//! a hint: one lost while a listener reconnects only delays a worker until it polls.

use async_trait::async_trait;
use idem_store::{StoreResult, Wakeups};
use sqlx::PgPool;
use sqlx::postgres::PgListener;

use crate::error::interpret_error;

/// The longest payload sent; longer lists of queues are sent as "any queue".
const MAX_PAYLOAD: usize = 7_000;

/// Announces `queues` on the schema's channel.
pub(crate) async fn announce(pool: &PgPool, queues: &[String]) -> StoreResult<()> {
    let mut payload = queues.join("\n");
    if payload.len() > MAX_PAYLOAD {
        payload.clear();
    }
    sqlx::query(include_str!("../queries/notify/announce.sql"))
        .bind(payload)
        .execute(pool)
        .await
        .map_err(interpret_error)?;
    Ok(())
}

/// Opens a listener on the schema's channel.
pub(crate) async fn subscribe(pool: &PgPool) -> StoreResult<Box<dyn Wakeups>> {
    let channel: String = sqlx::query_scalar(include_str!("../queries/notify/channel.sql"))
        .fetch_one(pool)
        .await
        .map_err(interpret_error)?;
    let mut listener = PgListener::connect_with(pool)
        .await
        .map_err(interpret_error)?;
    listener.listen(&channel).await.map_err(interpret_error)?;
    Ok(Box::new(PgWakeups { listener }))
}

struct PgWakeups {
    listener: PgListener,
}

#[async_trait]
impl Wakeups for PgWakeups {
    async fn next(&mut self) -> StoreResult<Vec<String>> {
        let n = self.listener.recv().await.map_err(interpret_error)?;
        Ok(n.payload()
            .split('\n')
            .filter(|q| !q.is_empty())
            .map(str::to_owned)
            .collect())
    }
}
