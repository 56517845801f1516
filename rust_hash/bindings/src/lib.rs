//! Python bindings of `pyagentrl_hash_core`: the extension module `pyagentrl_hash`.
//!
//! Each function converts its arguments (sequences to borrowed views, arrays to slices, names to
//! the core's enumerations), runs one core driver with the GIL released, and hands the result to
//! numpy without a copy. Core errors become Python exceptions in one place ([`raise`]). No
//! parameter is checked here: `pyagentrl.hashing` checks each once at its public functions (see
//! `pyagentrl/hashing/_args.py`), and the core's preconditions are the domains it lets through.
//! The module is typed for mypy by `rust_hash/pyagentrl_hash.pyi` (maturin ships it in the wheel with
//! `py.typed`; a test keeps it equal to these signatures); users reach it through `pyagentrl.hashing`.

mod convert;

use convert::{as_tuple, str_items};
use numpy::ndarray::Array2;
use numpy::{IntoPyArray, PyArray1, PyReadonlyArray1, PyReadonlyArray2, PyUntypedArrayMethods};
use pyagentrl_hash_core::fingerprint::{self, Interpreter};
use pyagentrl_hash_core::keys::{self, Tagged, Width};
use pyagentrl_hash_core::minhash::{self, Permutations, Scheme, Signatures};
use pyagentrl_hash_core::normalize::Table;
use pyagentrl_hash_core::parallel::Pool;
use pyagentrl_hash_core::shingle::{self, Shingling};
use pyagentrl_hash_core::{group, lsh, Error};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::pybacked::{PyBackedBytes, PyBackedStr};
use pyo3::types::PyList;
use std::num::NonZeroUsize;
use std::sync::LazyLock;

/// The Python exception of a core error: the one place where errors cross the boundary.
fn raise(e: Error) -> PyErr {
    match e {
        Error::Unknown { .. } | Error::ThreadPool(_) => PyValueError::new_err(e.to_string()),
    }
}

/// The shared pool of `num_threads` threads, from the core's cache of a few sizes (0: rayon's global
/// pool). `pyagentrl.hashing` caps `num_threads` at 4 x the cores before it gets here.
fn pool(num_threads: usize) -> PyResult<Pool> {
    Pool::with_threads(num_threads).map_err(raise)
}

/// Keys as a `[n]` (64-bit) or `[n, 2]` (128-bit, low word first) uint64 array.
fn key_array(py: Python<'_>, words: Vec<u64>, width: Width) -> Bound<'_, PyAny> {
    match width {
        Width::Bits64 => words.into_pyarray(py).into_any(),
        Width::Bits128 => Array2::from_shape_vec((words.len() / 2, 2), words)
            .expect("two words per key")
            .into_pyarray(py)
            .into_any(),
    }
}

/// Exact keys of str values (their UTF-8 bytes).
#[pyfunction]
#[pyo3(signature = (texts, bits, seed, num_threads=0))]
fn text_keys<'py>(
    py: Python<'py>,
    texts: &Bound<'py, PyAny>,
    bits: u32,
    seed: u64,
    num_threads: usize,
) -> PyResult<Bound<'py, PyAny>> {
    let (width, pool) = (Width::from_bits(bits).map_err(raise)?, pool(num_threads)?);
    let tuple = as_tuple(texts)?;
    let texts = str_items(&tuple)?;
    let words = py.detach(|| keys::batch(&texts, width, seed, &pool));
    Ok(key_array(py, words, width))
}

/// Exact keys of bytes values.
#[pyfunction]
#[pyo3(signature = (values, bits, seed, num_threads=0))]
fn bytes_keys<'py>(
    py: Python<'py>,
    values: Vec<PyBackedBytes>,
    bits: u32,
    seed: u64,
    num_threads: usize,
) -> PyResult<Bound<'py, PyAny>> {
    let (width, pool) = (Width::from_bits(bits).map_err(raise)?, pool(num_threads)?);
    let words = py.detach(|| keys::batch(&values, width, seed, &pool));
    Ok(key_array(py, words, width))
}

/// Exact keys of header-tagged buffers: (header, data) pairs, an array's dtype-and-shape header
/// and its bytes.
#[pyfunction]
#[pyo3(signature = (items, bits, seed, num_threads=0))]
fn tagged_keys<'py>(
    py: Python<'py>,
    items: Vec<(PyBackedBytes, PyReadonlyArray1<'py, u8>)>,
    bits: u32,
    seed: u64,
    num_threads: usize,
) -> PyResult<Bound<'py, PyAny>> {
    let (width, pool) = (Width::from_bits(bits).map_err(raise)?, pool(num_threads)?);
    let tagged = items
        .iter()
        .map(|(header, data)| {
            Ok(Tagged {
                header,
                data: data.as_slice()?,
            })
        })
        .collect::<PyResult<Vec<Tagged<'_>>>>()?;
    let words = py.detach(|| keys::batch(&tagged, width, seed, &pool));
    Ok(key_array(py, words, width))
}

fn permutations(
    scheme: &str,
    a: PyReadonlyArray1<'_, u64>,
    b: PyReadonlyArray1<'_, u64>,
) -> PyResult<Permutations> {
    let scheme = Scheme::from_name(scheme).map_err(raise)?;
    Ok(Permutations::new(scheme, a.as_slice()?, b.as_slice()?))
}

/// An `[n, num_perm]` signature array: uint32 (affine32) or uint64 (legacy), datasketch's dtypes.
fn signature_array(py: Python<'_>, signatures: Signatures, num_perm: usize) -> Bound<'_, PyAny> {
    fn matrix<T: numpy::Element>(py: Python<'_>, lanes: Vec<T>, m: usize) -> Bound<'_, PyAny> {
        let n = lanes.len().checked_div(m).unwrap_or(0);
        Array2::from_shape_vec((n, m), lanes)
            .expect("n * num_perm lanes")
            .into_pyarray(py)
            .into_any()
    }
    match signatures {
        Signatures::Affine32(lanes) => matrix(py, lanes, num_perm),
        Signatures::Legacy(lanes) => matrix(py, lanes, num_perm),
    }
}

/// MinHash signatures of token lists (tokens hashed as UTF-8), as datasketch's update_batch.
#[pyfunction]
#[pyo3(signature = (token_lists, scheme, a, b, num_threads=0))]
fn minhash_tokens<'py>(
    py: Python<'py>,
    token_lists: Vec<Vec<PyBackedStr>>,
    scheme: &str,
    a: PyReadonlyArray1<'py, u64>,
    b: PyReadonlyArray1<'py, u64>,
    num_threads: usize,
) -> PyResult<Bound<'py, PyAny>> {
    let (perms, pool) = (permutations(scheme, a, b)?, pool(num_threads)?);
    let sigs = py.detach(|| minhash::signatures_of_tokens(&token_lists, &perms, &pool));
    Ok(signature_array(py, sigs, perms.num_perm()))
}

/// MinHash signatures of texts cut into shingles (see `shingles`).
#[pyfunction]
#[pyo3(signature = (texts, scheme, a, b, shingle, n, lowercase, num_threads=0))]
#[allow(clippy::too_many_arguments)]
fn minhash_texts<'py>(
    py: Python<'py>,
    texts: &Bound<'py, PyAny>,
    scheme: &str,
    a: PyReadonlyArray1<'py, u64>,
    b: PyReadonlyArray1<'py, u64>,
    shingle: &str,
    n: NonZeroUsize,
    lowercase: bool,
    num_threads: usize,
) -> PyResult<Bound<'py, PyAny>> {
    let tuple = as_tuple(texts)?;
    let texts = str_items(&tuple)?;
    let (perms, pool) = (permutations(scheme, a, b)?, pool(num_threads)?);
    let shingling = Shingling::from_name(shingle, n).map_err(raise)?;
    let sigs =
        py.detach(|| minhash::signatures_of_texts(&texts, &perms, shingling, lowercase, &pool));
    Ok(signature_array(py, sigs, perms.num_perm()))
}

/// The shingles `minhash_texts` hashes for one text, in order (duplicates kept).
#[pyfunction]
fn shingles(text: &str, shingle: &str, n: NonZeroUsize, lowercase: bool) -> PyResult<Vec<String>> {
    let shingling = Shingling::from_name(shingle, n).map_err(raise)?;
    Ok(shingle::shingles(
        &minhash::prepare(text, lowercase),
        shingling,
    ))
}

/// The normalisation table of this interpreter: built page by page, as texts first need them.
static TABLE: LazyLock<Table> = LazyLock::new(Table::default);

/// The running interpreter, as the SimHash batch sees it: `normalize` is the package's
/// normalisation by this interpreter's rules; passes run with the GIL released.
struct Host<'a, 'py> {
    py: Python<'py>,
    normalize: &'a Bound<'py, PyAny>,
}

impl Interpreter for Host<'_, '_> {
    type Error = PyErr;

    fn detach<T: Send>(&mut self, pass: impl FnOnce() -> T + Send) -> T {
        self.py.detach(pass)
    }

    fn normalize(&mut self, texts: &[&str]) -> PyResult<Vec<String>> {
        let out: Vec<String> = self
            .normalize
            .call1((PyList::new(self.py, texts)?,))?
            .extract()?;
        if out.len() != texts.len() {
            return Err(PyValueError::new_err(format!(
                "normalize returned {} texts for {}",
                out.len(),
                texts.len()
            )));
        }
        Ok(out)
    }
}

/// SimHash fingerprints of texts, in one call: `normalize(list_of_str) -> list_of_str` is the
/// package's normalisation by the running interpreter, called (at most twice) for table pages
/// first met and for texts holding a capital sigma.
#[pyfunction]
#[pyo3(signature = (texts, normalize, num_threads=0))]
fn simhash_texts<'py>(
    py: Python<'py>,
    texts: &Bound<'py, PyAny>,
    normalize: &Bound<'py, PyAny>,
    num_threads: usize,
) -> PyResult<Bound<'py, PyArray1<u64>>> {
    let tuple = as_tuple(texts)?;
    let texts = str_items(&tuple)?;
    let pool = pool(num_threads)?;
    let mut host = Host { py, normalize };
    let values = fingerprint::fingerprint_texts(&texts, &TABLE, &pool, &mut host)?;
    Ok(values.into_pyarray(py))
}

/// SimHash fingerprints of texts already normalised (only word characters, lowercased).
#[pyfunction]
#[pyo3(signature = (texts, num_threads=0))]
fn simhash_normalized<'py>(
    py: Python<'py>,
    texts: &Bound<'py, PyAny>,
    num_threads: usize,
) -> PyResult<Bound<'py, PyArray1<u64>>> {
    let tuple = as_tuple(texts)?;
    let texts = str_items(&tuple)?;
    let pool = pool(num_threads)?;
    let values = py.detach(|| fingerprint::fingerprint_normalized_texts(&texts, &pool));
    Ok(values.into_pyarray(py))
}

/// SimHash fingerprints of weighted feature lists: document i owns features
/// `offsets[i]..offsets[i + 1]`.
#[pyfunction]
fn simhash_weighted<'py>(
    py: Python<'py>,
    features: Vec<PyBackedStr>,
    weights: PyReadonlyArray1<'py, f64>,
    offsets: Vec<usize>,
) -> PyResult<Bound<'py, PyArray1<u64>>> {
    let weights = weights.as_slice()?;
    let values = py.detach(|| {
        fingerprint::fingerprint_weighted_documents(&features, weights, &offsets, &Pool::default())
    });
    Ok(values.into_pyarray(py))
}

/// Dense ids of equal key rows within each task group.
#[pyfunction]
#[pyo3(signature = (group_ids, keys, num_threads=0))]
fn group_exact<'py>(
    py: Python<'py>,
    group_ids: PyReadonlyArray1<'py, i64>,
    keys: PyReadonlyArray2<'py, u64>,
    num_threads: usize,
) -> PyResult<Ids<'py>> {
    let (groups, width, keys) = (group_ids.as_slice()?, keys.shape()[1], keys.as_slice()?);
    let pool = pool(num_threads)?;
    Ok(py
        .detach(|| group::by_keys(groups, keys, width, &pool))
        .into_pyarray(py))
}

/// Dense ids of MinHash-LSH components within each task group.
#[pyfunction]
#[pyo3(signature = (group_ids, signatures, bands, rows_per_band, threshold, num_threads=0))]
fn group_minhash<'py>(
    py: Python<'py>,
    group_ids: PyReadonlyArray1<'py, i64>,
    signatures: &Bound<'py, PyAny>,
    bands: usize,
    rows_per_band: usize,
    threshold: f64,
    num_threads: usize,
) -> PyResult<Ids<'py>> {
    let (groups, pool) = (group_ids.as_slice()?, pool(num_threads)?);
    let banding = (bands, rows_per_band);
    let ids = if let Ok(sigs) = signatures.extract::<PyReadonlyArray2<'py, u32>>() {
        let (m, lanes) = (sigs.shape()[1], sigs.as_slice()?);
        py.detach(|| group::by_signatures(groups, lanes, m, banding, threshold, &pool))
    } else if let Ok(sigs) = signatures.extract::<PyReadonlyArray2<'py, u64>>() {
        let (m, lanes) = (sigs.shape()[1], sigs.as_slice()?);
        py.detach(|| group::by_signatures(groups, lanes, m, banding, threshold, &pool))
    } else {
        return Err(PyTypeError::new_err(
            "signatures must be a C-contiguous 2-D uint32 or uint64 array",
        ));
    };
    Ok(ids.into_pyarray(py))
}

/// Dense ids of SimHash components (Hamming distance <= k) within each task group.
#[pyfunction]
#[pyo3(signature = (group_ids, fingerprints, k, num_threads=0))]
fn group_simhash<'py>(
    py: Python<'py>,
    group_ids: PyReadonlyArray1<'py, i64>,
    fingerprints: PyReadonlyArray1<'py, u64>,
    k: u32,
    num_threads: usize,
) -> PyResult<Ids<'py>> {
    let (groups, fps) = (group_ids.as_slice()?, fingerprints.as_slice()?);
    let pool = pool(num_threads)?;
    Ok(py
        .detach(|| group::by_fingerprints(groups, fps, k, &pool))
        .into_pyarray(py))
}

/// Dense ids of the connected components of `edges` (an `[m, 2]` array of row pairs, each within one
/// task group).
#[pyfunction]
fn group_edges<'py>(
    py: Python<'py>,
    group_ids: PyReadonlyArray1<'py, i64>,
    edges: PyReadonlyArray2<'py, u32>,
) -> PyResult<Ids<'py>> {
    let groups = group_ids.as_slice()?;
    let flat = edges.as_slice()?;
    let pairs: Vec<[u32; 2]> = flat.chunks_exact(2).map(|p| [p[0], p[1]]).collect();
    Ok(py
        .detach(|| group::by_edges(groups, &pairs))
        .into_pyarray(py))
}

/// Dense ids, one per row.
type Ids<'py> = Bound<'py, PyArray1<i64>>;

/// The two numberings of a batch of texts that near-duplicate grouping starts from: distinct
/// (task group, text) pairs and distinct texts, by first appearance (texts compared by 128-bit key).
#[pyfunction]
#[pyo3(signature = (texts, group_ids, num_threads=0))]
fn distinct_texts<'py>(
    py: Python<'py>,
    texts: &Bound<'py, PyAny>,
    group_ids: PyReadonlyArray1<'py, i64>,
    num_threads: usize,
) -> PyResult<(Ids<'py>, Ids<'py>)> {
    let tuple = as_tuple(texts)?;
    let texts = str_items(&tuple)?;
    let (groups, pool) = (group_ids.as_slice()?, pool(num_threads)?);
    let (pairs, distinct) = py.detach(|| {
        let keys = keys::batch(&texts, Width::Bits128, 0, &pool);
        group::distinct_pairs(groups, &keys, &pool)
    });
    Ok((pairs.into_pyarray(py), distinct.into_pyarray(py)))
}

/// datasketch's MinHashLSH (bands, rows) for a threshold.
#[pyfunction]
fn lsh_params(
    py: Python<'_>,
    threshold: f64,
    num_perm: usize,
    fp_weight: f64,
    fn_weight: f64,
) -> (usize, usize) {
    py.detach(|| lsh::optimal_param(threshold, num_perm, fp_weight, fn_weight))
}

#[pymodule]
fn pyagentrl_hash(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(text_keys, m)?)?;
    m.add_function(wrap_pyfunction!(bytes_keys, m)?)?;
    m.add_function(wrap_pyfunction!(tagged_keys, m)?)?;
    m.add_function(wrap_pyfunction!(minhash_tokens, m)?)?;
    m.add_function(wrap_pyfunction!(minhash_texts, m)?)?;
    m.add_function(wrap_pyfunction!(shingles, m)?)?;
    m.add_function(wrap_pyfunction!(simhash_texts, m)?)?;
    m.add_function(wrap_pyfunction!(simhash_normalized, m)?)?;
    m.add_function(wrap_pyfunction!(simhash_weighted, m)?)?;
    m.add_function(wrap_pyfunction!(group_exact, m)?)?;
    m.add_function(wrap_pyfunction!(group_minhash, m)?)?;
    m.add_function(wrap_pyfunction!(group_simhash, m)?)?;
    m.add_function(wrap_pyfunction!(group_edges, m)?)?;
    m.add_function(wrap_pyfunction!(distinct_texts, m)?)?;
    m.add_function(wrap_pyfunction!(lsh_params, m)?)?;
    Ok(())
}
