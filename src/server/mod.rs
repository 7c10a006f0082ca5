//! The HTTP layer: router, content negotiation, handlers, discovery, OpenAPI, Table, health,
//! metrics and the metav1.Status mapping. Generic over `RestStorage`. (Being written.)
