//! Placeholder for idem's HTTP API, inbound Idempotency-Key layer, dashboard and metrics.
//!
//! DESIGN.md sections 5 and 6 describe what will go here. There is no code yet: the crate
//! has no dependencies and no other crate depends on it. It exists so that the workspace
//! already has its final set of crates.
#![warn(missing_docs)]
