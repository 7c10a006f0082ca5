//! etcd's key-values as ours, for reads and watch events alike.

use crate::{KeyValue, Result, StorageError};

/// `kv` as our [`KeyValue`]; a key that is not UTF-8 is corruption (we never write one).
pub(super) fn key_value(kv: &etcd_client::KeyValue) -> Result<KeyValue> {
    let key = String::from_utf8(kv.key().to_vec())
        .map_err(|_| StorageError::Corrupt(format!("etcd key {:?} is not UTF-8", kv.key())))?;
    Ok(KeyValue {
        key,
        value: kv.value().to_vec(),
        create_revision: kv.create_revision(),
        mod_revision: kv.mod_revision(),
    })
}
