//! HTTP API, inbound Idempotency-Key layer, dashboard and metrics for idem.
//!
//! Not built yet: DESIGN.md section 5 and 6 describe what goes here. The crate exists so
//! the workspace has its final shape and the dependency direction is fixed: `idem-http`
//! depends on `idem`, and only `idem-cli` depends on `idem-http`.
#![warn(missing_docs)]
