//! Tests of the browser's state.
