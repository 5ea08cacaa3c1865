//! Writes whose answer is stored under an Idempotency-Key in the write's own transaction
//! (`POST /v1/jobs`, `POST /v1/batches`, `POST /v1/batches/{id}/children`).
//!
//! What must stay true: under an Idempotency-Key, the write and its answer commit
//! together or not at all, so no job or batch exists whose answer was not stored, and a
//! repeat of the request replays the answer instead of writing again. The response is
//! marked [`AnswerStored`], so the layer writes nothing after the handler. Without a key
//! the write is the library's plain one (which may hand a job to a local worker at once).

use axum::Extension;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use idem::{Batch, BatchAdded, Enqueued, Idem, IdemError, Job, Tx};

use super::error::problem;
use crate::idempotency::{AnswerStored, Reservation};
use crate::problem::Problem;

/// A write the API answers: made on its own, or inside a transaction of the handler's.
pub(super) trait Write {
    /// What the write returns.
    type Done;

    /// Makes the write on its own.
    async fn direct(self, idem: &Idem) -> Result<Self::Done, IdemError>;

    /// Makes the write in `tx`.
    async fn in_tx(self, idem: &Idem, tx: &mut Tx) -> Result<Self::Done, IdemError>;
}

impl Write for Job {
    type Done = Enqueued;

    async fn direct(self, idem: &Idem) -> Result<Enqueued, IdemError> {
        idem.enqueue(self).await
    }

    async fn in_tx(self, idem: &Idem, tx: &mut Tx) -> Result<Enqueued, IdemError> {
        idem.enqueue_tx(tx, self).await
    }
}

impl Write for Batch {
    type Done = BatchAdded;

    async fn direct(self, idem: &Idem) -> Result<BatchAdded, IdemError> {
        idem.batch(self).await
    }

    async fn in_tx(self, idem: &Idem, tx: &mut Tx) -> Result<BatchAdded, IdemError> {
        idem.batch_tx(tx, self).await
    }
}

/// Children to add to a batch.
pub(super) struct AddChildren {
    /// The batch.
    pub(super) batch_id: i64,
    /// The children.
    pub(super) children: Vec<Job>,
}

impl Write for AddChildren {
    type Done = BatchAdded;

    async fn direct(self, idem: &Idem) -> Result<BatchAdded, IdemError> {
        idem.batch_add(self.batch_id, self.children).await
    }

    async fn in_tx(self, idem: &Idem, tx: &mut Tx) -> Result<BatchAdded, IdemError> {
        idem.batch_add_tx(tx, self.batch_id, self.children).await
    }
}

/// Makes `write` and answers with the status and JSON body `answer` gives for it: under
/// `reservation`, in one transaction with the stored answer.
pub(super) async fn write<W: Write>(
    idem: &Idem,
    reservation: Option<Extension<Reservation>>,
    write: W,
    answer: impl FnOnce(W::Done) -> (StatusCode, Vec<u8>),
) -> Response {
    let answered = match reservation {
        Some(Extension(r)) => keyed(idem, &r, write, answer).await,
        None => write.direct(idem).await.map(|done| {
            let (status, body) = answer(done);
            json_response(status, body)
        }),
    };
    answered.unwrap_or_else(|e| problem(e).into_response())
}

/// A JSON response of `status` with `body`.
pub(super) fn json_response(status: StatusCode, body: Vec<u8>) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// `write` and its answer under `reservation`, committed together; rolled back (nothing
/// written) when another request took the key over meanwhile.
async fn keyed<W: Write>(
    idem: &Idem,
    reservation: &Reservation,
    write: W,
    answer: impl FnOnce(W::Done) -> (StatusCode, Vec<u8>),
) -> Result<Response, IdemError> {
    let mut tx = idem.begin().await?;
    let (status, body) = answer(write.in_tx(idem, &mut tx).await?);
    let stored = reservation.complete(
        status.as_u16(),
        &[("content-type", "application/json")],
        body.clone(),
    );
    if !tx.store_tx().http_key_complete(stored).await? {
        tx.rollback().await?;
        return Ok(Problem::new(
            StatusCode::CONFLICT,
            "idempotency_key_in_flight",
            "this request's hold on its Idempotency-Key lapsed and another request took \
             it; nothing was written here: repeat the request to get that one's answer",
        )
        .retry_after(1)
        .rejection());
    }
    tx.commit().await?;
    let mut response = json_response(status, body);
    response.extensions_mut().insert(AnswerStored);
    Ok(response)
}
