//! How the SQLite archive reports a failed statement: what it was doing,
//! with SQLite's own message. A leaf module, so every part of the archive
//! can use it without importing the archive's root.

use crate::error::Error;

/// Maps an SQLite error to the crate's, saying what was being done.
pub(crate) fn sql(context: &'static str) -> impl Fn(rusqlite::Error) -> Error {
    move |e| Error::sqlite(context, e)
}
