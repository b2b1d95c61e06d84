//! The guard that lets `compact` (and the version-6 migration) rewrite
//! stored values: the trigger `entries_are_append_only` (schema version 6)
//! asks `sessiontree_may_reencode()`, which is 1 only on a thread inside
//! [`reencoding`]. Every connection registers the function.

use rusqlite::Connection;

thread_local! {
    /// Set while this thread rewrites stored values (see the trigger
    /// `entries_are_append_only` in schema version 6).
    static REENCODING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Registers `sessiontree_may_reencode()`, which the append-only trigger
/// asks: 1 only while this thread is re-encoding.
pub(super) fn register_reencode_guard(conn: &Connection) -> rusqlite::Result<()> {
    conn.create_scalar_function(
        "sessiontree_may_reencode",
        0,
        rusqlite::functions::FunctionFlags::SQLITE_UTF8,
        |_| Ok(i64::from(REENCODING.with(std::cell::Cell::get))),
    )
}

/// Runs `f` with this thread allowed to rewrite stored values.
pub(super) fn reencoding<T>(f: impl FnOnce() -> T) -> T {
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            REENCODING.with(|r| r.set(false));
        }
    }
    REENCODING.with(|r| r.set(true));
    let _reset = Reset;
    f()
}
