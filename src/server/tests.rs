//! Router-level tests.
