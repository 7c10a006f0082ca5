//! What a migration asks of each volumeClaimTemplate.

/// One volumeClaimTemplate and the size its claims must reach.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TemplateTarget {
    pub name: String,
    /// As written (`100Gi`): what a claim is patched to.
    pub storage: String,
    pub bytes: u128,
    /// The size the target's own template gives new claims, when known: asking for less is a
    /// shrink.
    pub template_bytes: Option<u128>,
    /// The target has a volumeClaimTemplate of this name.
    pub in_target: bool,
}
