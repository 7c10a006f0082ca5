//! Reading Go's JSON. A Go slice or map that was never filled is encoded as `null`, not `[]`
//! or `{}`, wherever its field has no `omitempty` — so every list and map we read from the
//! cluster must take `null` for empty. kube-apiserver does this, for instance, for the `items`
//! of a metadata-only LIST of an empty resource (`{"kind":"PartialObjectMetadataList",…,
//! "items":null}`), while the typed LIST of the same resource says `"items":[]`
//! (tests/fixtures/recordings/19-metadata-list-empty-items-null.txt).

use serde::{Deserialize, Deserializer};

/// `#[serde(default, deserialize_with = "crate::wire::null_as_empty")]`: a missing
/// field and `null` both give the type's empty value.
pub fn null_as_empty<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    #[derive(Deserialize)]
    struct List {
        #[serde(default, deserialize_with = "super::null_as_empty")]
        items: Vec<u32>,
    }

    fn items(json: &str) -> Vec<u32> {
        serde_json::from_str::<List>(json).expect("decodes").items
    }

    #[test]
    fn null_missing_and_empty_are_all_empty() {
        assert_eq!(items(r#"{"items":null}"#), Vec::<u32>::new());
        assert_eq!(items(r#"{}"#), Vec::<u32>::new());
        assert_eq!(items(r#"{"items":[]}"#), Vec::<u32>::new());
        assert_eq!(items(r#"{"items":[1,2]}"#), vec![1, 2]);
    }

    #[test]
    fn a_wrong_type_is_still_an_error() {
        assert!(serde_json::from_str::<List>(r#"{"items":"x"}"#).is_err());
    }
}
