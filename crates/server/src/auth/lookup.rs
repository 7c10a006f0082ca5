//! kube-system/extension-apiserver-authentication: where kube-apiserver publishes the client
//! CA and the front-proxy settings for aggregated API servers (recording 14). Values are plain
//! strings; the header lists are JSON arrays in a string.

use crate::error::{Context, SetupResult as Result};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;

use super::authenticator::RequestHeaderConfig;
use super::x509::CaBundle;

/// The namespace of the ConfigMap kube-apiserver publishes.
pub(crate) const NAMESPACE: &str = "kube-system";
/// The ConfigMap's name.
pub(crate) const NAME: &str = "extension-apiserver-authentication";

/// What the cluster publishes; each part is absent when the cluster does not set it.
#[derive(Debug, Clone, Default)]
pub(crate) struct ClusterAuthentication {
    /// `client-ca-file`: the CA of client certificates that authenticate as their CN.
    pub client_ca: Option<CaBundle>,
    /// The front proxy's settings (`requestheader-*`), when the cluster has a front proxy.
    pub request_header: Option<RequestHeaderConfig>,
}

impl ClusterAuthentication {
    /// Read the ConfigMap; a missing one publishes nothing (a cluster without client
    /// certificates or front proxy).
    pub(crate) async fn fetch(client: &kube::Client) -> Result<Self> {
        let maps: Api<ConfigMap> = Api::namespaced(client.clone(), NAMESPACE);
        let map = maps
            .get_opt(NAME)
            .await
            .with_context(|| format!("reading configmap {NAMESPACE}/{NAME}"))?;
        match map {
            Some(map) => Self::from_config_map(&map),
            None => {
                tracing::warn!(
                    "configmap {NAMESPACE}/{NAME} not found: the cluster publishes no client CA"
                );
                Ok(Self::default())
            }
        }
    }

    /// Reads the settings out of the ConfigMap's data; an error when a CA holds no certificate or
    /// a header list is not a JSON list of strings.
    pub(crate) fn from_config_map(map: &ConfigMap) -> Result<Self> {
        let data = map.data.clone().unwrap_or_default();
        let value = |key: &str| {
            data.get(key)
                .map(String::as_str)
                .filter(|v| !v.trim().is_empty())
        };
        let source = |key: &str| format!("{NAMESPACE}/{NAME} {key}");
        let list = |key: &str| -> Result<Vec<String>> {
            match value(key) {
                None => Ok(Vec::new()),
                Some(json) => serde_json::from_str(json)
                    .with_context(|| format!("{} is not a JSON list of strings", source(key))),
            }
        };

        let client_ca = value("client-ca-file")
            .map(|pem| CaBundle::from_pem(pem.as_bytes(), source("client-ca-file")))
            .transpose()?;
        let request_header = match value("requestheader-client-ca-file") {
            None => None,
            Some(pem) => Some(RequestHeaderConfig {
                client_ca: CaBundle::from_pem(
                    pem.as_bytes(),
                    source("requestheader-client-ca-file"),
                )?,
                allowed_names: list("requestheader-allowed-names")?,
                username_headers: list("requestheader-username-headers")?,
                group_headers: list("requestheader-group-headers")?,
                extra_headers_prefixes: list("requestheader-extra-headers-prefix")?,
            }),
        };
        Ok(ClusterAuthentication {
            client_ca,
            request_header,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::devcerts::Ca;

    fn config_map(data: &[(&str, &str)]) -> ConfigMap {
        ConfigMap {
            data: Some(
                data.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..ConfigMap::default()
        }
    }

    #[test]
    fn reads_the_published_settings_like_recording_14() {
        let (client_ca, proxy_ca) = (Ca::new("client"), Ca::new("proxy"));
        let map = config_map(&[
            ("client-ca-file", &client_ca.pem()),
            ("requestheader-client-ca-file", &proxy_ca.pem()),
            ("requestheader-allowed-names", r#"["front-proxy-client"]"#),
            (
                "requestheader-extra-headers-prefix",
                r#"["X-Remote-Extra-"]"#,
            ),
            ("requestheader-group-headers", r#"["X-Remote-Group"]"#),
            ("requestheader-username-headers", r#"["X-Remote-User"]"#),
        ]);
        let published = ClusterAuthentication::from_config_map(&map).expect("parse");
        let ca = published.client_ca.expect("client ca");
        assert_eq!(ca.certificates[0], client_ca.0.der());
        let rh = published.request_header.expect("request header");
        assert_eq!(rh.client_ca.certificates[0], proxy_ca.0.der());
        assert_eq!(rh.allowed_names, ["front-proxy-client"]);
        assert_eq!(rh.username_headers, ["X-Remote-User"]);
        assert_eq!(rh.group_headers, ["X-Remote-Group"]);
        assert_eq!(rh.extra_headers_prefixes, ["X-Remote-Extra-"]);
    }

    #[test]
    fn absent_keys_publish_nothing_and_malformed_ones_are_errors() {
        let empty = ClusterAuthentication::from_config_map(&config_map(&[])).expect("parse");
        assert!(empty.client_ca.is_none() && empty.request_header.is_none());

        let proxy_ca = Ca::new("proxy");
        let bad_list = config_map(&[
            ("requestheader-client-ca-file", &proxy_ca.pem()),
            ("requestheader-allowed-names", "front-proxy-client"),
        ]);
        let err = ClusterAuthentication::from_config_map(&bad_list).expect_err("bad list");
        assert!(format!("{err:#}").contains("requestheader-allowed-names"));

        let bad_pem = config_map(&[("client-ca-file", "-----BEGIN CERTIFICATE-----\nxx")]);
        assert!(ClusterAuthentication::from_config_map(&bad_pem).is_err());
    }
}
