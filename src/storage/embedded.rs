//! The embedded backend: in-process, durable in a data directory. (Being written.)
