//! Core of `pyagentrl.hashing`, without Python: state keys and anchor grouping for GiGPO/GAGPO.
//!
//! Every algorithm lives here, together with the parallel batch drivers that run it over a batch
//! (thread pools, block sizing, prefetching, signature filling, SimHash batch assembly), so
//! `cargo test` reaches all of it without an interpreter. The bindings crate (`../bindings`,
//! the extension module `pyagentrl_hash`) converts Python arguments, releases the GIL around
//! these drivers and maps [`Error`] to Python exceptions; it holds no algorithm.
//!
//! Modules: [`keys`] (XXH3 exact keys), [`shingle`] and [`minhash`] (datasketch-equal MinHash),
//! [`normalize`] and [`fingerprint`] (simhash-package-equal SimHash), [`lsh`] (datasketch's
//! banding), [`group`] (dense anchor ids), and the plumbing [`parallel`], [`memo`], [`unionfind`].
//!
//! Parameters are checked once, by `pyagentrl.hashing` at its public functions (the list of
//! where is in `pyagentrl/hashing/_args.py`). This crate re-checks none of them: it takes
//! enumerations as types ([`keys::Width`], [`minhash::Scheme`], [`shingle::Shingling`], whose
//! parsers are the only parameter failures it reports, as [`Error::Unknown`]) and states each
//! numeric domain as a precondition of the function that needs it (`# Panics` sections). The
//! domains are the ones `pyagentrl.hashing` lets through, so the two sides agree.

pub mod fingerprint;
pub mod group;
pub mod keys;
pub mod lsh;
pub mod memo;
pub mod minhash;
pub mod normalize;
pub mod parallel;
pub mod shingle;
pub mod unionfind;

use std::fmt;

/// What the core reports to its caller (the bindings map each variant to one Python exception).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// An enumerated parameter (`param`) named none of its values (`expected`).
    Unknown {
        param: &'static str,
        got: String,
        expected: &'static str,
    },
    /// The operating system would not start a thread pool of the requested size.
    ThreadPool(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unknown {
                param,
                got,
                expected,
            } => write!(f, "{param} must be {expected}, got {got}"),
            Self::ThreadPool(e) => write!(f, "num_threads: {e}"),
        }
    }
}

impl std::error::Error for Error {}
