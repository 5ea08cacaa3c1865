//! The job kinds idem itself provides, which `idem worker` runs: [`Http`], a call to
//! another service made through an intent.

pub mod http;

pub use http::{Http, HttpArgs, HttpConfig};
