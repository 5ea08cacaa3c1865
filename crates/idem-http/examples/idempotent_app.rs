//! The Idempotency-Key layer on an axum app of your own.
//!
//! `cargo run -p idem-http --example idempotent_app` serves `POST /orders` behind the
//! layer, over an idem store in a temporary SQLite file, and calls it three times: the
//! first call creates an order, the repeat with the same key replays the first answer
//! byte for byte (`Idempotent-Replayed: true`) without running the handler, and the same
//! key with another body is refused with 422.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Router;
use axum::http::StatusCode;
use axum::routing::post;
use idem_http::idempotency::{IdempotencyConfig, IdempotencyLayer};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let idem =
        idem::Idem::connect(&format!("sqlite://{}", dir.path().join("app.db").display())).await?;
    let orders = Arc::new(AtomicU64::new(0));
    let counted = orders.clone();
    let app = Router::new()
        .route(
            "/orders",
            post(move |body: String| {
                let orders = counted.clone();
                async move {
                    let n = orders.fetch_add(1, Ordering::SeqCst) + 1;
                    (StatusCode::CREATED, format!("order {n} for {body}"))
                }
            }),
        )
        .layer(IdempotencyLayer::new(
            idem.store().clone(),
            IdempotencyConfig::default(),
        )?);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/orders", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });

    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::new();
    for body in [
        r#"{"sku": "tea"}"#,
        r#"{"sku": "tea"}"#,
        r#"{"sku": "cake"}"#,
    ] {
        let answer = http
            .post(&url)
            .header("idempotency-key", "order-7")
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await?;
        let replayed = answer
            .headers()
            .get("idempotent-replayed")
            .map(|v| v.to_str().unwrap_or("?").to_owned());
        println!(
            "{body}: {} replayed={replayed:?} {}",
            answer.status(),
            answer.text().await?
        );
    }
    println!("the handler ran {} time(s)", orders.load(Ordering::SeqCst));
    Ok(())
}
