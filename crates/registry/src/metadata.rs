//! Generic ObjectMeta rules every kind shares (k8s.io/apimachinery `pkg/api/validation/
//! objectmeta.go` and k8s.io/apiserver `pkg/registry/rest`): validation on create and update
//! with upstream's field paths and texts, and `generateName` suffixes.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use rand::Rng;

use super::error::FieldError;
use super::validation::{dns1123_subdomain_errors, label_value_errors, qualified_name_errors};

/// Upper bound of the summed length of annotation keys and values.
pub(crate) const TOTAL_ANNOTATION_SIZE_LIMIT: usize = 256 * 1024;

/// The alphabet of generated name suffixes (no vowels, no confusable characters).
const NAME_SUFFIX_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
const NAME_SUFFIX_LENGTH: usize = 5;
/// Names are at most 63 characters once a suffix is added (upstream's SimpleNameGenerator).
const MAX_GENERATED_BASE_LENGTH: usize = 63 - NAME_SUFFIX_LENGTH;

const FINALIZER_ORPHAN: &str = "orphan";
const FINALIZER_FOREGROUND: &str = "foregroundDeletion";

/// `generateName` plus five random characters, the base cut to keep the name within 63.
pub(crate) fn generate_name(base: &str) -> String {
    let mut cut = base.len().min(MAX_GENERATED_BASE_LENGTH);
    while !base.is_char_boundary(cut) {
        cut -= 1;
    }
    let mut rng = rand::rng();
    let suffix: String = (0..NAME_SUFFIX_LENGTH)
        .map(|_| {
            let i = rng.random_range(0..NAME_SUFFIX_ALPHABET.len());
            char::from(NAME_SUFFIX_ALPHABET[i])
        })
        .collect();
    format!("{}{suffix}", &base[..cut])
}

/// `Invalid value: <rendered>: <detail>` where the value is already rendered as Go would.
fn invalid_rendered(field: &str, rendered: &str, detail: &str) -> FieldError {
    FieldError {
        reason: "FieldValueInvalid",
        field: field.to_string(),
        message: format!("Invalid value: {rendered}: {detail}"),
    }
}

/// DNS-subdomain names (`NameIsDNSSubdomain`); a prefix may end in `-`.
fn name_errors(name: &str, prefix: bool) -> Vec<String> {
    if prefix && name.len() > 1 && name.ends_with('-') {
        let masked = format!("{}a", &name[..name.len() - 1]);
        return dns1123_subdomain_errors(&masked);
    }
    dns1123_subdomain_errors(name)
}

/// ObjectMeta on create (`ValidateObjectMetaAccessor`, cluster-scoped), after name generation.
/// `namespaced`: whether the kind is namespaced (then `metadata.namespace` is a required DNS
/// label; otherwise it is forbidden).
pub(crate) fn validate_create(meta: &ObjectMeta, namespaced: bool) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if let Some(generate_name) = meta.generate_name.as_deref().filter(|g| !g.is_empty()) {
        for msg in name_errors(generate_name, true) {
            errs.push(FieldError::invalid(
                "metadata.generateName",
                generate_name,
                &msg,
            ));
        }
    }
    match meta.name.as_deref().filter(|n| !n.is_empty()) {
        None => errs.push(FieldError::required(
            "metadata.name",
            "name or generateName is required",
        )),
        Some(name) => {
            for msg in name_errors(name, false) {
                errs.push(FieldError::invalid("metadata.name", name, &msg));
            }
        }
    }
    match meta.namespace.as_deref().filter(|ns| !ns.is_empty()) {
        Some(_) if !namespaced => errs.push(FieldError::forbidden(
            "metadata.namespace",
            "not allowed on this type",
        )),
        None if namespaced => errs.push(FieldError::required("metadata.namespace", "")),
        Some(namespace) if namespaced => {
            for msg in crate::validation::dns1123_label_errors(namespace) {
                errs.push(FieldError::invalid("metadata.namespace", namespace, &msg));
            }
        }
        _ => {}
    }
    errs.extend(validate_common(meta));
    errs.extend(validate_finalizers(
        meta.finalizers.as_deref().unwrap_or_default(),
    ));
    errs
}

/// What create and update both check: generation, labels, annotations, owner references.
fn validate_common(meta: &ObjectMeta) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if let Some(generation) = meta.generation.filter(|g| *g < 0) {
        errs.push(invalid_rendered(
            "metadata.generation",
            &generation.to_string(),
            "must be greater than or equal to 0",
        ));
    }
    errs.extend(validate_labels(meta.labels.as_ref()));
    errs.extend(validate_annotations(meta.annotations.as_ref()));
    errs.extend(validate_owner_references(
        meta.owner_references.as_deref().unwrap_or_default(),
    ));
    errs
}

fn validate_labels(labels: Option<&BTreeMap<String, String>>) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (key, value) in labels.into_iter().flatten() {
        for msg in qualified_name_errors(key) {
            errs.push(FieldError::invalid("metadata.labels", key, &msg));
        }
        for msg in label_value_errors(value) {
            errs.push(FieldError::invalid("metadata.labels", value, &msg));
        }
    }
    errs
}

fn validate_annotations(annotations: Option<&BTreeMap<String, String>>) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let mut total = 0usize;
    for (key, value) in annotations.into_iter().flatten() {
        // Annotation keys are qualified names in any case.
        for msg in qualified_name_errors(&key.to_lowercase()) {
            errs.push(FieldError::invalid("metadata.annotations", key, &msg));
        }
        total += key.len() + value.len();
    }
    if total > TOTAL_ANNOTATION_SIZE_LIMIT {
        errs.push(FieldError {
            reason: "FieldValueTooLong",
            field: "metadata.annotations".into(),
            message: format!("Too long: may not be more than {TOTAL_ANNOTATION_SIZE_LIMIT} bytes"),
        });
    }
    errs
}

fn validate_owner_references(refs: &[OwnerReference]) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let mut first_controller: Option<String> = None;
    for (i, owner) in refs.iter().enumerate() {
        let path = format!("metadata.ownerReferences[{i}]");
        if owner.api_version.is_empty() {
            errs.push(FieldError::required(
                format!("{path}.apiVersion"),
                "must not be empty",
            ));
        } else if !valid_group_version(&owner.api_version) {
            errs.push(FieldError::invalid(
                format!("{path}.apiVersion"),
                &owner.api_version,
                "must be <group>/<version> or <version>",
            ));
        }
        if owner.kind.is_empty() {
            errs.push(FieldError::required(
                format!("{path}.kind"),
                "must not be empty",
            ));
        }
        if owner.name.is_empty() {
            errs.push(FieldError::required(
                format!("{path}.name"),
                "must not be empty",
            ));
        }
        if owner.uid.is_empty() {
            errs.push(FieldError::required(
                format!("{path}.uid"),
                "must not be empty",
            ));
        }
        if owner.controller == Some(true) {
            let current = format!("{}/{}", owner.kind, owner.name);
            match &first_controller {
                Some(first) => errs.push(invalid_rendered(
                    "metadata.ownerReferences",
                    &serde_json::to_string(refs).unwrap_or_default(),
                    &format!(
                        "Only one reference can have Controller set to true. Found \"true\" in references for {first} and {current}"
                    ),
                )),
                None => first_controller = Some(current),
            }
        }
    }
    errs
}

/// `schema.ParseGroupVersion`: `v1` or `group/v1`, one slash at most, a non-empty version.
fn valid_group_version(api_version: &str) -> bool {
    match api_version.split('/').collect::<Vec<_>>().as_slice() {
        [version] => !version.is_empty(),
        [_, version] => !version.is_empty(),
        _ => false,
    }
}

fn validate_finalizers(finalizers: &[String]) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for finalizer in finalizers {
        for msg in qualified_name_errors(finalizer) {
            errs.push(FieldError::invalid("metadata.finalizers", finalizer, &msg));
        }
    }
    let has = |name: &str| finalizers.iter().any(|f| f == name);
    if has(FINALIZER_ORPHAN) && has(FINALIZER_FOREGROUND) {
        errs.push(invalid_rendered(
            "metadata.finalizers",
            &serde_json::to_string(finalizers).unwrap_or_default(),
            "finalizer orphan and foregroundDeletion cannot be both set",
        ));
    }
    errs
}

/// A value as Go's field errors render it: JSON (strings quoted, absent as `null`).
fn rendered<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| "null".into())
}

fn immutable<T: serde::Serialize + PartialEq>(
    field: &str,
    new: &T,
    old: &T,
    errs: &mut Vec<FieldError>,
) {
    if new != old {
        errs.push(invalid_rendered(
            field,
            &rendered(new),
            "field is immutable",
        ));
    }
}

/// ObjectMeta on update (`ValidateObjectMetaAccessorUpdate`): the create rules on the new
/// object, immutable system fields, no new finalizers while deleting.
pub(crate) fn validate_update(
    new: &ObjectMeta,
    old: &ObjectMeta,
    namespaced: bool,
) -> Vec<FieldError> {
    let mut errs = validate_create(new, namespaced);
    errs.extend(finalizers_added_while_deleting(new, old));
    if new.generation.unwrap_or(0) < old.generation.unwrap_or(0) {
        errs.push(invalid_rendered(
            "metadata.generation",
            &new.generation.unwrap_or(0).to_string(),
            "must not be decremented",
        ));
    }
    immutable_system_fields(new, old, &mut errs);
    errs
}

/// An object being deleted may lose finalizers but gain none: the new ones, if any.
fn finalizers_added_while_deleting(new: &ObjectMeta, old: &ObjectMeta) -> Option<FieldError> {
    old.deletion_timestamp.as_ref()?;
    let old_set: BTreeSet<&String> = old.finalizers.iter().flatten().collect();
    let extra: BTreeSet<&String> = new
        .finalizers
        .iter()
        .flatten()
        .filter(|f| !old_set.contains(f))
        .collect();
    if extra.is_empty() {
        return None;
    }
    let list: Vec<String> = extra.iter().map(|f| format!("{f:?}")).collect();
    Some(FieldError::forbidden(
        "metadata.finalizers",
        &format!(
            "no new finalizers can be added if the object is being deleted, found new finalizers []string{{{}}}",
            list.join(", ")
        ),
    ))
}

/// The fields the system sets once, which an update must leave as they were.
fn immutable_system_fields(new: &ObjectMeta, old: &ObjectMeta, errs: &mut Vec<FieldError>) {
    let text = |v: &Option<String>| v.clone().unwrap_or_default();
    immutable("metadata.name", &text(&new.name), &text(&old.name), errs);
    immutable(
        "metadata.namespace",
        &text(&new.namespace),
        &text(&old.namespace),
        errs,
    );
    immutable("metadata.uid", &text(&new.uid), &text(&old.uid), errs);
    immutable(
        "metadata.creationTimestamp",
        &new.creation_timestamp,
        &old.creation_timestamp,
        errs,
    );
    immutable(
        "metadata.deletionTimestamp",
        &new.deletion_timestamp,
        &old.deletion_timestamp,
        errs,
    );
    immutable(
        "metadata.deletionGracePeriodSeconds",
        &new.deletion_grace_period_seconds,
        &old.deletion_grace_period_seconds,
        errs,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(name: &str) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        }
    }

    fn fields(errs: &[FieldError]) -> Vec<&str> {
        errs.iter().map(|e| e.field.as_str()).collect()
    }

    #[test]
    fn generated_names_use_the_upstream_alphabet_and_length() {
        let name = generate_name("gen-");
        assert_eq!(name.len(), 9);
        assert!(name.starts_with("gen-"));
        assert!(
            name[4..].bytes().all(|b| NAME_SUFFIX_ALPHABET.contains(&b)),
            "{name}"
        );
        let long = generate_name(&"x".repeat(100));
        assert_eq!(long.len(), 63);
        assert!(validate_create(&meta(&long), false).is_empty());
    }

    #[test]
    fn name_is_required_unless_generated() {
        let errs = validate_create(&ObjectMeta::default(), false);
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].reason, "FieldValueRequired");
        assert_eq!(
            errs[0].render(),
            "metadata.name: Required value: name or generateName is required"
        );
    }

    #[test]
    fn invalid_name_matches_recording_16a() {
        let errs = validate_create(&meta("Bad_Name!"), false);
        assert_eq!(errs.len(), 1);
        assert!(errs[0].message.starts_with(
            "Invalid value: \"Bad_Name!\": a lowercase RFC 1123 subdomain must consist of"
        ));
    }

    #[test]
    fn generate_name_may_end_in_a_dash() {
        let mut m = meta("gen-abcde");
        m.generate_name = Some("gen-".into());
        assert!(validate_create(&m, false).is_empty());
        m.generate_name = Some("Gen-".into());
        assert_eq!(
            fields(&validate_create(&m, false)),
            vec!["metadata.generateName"]
        );
    }

    #[test]
    fn labels_annotations_finalizers_and_owners() {
        let mut m = meta("ok");
        m.labels = Some(BTreeMap::from([
            ("good/key".to_string(), "v".to_string()),
            ("bad key".to_string(), "v".to_string()),
            ("k".to_string(), "bad value".to_string()),
        ]));
        m.annotations = Some(BTreeMap::from([
            ("Mixed.Case/Allowed".to_string(), "x".to_string()),
            ("no spaces".to_string(), "x".to_string()),
        ]));
        m.finalizers = Some(vec!["example.com/cleanup".into(), "bad finalizer".into()]);
        m.owner_references = Some(vec![OwnerReference {
            api_version: "a/b/c".into(),
            ..Default::default()
        }]);
        let errs = validate_create(&m, false);
        assert_eq!(
            fields(&errs),
            vec![
                "metadata.labels",
                "metadata.labels",
                "metadata.annotations",
                "metadata.ownerReferences[0].apiVersion",
                "metadata.ownerReferences[0].kind",
                "metadata.ownerReferences[0].name",
                "metadata.ownerReferences[0].uid",
                "metadata.finalizers",
            ]
        );
    }

    #[test]
    fn annotation_size_is_bounded() {
        let mut m = meta("ok");
        m.annotations = Some(BTreeMap::from([(
            "big".to_string(),
            "x".repeat(TOTAL_ANNOTATION_SIZE_LIMIT),
        )]));
        let errs = validate_create(&m, false);
        assert_eq!(
            errs[0].render(),
            "metadata.annotations: Too long: may not be more than 262144 bytes"
        );
    }

    #[test]
    fn conflicting_gc_finalizers() {
        let mut m = meta("ok");
        m.finalizers = Some(vec!["orphan".into(), "foregroundDeletion".into()]);
        assert_eq!(
            validate_create(&m, false)[0].message,
            "Invalid value: [\"orphan\",\"foregroundDeletion\"]: finalizer orphan and foregroundDeletion cannot be both set"
        );
    }

    #[test]
    fn system_fields_are_immutable_on_update() {
        let mut old = meta("a");
        old.uid = Some("u1".into());
        let mut new = old.clone();
        new.uid = Some("wrong".into());
        let errs = validate_update(&new, &old, false);
        assert_eq!(errs.len(), 1);
        // Recording 09b.
        assert_eq!(
            errs[0].render(),
            "metadata.uid: Invalid value: \"wrong\": field is immutable"
        );
        new.uid = old.uid.clone();
        new.name = Some("b".into());
        assert_eq!(
            fields(&validate_update(&new, &old, false)),
            vec!["metadata.name"]
        );
    }

    #[test]
    fn no_new_finalizers_while_deleting() {
        let mut old = meta("a");
        old.finalizers = Some(vec!["example.com/a".into()]);
        old.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        ));
        let mut new = old.clone();
        new.finalizers = Some(vec!["example.com/a".into(), "example.com/b".into()]);
        let errs = validate_update(&new, &old, false);
        assert_eq!(
            errs[0].render(),
            "metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{\"example.com/b\"}"
        );
        new.finalizers = Some(vec![]);
        assert!(validate_update(&new, &old, false).is_empty());
    }

    #[test]
    fn generation_may_not_decrease() {
        let mut old = meta("a");
        old.generation = Some(3);
        let mut new = old.clone();
        new.generation = Some(2);
        assert_eq!(
            validate_update(&new, &old, false)[0].render(),
            "metadata.generation: Invalid value: 2: must not be decremented"
        );
    }
}
