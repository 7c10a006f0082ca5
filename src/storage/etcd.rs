//! The etcd backend over etcd-client. (Being written.)
