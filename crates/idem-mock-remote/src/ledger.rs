//! The remote's ledger: every copy of an effect it applied, and the mode that decides
//! whether a repeated `Idempotency-Key` applies again.
//!
//! Ids are `r-1`, `r-2`, … in order of application. In keyed mode a key maps to the one
//! copy it applied, and replays return that copy; a request without a key always applies.

use std::collections::HashMap;

/// How the remote treats the `Idempotency-Key` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The first request with a key applies and later ones replay its answer.
    Keyed,
    /// Every request applies a new copy; the key is only recorded as its `reference`.
    Unkeyed,
}

/// One applied copy of an effect.
#[derive(Debug)]
struct Applied {
    id: String,
    reference: Option<String>,
}

/// What one apply request resulted in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Outcome {
    /// The remote id of the copy the request applied or replayed.
    pub id: String,
    /// The copy's reference (the request's key).
    pub reference: Option<String>,
    /// True when a keyed remote replayed an earlier copy and applied nothing.
    pub replayed: bool,
}

/// The copies applied so far.
#[derive(Debug)]
pub(crate) struct Ledger {
    mode: Mode,
    copies: Vec<Applied>,
    by_key: HashMap<String, usize>,
}

impl Ledger {
    pub(crate) fn new(mode: Mode) -> Self {
        Ledger {
            mode,
            copies: Vec::new(),
            by_key: HashMap::new(),
        }
    }

    /// The outcome of replaying this key's copy, when a keyed remote holds one.
    pub(crate) fn replay(&self, key: Option<&str>) -> Option<Outcome> {
        let copy = &self.copies[self.replayable(key)?];
        Some(Outcome {
            id: copy.id.clone(),
            reference: copy.reference.clone(),
            replayed: true,
        })
    }

    /// The id the next copy applied will have.
    pub(crate) fn next_id(&self) -> String {
        format!("r-{}", self.copies.len() + 1)
    }

    /// Applies a new copy with this key (call [`Ledger::replay`] first).
    pub(crate) fn add(&mut self, key: Option<&str>) -> Outcome {
        let id = self.next_id();
        let reference = key.map(str::to_owned);
        if let (Mode::Keyed, Some(key)) = (self.mode, key) {
            self.by_key.insert(key.to_owned(), self.copies.len());
        }
        self.copies.push(Applied {
            id: id.clone(),
            reference: reference.clone(),
        });
        Outcome {
            id,
            reference,
            replayed: false,
        }
    }

    /// The copy a keyed remote replays for this key, if any.
    fn replayable(&self, key: Option<&str>) -> Option<usize> {
        match (self.mode, key) {
            (Mode::Keyed, Some(key)) => self.by_key.get(key).copied(),
            _ => None,
        }
    }

    /// The ids of every copy applied with this reference, oldest first.
    pub(crate) fn ids_for(&self, reference: &str) -> Vec<String> {
        let with = |c: &&Applied| c.reference.as_deref() == Some(reference);
        self.copies
            .iter()
            .filter(with)
            .map(|c| c.id.clone())
            .collect()
    }

    /// How many copies were applied in all.
    pub(crate) fn applied_total(&self) -> usize {
        self.copies.len()
    }
}
