//! Wake-ups between processes with LISTEN/NOTIFY.
//!
//! A producer announces the queues it enqueued into, after its transaction committed and
//! coalesced with its other enqueues (the engine's announcer sends at most one
//! announcement at a time), on a channel of the store's schema. A worker listens on a
//! dedicated connection and claims at once instead of at its next poll. Notifications are
//! a hint: one lost while a listener reconnects only delays a worker until it polls.
//!
//! Behind a pooler in transaction mode, NOTIFY goes through the pooler (it is sent at
//! commit), but LISTEN would subscribe a server session the pooler soon hands to another
//! client: the listener connects directly to the server when a direct URL is configured
//! (`listen_url`), and otherwise there is no subscription and workers poll.

use async_trait::async_trait;
use idem_store::{StoreError, StoreResult, Wakeups};
use sqlx::PgPool;
use sqlx::postgres::PgListener;

use crate::error::interpret_error;
use crate::pooler::{Pool, Pooler};

/// The longest payload sent; longer lists of queues are sent as "any queue".
const MAX_PAYLOAD: usize = 7_000;

/// Announces `queues` on the schema's channel.
pub(crate) async fn announce(pool: &Pool, queues: &[String]) -> StoreResult<()> {
    let mut payload = queues.join("\n");
    if payload.len() > MAX_PAYLOAD {
        payload.clear();
    }
    pool.run(|c| {
        Box::pin(async move {
            sqlx::query(include_str!("../queries/notify/announce.sql"))
                .bind(payload)
                .execute(c)
                .await
                .map_err(interpret_error)?;
            Ok(())
        })
    })
    .await
}

/// Opens a listener on the schema's channel: on a connection of `pool`, or behind a
/// pooler on one of `direct`; `None` behind a pooler without `direct`.
pub(crate) async fn subscribe(
    pool: &Pool,
    direct: Option<&PgPool>,
) -> StoreResult<Option<Box<dyn Wakeups>>> {
    let listen_on = match (pool.pooler(), direct) {
        (Pooler::None, _) => &pool.pool,
        (Pooler::Transaction, Some(direct)) => direct,
        (Pooler::Transaction, None) => return Ok(None),
    };
    if listen_on.is_closed() {
        return Ok(None);
    }
    let channel: String = pool
        .run(|c| {
            Box::pin(async move {
                sqlx::query_scalar(include_str!("../queries/notify/channel.sql"))
                    .fetch_one(c)
                    .await
                    .map_err(interpret_error)
            })
        })
        .await?;
    let mut listener = PgListener::connect_with(listen_on)
        .await
        .map_err(interpret_error)?;
    listener.listen(&channel).await.map_err(interpret_error)?;
    let pool = listen_on.clone();
    Ok(Some(Box::new(PgWakeups {
        listener: Some(listener),
        pool,
    })))
}

/// A subscription on a connection of `pool`, which it gives back when the pool closes:
/// the store's `close` waits for every connection of its pools.
struct PgWakeups {
    listener: Option<PgListener>,
    pool: PgPool,
}

#[async_trait]
impl Wakeups for PgWakeups {
    async fn next(&mut self) -> StoreResult<Vec<String>> {
        let received = match self.listener.as_mut() {
            None => None,
            Some(listener) => tokio::select! {
                n = listener.recv() => Some(n),
                () = self.pool.close_event() => None,
            },
        };
        let Some(n) = received else {
            self.listener = None;
            return Err(StoreError::Unavailable(
                "the store was closed; its subscription to wake-ups ended".into(),
            ));
        };
        Ok(n.map_err(interpret_error)?
            .payload()
            .split('\n')
            .filter(|q| !q.is_empty())
            .map(str::to_owned)
            .collect())
    }
}
