//! Argument conversion: Python sequences of str to borrowed UTF-8 views, without copying.

use pyagentrl_hash_core::parallel::{prefetch_lines, PREFETCH_AHEAD};
use pyo3::exceptions::PyTypeError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString, PyTuple};

/// A tuple holding the items of `seq` (a list or any iterable of str): the tuple keeps every item
/// alive and cannot be mutated by another thread while the GIL is released.
pub fn as_tuple<'py>(seq: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyTuple>> {
    if let Ok(tuple) = seq.cast::<PyTuple>() {
        return Ok(tuple.clone());
    }
    if let Ok(list) = seq.cast::<PyList>() {
        return Ok(list.to_tuple());
    }
    if seq.is_instance_of::<PyString>() || seq.is_instance_of::<PyBytes>() {
        return Err(PyTypeError::new_err(
            "expected a sequence of str, got a single str/bytes",
        ));
    }
    PyTuple::new(seq.py(), seq.try_iter()?.collect::<PyResult<Vec<_>>>()?)
}

/// UTF-8 views of the str items of `tuple`, valid while `tuple` lives. Cheaper than extracting
/// owned `PyBackedStr`s: on ~300-byte texts, touching the Python objects costs about as much as
/// hashing them. An item that is no str is a TypeError naming its index.
pub fn str_items<'a>(tuple: &'a Bound<'_, PyTuple>) -> PyResult<Vec<&'a str>> {
    let mut out = Vec::with_capacity(tuple.len());
    for i in 0..tuple.len() {
        if i + PREFETCH_AHEAD < tuple.len() {
            // The object's header and, for short ASCII text, its characters.
            prefetch_lines(
                tuple.get_borrowed_item(i + PREFETCH_AHEAD)?.as_ptr().cast(),
                64,
            );
        }
        let item = tuple.get_borrowed_item(i)?;
        let text = item.cast::<PyString>().map_err(|_| {
            let name = item
                .get_type()
                .name()
                .map_or_else(|_| "?".to_owned(), |n| n.to_string());
            PyTypeError::new_err(format!("item {i} is {name}, not str"))
        })?;
        let mut size: ffi::Py_ssize_t = 0;
        // SAFETY: `text` is a live str object; the call returns its cached UTF-8 form or NULL
        // with an exception set (lone surrogates).
        let data = unsafe { ffi::PyUnicode_AsUTF8AndSize(text.as_ptr(), &mut size) };
        if data.is_null() {
            return Err(PyErr::fetch(tuple.py()));
        }
        // SAFETY: the buffer is valid UTF-8 of `size` bytes and lives as long as the str object,
        // which the tuple (borrowed for 'a) keeps alive; str objects are immutable.
        out.push(unsafe {
            std::str::from_utf8_unchecked(std::slice::from_raw_parts(
                data.cast::<u8>(),
                size as usize,
            ))
        });
    }
    Ok(out)
}
