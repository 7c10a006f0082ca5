//! What is recorded: one function per fixture file. Setup requests (the namespace, the CRD,
//! objects a step needs) are sent but not recorded; each file's description or notes say what
//! happened around its steps.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use k8s_pb::api::core::v1 as core;
use k8s_pb::api::storagemigration::v1beta1 as svm;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use prost::Message;
use serde_json::json;

use crate::http::{Client, Exchange, Request};
use crate::render::{MAGIC, Recording, decode_envelope, encode_envelope, watch_events};

/// The protobuf media type, as a request's Content-Type.
const PB: &str = "application/vnd.kubernetes.protobuf";
/// What client-go's typed clients send when configured for protobuf.
const PB_ANY: &str = "application/vnd.kubernetes.protobuf, */*";
const PB_WATCH: &str = "application/vnd.kubernetes.protobuf;stream=watch";
/// client-go's metadata client: LIST (and, per its source, the same on nothing else).
const META_LIST: &str = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";
/// client-go's metadata client: GET, PATCH, WATCH.
const META_ONE: &str = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json";

const CONFIGMAPS: &str = "/api/v1/namespaces/demo/configmaps";
const WIDGETS: &str = "/apis/example.test/v1/namespaces/demo/widgets";
const SVMS_V1BETA1: &str = "/apis/storagemigration.k8s.io/v1beta1/storageversionmigrations";
const SVMS_V1ALPHA1: &str = "/apis/storagemigration.k8s.io/v1alpha1/storageversionmigrations";

/// The metadata of any object (field 1 of every Kubernetes message).
#[derive(Clone, PartialEq, prost::Message)]
struct AnyObject {
    #[prost(message, optional, tag = "1")]
    metadata: Option<meta::ObjectMeta>,
}

/// The list metadata of any list (field 1 of every list message).
#[derive(Clone, PartialEq, prost::Message)]
struct AnyList {
    #[prost(message, optional, tag = "1")]
    metadata: Option<meta::ListMeta>,
}

/// A ConfigMap message with a field ConfigMap does not have (tag 99): unknown to the server.
#[derive(Clone, PartialEq, prost::Message)]
struct ConfigMapWithUnknownField {
    #[prost(message, optional, tag = "1")]
    metadata: Option<meta::ObjectMeta>,
    #[prost(btree_map = "string, string", tag = "2")]
    data: std::collections::BTreeMap<String, String>,
    #[prost(string, optional, tag = "99")]
    not_a_configmap_field: Option<String>,
}

struct Ctx<'a> {
    client: &'a Client,
    out: &'a Path,
    /// kube-apiserver's log, to quote what it said about a request.
    apiserver_log: &'a Path,
}

impl Ctx<'_> {
    fn send(&self, request: Request) -> Result<Exchange> {
        let (method, path) = (request.method.clone(), request.path.clone());
        let exchange = self
            .client
            .send(request)
            .with_context(|| format!("{method} {path}"))?;
        eprintln!(
            "recorder:   {method} {path} -> {} ({} bytes)",
            exchange.status,
            exchange.body.len()
        );
        Ok(exchange)
    }

    /// Until a new CRD's `path` is established and served (at most 30 s).
    fn wait_served(&self, path: &str, crd: &str) -> Result<()> {
        for _ in 0..=61 {
            if self
                .send(Request::get(path).accept("application/json"))?
                .status
                == 200
            {
                return Ok(());
            }
            sleep_ms(500);
        }
        bail!("the {crd} CRD was not served within 30 s")
    }

    /// A request the files do not show; it must succeed.
    fn setup(&self, request: Request) -> Result<Exchange> {
        let exchange = self.send(request)?;
        if !(200..300).contains(&exchange.status) {
            bail!(
                "setup {} {}: {} {}",
                exchange.request.method,
                exchange.request.path,
                exchange.status,
                String::from_utf8_lossy(&exchange.body)
            );
        }
        Ok(exchange)
    }

    fn log_len(&self) -> usize {
        std::fs::metadata(self.apiserver_log).map_or(0, |m| m.len() as usize)
    }

    /// kube-apiserver's log from `from` on (after a moment: it logs as it answers).
    fn log_since(&self, from: usize) -> String {
        sleep_ms(300);
        let log = std::fs::read(self.apiserver_log).unwrap_or_default();
        String::from_utf8_lossy(log.get(from..).unwrap_or_default()).into_owned()
    }

    /// The error lines logged from `from` on.
    fn log_errors_since(&self, from: usize) -> String {
        let errors: Vec<String> = self
            .log_since(from)
            .lines()
            .filter(|l| l.starts_with('E'))
            .map(cut_klog_prefix)
            .collect();
        if errors.is_empty() {
            "(no error logged)".into()
        } else {
            errors.join("\n")
        }
    }

    /// The first panic logged from `from` on: its summary lines and the frame that panicked.
    fn panic_since(&self, from: usize) -> String {
        let text = self.log_since(from);
        let lines: Vec<&str> = text.lines().collect();
        let mut out = Vec::new();
        if let Some(at) = lines
            .iter()
            .position(|l| l.contains("\"Observed a panic\""))
        {
            out.extend(lines.iter().skip(at).take(2).map(|l| cut_klog_prefix(l)));
            // The frame after the re-panic: the function that failed.
            if let Some(frame) = lines
                .iter()
                .skip(at + 2)
                .position(|l| l.trim_start().starts_with("panic("))
            {
                let frames = lines.iter().skip(at + 2 + frame + 2).take(2);
                out.extend(frames.map(|l| l.trim().to_string()));
            }
        }
        out.extend(
            lines
                .iter()
                .filter(|l| l.contains("apiserver panic'd") || l.starts_with("http: panic serving"))
                .take(2)
                .map(|l| cut_klog_prefix(l)),
        );
        if out.is_empty() {
            "(no panic logged)".into()
        } else {
            out.join("\n")
        }
    }

    /// Run `side` in another thread while `request` is answered (a watch's live events).
    fn during(
        &self,
        request: Request,
        side: impl FnOnce(&Ctx) -> Result<()> + Send,
    ) -> Result<Exchange> {
        std::thread::scope(|scope| {
            let helper = scope.spawn(|| side(self));
            let answer = self.send(request);
            helper
                .join()
                .map_err(|_| anyhow::anyhow!("the side thread panicked"))??;
            answer
        })
    }
}

fn json_request(method: &str, path: &str, content_type: &str, body: serde_json::Value) -> Request {
    Request::new(method, path)
        .accept("application/json")
        .body(content_type, body.to_string().into_bytes())
}

fn pb_request<M: Message>(
    method: &str,
    path: &str,
    api_version: &str,
    kind: &str,
    message: &M,
) -> Request {
    Request::new(method, path)
        .accept(PB_ANY)
        .body(PB, encode_envelope(api_version, kind, message))
}

fn object_meta(name: &str, namespace: Option<&str>) -> meta::ObjectMeta {
    meta::ObjectMeta {
        name: Some(name.into()),
        namespace: namespace.map(Into::into),
        ..Default::default()
    }
}

fn config_map(name: &str, key: &str, value: &str) -> core::ConfigMap {
    core::ConfigMap {
        metadata: Some(object_meta(name, Some("demo"))),
        data: [(key.to_string(), value.to_string())].into_iter().collect(),
        ..Default::default()
    }
}

/// The object's metadata from a protobuf answer.
fn object_metadata(exchange: &Exchange) -> Result<meta::ObjectMeta> {
    decode_envelope::<AnyObject>(&exchange.body)?
        .metadata
        .context("no metadata in the answer")
}

/// The list's metadata from a protobuf answer.
fn list_metadata(exchange: &Exchange) -> Result<meta::ListMeta> {
    decode_envelope::<AnyList>(&exchange.body)?
        .metadata
        .context("no list metadata in the answer")
}

fn list_rv(exchange: &Exchange) -> Result<String> {
    list_metadata(exchange)?
        .resource_version
        .context("no resourceVersion in the list")
}

fn sleep_ms(ms: u64) {
    std::thread::sleep(Duration::from_millis(ms));
}

/// Every file of the run with storagemigration.k8s.io/v1beta1 on.
pub(crate) fn record_all(
    client: &Client,
    out: &Path,
    apiserver_log: &Path,
    v1alpha1_start: &str,
) -> Result<()> {
    let ctx = Ctx {
        client,
        out,
        apiserver_log,
    };
    setup(&ctx)?;
    configmap_crud(&ctx)?;
    watch(&ctx)?;
    watch_list(&ctx)?;
    metadata_only(&ctx)?;
    storage_version_migration_v1beta1(&ctx)?;
    storage_version_migration_v1alpha1(&ctx, v1alpha1_start)?;
    negotiation(&ctx)?;
    bad_bodies(&ctx)?;
    too_many_requests(&ctx)?;
    Ok(())
}

/// The namespace `demo`, the widgets CRD (as in the earlier recordings, v1 only) and w1, w2.
fn setup(ctx: &Ctx) -> Result<()> {
    eprintln!("recorder: setup (not recorded)");
    ctx.setup(json_request(
        "POST",
        "/api/v1/namespaces",
        "application/json",
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "demo"}}),
    ))?;
    let schema = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "size": {"type": "integer"}, "color": {"type": "string"}}}}});
    ctx.setup(json_request(
        "POST",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        "application/json",
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.test"},
            "spec": {"group": "example.test", "scope": "Namespaced",
                "names": {"plural": "widgets", "singular": "widget", "kind": "Widget",
                    "listKind": "WidgetList", "shortNames": ["wd"], "categories": ["all"]},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": schema},
                    "additionalPrinterColumns": [
                        {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
                        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}]}]}}),
    ))?;
    ctx.wait_served(WIDGETS, "widgets")?;
    for (name, size) in [("w1", 1), ("w2", 2)] {
        ctx.setup(json_request(
            "POST",
            WIDGETS,
            "application/json",
            json!({"apiVersion": "example.test/v1", "kind": "Widget",
                "metadata": {"name": name, "namespace": "demo"},
                "spec": {"size": size, "color": "blue"}}),
        ))?;
    }
    Ok(())
}

/// 20a: a ConfigMap's life in protobuf.
fn configmap_crud(ctx: &Ctx) -> Result<()> {
    eprintln!("recorder: 20a");
    let mut file = Recording::new(
        "20a-protobuf-configmap-crud.txt",
        "ConfigMap CRUD in protobuf, as client-go's typed client sends it (Content-Type application/vnd.kubernetes.protobuf, Accept \"application/vnd.kubernetes.protobuf, */*\"): create, get, list with limit/continue, update (PUT), delete with a protobuf DeleteOptions body, get after delete (404). Request bodies encoded by the recorder with k8s-pb/prost; pb-cm2 and pb-cm3 were created in protobuf between steps 1 and 2 (not shown).",
    );
    let create = ctx.send(pb_request(
        "POST",
        CONFIGMAPS,
        "v1",
        "ConfigMap",
        &config_map("pb-cm1", "k", "v1"),
    ))?;
    file.step("create pb-cm1 with a protobuf body", &create);
    for name in ["pb-cm2", "pb-cm3"] {
        ctx.setup(pb_request(
            "POST",
            CONFIGMAPS,
            "v1",
            "ConfigMap",
            &config_map(name, "k", name),
        ))?;
    }
    let get = ctx.send(Request::get(&format!("{CONFIGMAPS}/pb-cm1")).accept(PB_ANY))?;
    file.step("get pb-cm1", &get);
    let page = ctx.send(Request::get(&format!("{CONFIGMAPS}?limit=2")).accept(PB_ANY))?;
    file.step(
        "list with limit=2: ConfigMapList with a continue token",
        &page,
    );
    let token = list_metadata(&page)?
        .r#continue
        .filter(|t| !t.is_empty())
        .context("no continue token on the first page")?;
    let rest =
        ctx.send(Request::get(&format!("{CONFIGMAPS}?limit=2&continue={token}")).accept(PB_ANY))?;
    file.step("the next page with that continue token", &rest);

    let mut updated: core::ConfigMap = decode_envelope(&get.body)?;
    updated.data.insert("k".into(), "v2".into());
    let put = ctx.send(pb_request(
        "PUT",
        &format!("{CONFIGMAPS}/pb-cm1"),
        "v1",
        "ConfigMap",
        &updated,
    ))?;
    file.step(
        "update (PUT) pb-cm1: the object from step 2 with data.k=v2, its resourceVersion kept",
        &put,
    );
    let uid = object_metadata(&put)?.uid.unwrap_or_default();
    let options = meta::DeleteOptions {
        grace_period_seconds: Some(0),
        preconditions: Some(meta::Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        propagation_policy: Some("Background".into()),
        ..Default::default()
    };
    let delete = ctx.send(pb_request(
        "DELETE",
        &format!("{CONFIGMAPS}/pb-cm1"),
        "v1",
        "DeleteOptions",
        &options,
    ))?;
    file.step(
        "delete pb-cm1 with a protobuf DeleteOptions body (envelope v1/DeleteOptions, as client-go's core client encodes it; preconditions.uid, gracePeriodSeconds 0, propagationPolicy Background)",
        &delete,
    );
    let gone = ctx.send(Request::get(&format!("{CONFIGMAPS}/pb-cm1")).accept(PB_ANY))?;
    file.step("get pb-cm1 after the delete: 404", &gone);
    file.write(ctx.out)
}

/// 20b: watches in protobuf (framing, bookmarks, the ERROR event).
fn watch(ctx: &Ctx) -> Result<()> {
    eprintln!("recorder: 20b");
    let mut file = Recording::new(
        "20b-protobuf-watch-configmaps.txt",
        "WATCH of ConfigMaps in protobuf: Accept application/vnd.kubernetes.protobuf and application/vnd.kubernetes.protobuf;stream=watch, with allowWatchBookmarks=true, live ADDED/MODIFIED/DELETED events made by a second connection (JSON, not shown) during the watch, the server's BOOKMARKs, an ERROR event (resourceVersion too old), and a watch from a resourceVersion far ahead of etcd's.",
    );
    let list = ctx.send(Request::get(CONFIGMAPS).accept(PB_ANY))?;
    file.step("list: the resourceVersion to watch from", &list);
    let rv = list_rv(&list)?;
    let live = |name: &'static str| {
        move |ctx: &Ctx| -> Result<()> {
            sleep_ms(1000);
            ctx.setup(json_request(
                "POST",
                CONFIGMAPS,
                "application/json",
                json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": name, "namespace": "demo"}, "data": {"x": "1"}}),
            ))?;
            sleep_ms(500);
            ctx.setup(json_request(
                "PATCH",
                &format!("{CONFIGMAPS}/{name}"),
                "application/merge-patch+json",
                json!({"data": {"x": "2"}}),
            ))?;
            sleep_ms(500);
            ctx.setup(Request::new("DELETE", &format!("{CONFIGMAPS}/{name}")))?;
            Ok(())
        }
    };
    let watch = ctx.during(
        Request::get(&format!(
            "{CONFIGMAPS}?watch=1&resourceVersion={rv}&allowWatchBookmarks=true&timeoutSeconds=5"
        ))
        .accept(PB),
        live("pb-live1"),
    )?;
    file.step(
        "watch from the list's resourceVersion with Accept application/vnd.kubernetes.protobuf, allowWatchBookmarks=true, timeoutSeconds=5 (pb-live1 created 1 s in, merge-patched 0.5 s later, deleted 0.5 s after that)",
        &watch,
    );
    let rv = watch_events(&watch.body)
        .last()
        .and_then(|e| {
            let raw = e.object.as_ref()?.raw.as_ref()?;
            decode_envelope::<AnyObject>(raw)
                .ok()?
                .metadata?
                .resource_version
        })
        .unwrap_or(rv);
    let watch = ctx.during(
        Request::get(&format!(
            "{CONFIGMAPS}?watch=1&resourceVersion={rv}&allowWatchBookmarks=true&timeoutSeconds=5"
        ))
        .accept(PB_WATCH),
        live("pb-live2"),
    )?;
    file.step(
        "the same with Accept application/vnd.kubernetes.protobuf;stream=watch, from the last event's resourceVersion (pb-live2 created, patched, deleted as above)",
        &watch,
    );
    let too_old = ctx.send(
        Request::get(&format!(
            "{CONFIGMAPS}?watch=1&resourceVersion=1&allowWatchBookmarks=true&timeoutSeconds=5"
        ))
        .accept(PB),
    )?;
    file.step(
        "watch from resourceVersion=1: older than the watch cache's start (etcd was written to and compacted before kube-apiserver started)",
        &too_old,
    );
    let future: u64 = rv.parse::<u64>().unwrap_or(0) + 1_000_000;
    let too_large = ctx.send(
        Request::get(&format!(
            "{CONFIGMAPS}?watch=1&resourceVersion={future}&allowWatchBookmarks=true&timeoutSeconds=10"
        ))
        .accept(PB),
    )?;
    file.step(
        "watch from a resourceVersion a million ahead of etcd's, timeoutSeconds=10",
        &too_large,
    );
    file.write(ctx.out)
}

/// 20c: watch-list (streaming list) in protobuf.
fn watch_list(ctx: &Ctx) -> Result<()> {
    eprintln!("recorder: 20c");
    let mut file = Recording::new(
        "20c-protobuf-watchlist-configmaps.txt",
        "Watch-list in protobuf (kube-apiserver on etcd 3.5.16): ?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true -> an ADDED frame per existing object, then the BOOKMARK annotated k8s.io/initial-events-end; timeoutSeconds=3 ends the stream. The namespace holds pb-cm2 and pb-cm3 at this point.",
    );
    for (accept, title) in [
        (
            PB,
            "watch-list with Accept application/vnd.kubernetes.protobuf",
        ),
        (
            PB_WATCH,
            "the same with Accept application/vnd.kubernetes.protobuf;stream=watch",
        ),
    ] {
        let answer = ctx.send(
            Request::get(&format!(
                "{CONFIGMAPS}?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=3"
            ))
            .accept(accept),
        )?;
        file.step(title, &answer);
    }
    file.write(ctx.out)
}

/// 20d: metadata-only reads in protobuf, on ConfigMaps and on a custom resource.
fn metadata_only(ctx: &Ctx) -> Result<()> {
    eprintln!("recorder: 20d");
    let mut file = Recording::new(
        "20d-protobuf-metadata-only-partialobjectmetadata.txt",
        "Metadata-only reads with the Accept headers of client-go's metadata client (protobuf first, then JSON): as=PartialObjectMetadataList on LIST and on WATCH, as=PartialObjectMetadata on GET, on a merge PATCH's answer and on WATCH; for ConfigMaps and for the custom resource widgets.example.test.",
    );
    for (base, name, what, patch) in [
        (
            CONFIGMAPS,
            "pb-cm2",
            "configmaps",
            json!({"metadata": {"labels": {"touched": "yes"}}}),
        ),
        (
            WIDGETS,
            "w1",
            "widgets (a custom resource)",
            json!({"metadata": {"labels": {"touched": "yes"}}}),
        ),
    ] {
        let list = ctx.send(Request::get(base).accept(META_LIST))?;
        file.step(&format!("LIST {what}, as=PartialObjectMetadataList"), &list);
        let rv = list_rv(&list).ok();
        let get = ctx.send(Request::get(&format!("{base}/{name}")).accept(META_ONE))?;
        file.step(&format!("GET {name}, as=PartialObjectMetadata"), &get);
        let patched = ctx.send(
            Request::new("PATCH", &format!("{base}/{name}"))
                .accept(META_ONE)
                .body(
                    "application/merge-patch+json",
                    patch.to_string().into_bytes(),
                ),
        )?;
        file.step(
            &format!("merge PATCH of {name} (a label), answer as=PartialObjectMetadata"),
            &patched,
        );
        let rv = rv.unwrap_or_default();
        for (accept, form) in [
            (META_LIST, "as=PartialObjectMetadataList"),
            (META_ONE, "as=PartialObjectMetadata"),
        ] {
            let log_from = ctx.log_len();
            let watch = ctx.send(
                Request::get(&format!(
                    "{base}?watch=1&resourceVersion={rv}&allowWatchBookmarks=true&timeoutSeconds=3"
                ))
                .accept(accept),
            )?;
            file.step(
                &format!(
                    "WATCH {what} from the LIST's resourceVersion (the PATCH above came after it) with {form}"
                ),
                &watch,
            );
            if watch.body.is_empty() {
                file.note(&format!(
                    "the stream ended at the first event, without an ERROR event. kube-apiserver's log at that moment (timestamps and pids cut):\n{}",
                    ctx.log_errors_since(log_from)
                ));
            }
        }
    }
    file.write(ctx.out)
}

fn svm_object(name: &str) -> svm::StorageVersionMigration {
    svm::StorageVersionMigration {
        metadata: Some(object_meta(name, None)),
        spec: Some(svm::StorageVersionMigrationSpec {
            resource: Some(meta::GroupResource {
                group: Some(String::new()),
                resource: Some("configmaps".into()),
            }),
        }),
        status: None,
    }
}

/// 20e: StorageVersionMigration v1beta1 in protobuf.
fn storage_version_migration_v1beta1(ctx: &Ctx) -> Result<()> {
    eprintln!("recorder: 20e");
    let version = "storagemigration.k8s.io/v1beta1";
    let mut file = Recording::new(
        "20e-protobuf-storageversionmigration-v1beta1.txt",
        "StorageVersionMigration storagemigration.k8s.io/v1beta1 in protobuf on kube-apiserver v1.36.2 (--runtime-config=storagemigration.k8s.io/v1beta1=true --feature-gates=StorageVersionMigrator=true, no kube-controller-manager: nothing acts on the objects): create, get, list, update, /status update, watch, delete (DeleteOptions enveloped as storagemigration.k8s.io/v1beta1, then as meta.k8s.io/v1).",
    );
    let create = ctx.send(pb_request(
        "POST",
        SVMS_V1BETA1,
        version,
        "StorageVersionMigration",
        &svm_object("pb-svm1"),
    ))?;
    file.step(
        "create pb-svm1 (spec.resource configmaps) with a protobuf body",
        &create,
    );
    let get = ctx.send(Request::get(&format!("{SVMS_V1BETA1}/pb-svm1")).accept(PB_ANY))?;
    file.step("get pb-svm1", &get);
    let list = ctx.send(Request::get(SVMS_V1BETA1).accept(PB_ANY))?;
    file.step("list", &list);
    let rv = list_rv(&list)?;

    let mut object: svm::StorageVersionMigration = decode_envelope(&get.body)?;
    if let Some(metadata) = object.metadata.as_mut() {
        metadata.labels.insert("recorded".into(), "protobuf".into());
    }
    let put = ctx.send(pb_request(
        "PUT",
        &format!("{SVMS_V1BETA1}/pb-svm1"),
        version,
        "StorageVersionMigration",
        &object,
    ))?;
    file.step(
        "update (PUT) pb-svm1: a label added to the object of step 2",
        &put,
    );

    let mut object: svm::StorageVersionMigration = decode_envelope(&put.body)?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or_default();
    object.status = Some(svm::StorageVersionMigrationStatus {
        conditions: vec![meta::Condition {
            r#type: Some("Running".into()),
            status: Some("True".into()),
            observed_generation: None,
            last_transition_time: Some(meta::Time {
                seconds: Some(now),
                nanos: Some(0),
            }),
            reason: Some("Recorded".into()),
            message: Some("set by the recorder".into()),
        }],
        resource_version: None,
    });
    let status = ctx.send(pb_request(
        "PUT",
        &format!("{SVMS_V1BETA1}/pb-svm1/status"),
        version,
        "StorageVersionMigration",
        &object,
    ))?;
    file.step(
        "update /status (PUT, protobuf): a Running condition on the object of step 4",
        &status,
    );
    let watch = ctx.send(
        Request::get(&format!(
            "{SVMS_V1BETA1}?watch=1&resourceVersion={rv}&allowWatchBookmarks=true&timeoutSeconds=3"
        ))
        .accept(PB_WATCH),
    )?;
    file.step(
        "watch from the list's resourceVersion (step 3): the two updates come as MODIFIED",
        &watch,
    );
    let delete = ctx.send(pb_request(
        "DELETE",
        &format!("{SVMS_V1BETA1}/pb-svm1"),
        version,
        "DeleteOptions",
        &meta::DeleteOptions {
            propagation_policy: Some("Background".into()),
            ..Default::default()
        },
    ))?;
    file.step(
        "delete pb-svm1 with DeleteOptions enveloped as storagemigration.k8s.io/v1beta1",
        &delete,
    );
    ctx.setup(pb_request(
        "POST",
        SVMS_V1BETA1,
        version,
        "StorageVersionMigration",
        &svm_object("pb-svm2"),
    ))?;
    let delete = ctx.send(pb_request(
        "DELETE",
        &format!("{SVMS_V1BETA1}/pb-svm2"),
        "meta.k8s.io/v1",
        "DeleteOptions",
        &meta::DeleteOptions {
            propagation_policy: Some("Background".into()),
            ..Default::default()
        },
    ))?;
    file.step(
        "delete pb-svm2 (created in protobuf, not shown) with DeleteOptions enveloped as meta.k8s.io/v1",
        &delete,
    );
    file.write(ctx.out)
}

/// 20f: storagemigration.k8s.io/v1alpha1 on kube-apiserver v1.36.2. `v1alpha1_start` is what
/// the start with it in --runtime-config ended with (hack/record-protobuf.sh).
fn storage_version_migration_v1alpha1(ctx: &Ctx, v1alpha1_start: &str) -> Result<()> {
    eprintln!("recorder: 20f");
    let mut file = Recording::new(
        "20f-storageversionmigration-v1alpha1-not-served.txt",
        "storagemigration.k8s.io/v1alpha1 on kube-apiserver v1.36.2: not served. A start with --runtime-config=storagemigration.k8s.io/v1alpha1=true,storagemigration.k8s.io/v1beta1=true --feature-gates=StorageVersionMigrator=true exits at once (see the NOTE; the binary has no v1alpha1 types at all). The steps below are from the start with v1beta1 only: the group lists v1beta1 alone, and v1alpha1 paths are 404.",
    );
    let group =
        ctx.send(Request::get("/apis/storagemigration.k8s.io").accept("application/json"))?;
    file.step("the group (JSON): its versions", &group);
    let version = ctx
        .send(Request::get("/apis/storagemigration.k8s.io/v1alpha1").accept("application/json"))?;
    file.step("the v1alpha1 resource list (JSON)", &version);
    let list = ctx.send(Request::get(SVMS_V1ALPHA1).accept(PB_ANY))?;
    file.step(
        "LIST v1alpha1 storageversionmigrations, protobuf accepted",
        &list,
    );
    file.note(&format!(
        "the start with --runtime-config=storagemigration.k8s.io/v1alpha1=true,storagemigration.k8s.io/v1beta1=true ended with (kube-apiserver's log, timestamp and pid cut): {v1alpha1_start}"
    ));
    file.write(ctx.out)
}

/// Run with storagemigration.k8s.io/v1alpha1 served: v1.36.2 never does (20f).
pub(crate) fn record_v1alpha1() -> Result<()> {
    bail!(
        "this kube-apiserver serves storagemigration.k8s.io/v1alpha1: the recorder has no \
         v1alpha1 scenario yet (k8s-pb 0.9 has no v1alpha1 types; add prost messages for them)"
    )
}

/// 20g: content negotiation, tables, custom resources, 404 and PATCH in protobuf.
fn negotiation(ctx: &Ctx) -> Result<()> {
    eprintln!("recorder: 20g");
    let mut file = Recording::new(
        "20g-protobuf-negotiation.txt",
        "Content negotiation around protobuf: a 404 with a protobuf-only Accept, as=Table in protobuf alone and with JSON after it, Accept */*, q-values, protobuf on a custom resource (GET, LIST, create with a protobuf body), and a PATCH whose Content-Type is protobuf.",
    );
    let cm = format!("{CONFIGMAPS}/pb-cm2");
    let table = "application/vnd.kubernetes.protobuf;as=Table;g=meta.k8s.io;v=v1";
    let steps: Vec<(String, Request)> = vec![
        (
            "GET a missing ConfigMap with Accept application/vnd.kubernetes.protobuf".into(),
            Request::get(&format!("{CONFIGMAPS}/does-not-exist")).accept(PB),
        ),
        (
            "GET a missing ConfigMap with Accept \"application/vnd.kubernetes.protobuf, */*\"".into(),
            Request::get(&format!("{CONFIGMAPS}/does-not-exist")).accept(PB_ANY),
        ),
        (
            "GET pb-cm2 with Accept application/vnd.kubernetes.protobuf;as=Table;g=meta.k8s.io;v=v1 alone".into(),
            Request::get(&cm).accept(table),
        ),
        (
            "LIST configmaps with the protobuf Table Accept alone".into(),
            Request::get(CONFIGMAPS).accept(table),
        ),
        (
            "GET pb-cm2 with the protobuf Table Accept, then application/json".into(),
            Request::get(&cm).accept(&format!("{table},application/json")),
        ),
        (
            "GET pb-cm2 with the protobuf Table Accept, then the JSON Table, then application/json (kubectl's order with protobuf first)".into(),
            Request::get(&cm).accept(&format!(
                "{table},application/json;as=Table;g=meta.k8s.io;v=v1,application/json"
            )),
        ),
        (
            "GET pb-cm2 with Accept */*".into(),
            Request::get(&cm).accept("*/*"),
        ),
        (
            "GET pb-cm2 with Accept application/json;q=0.5,application/vnd.kubernetes.protobuf".into(),
            Request::get(&cm).accept("application/json;q=0.5,application/vnd.kubernetes.protobuf"),
        ),
        (
            "GET pb-cm2 with Accept application/vnd.kubernetes.protobuf;q=0.5,application/json".into(),
            Request::get(&cm).accept("application/vnd.kubernetes.protobuf;q=0.5,application/json"),
        ),
        (
            "GET the custom resource w1 with Accept application/vnd.kubernetes.protobuf alone".into(),
            Request::get(&format!("{WIDGETS}/w1")).accept(PB),
        ),
        (
            "LIST widgets with Accept application/vnd.kubernetes.protobuf alone".into(),
            Request::get(WIDGETS).accept(PB),
        ),
        (
            "GET w1 with Accept \"application/vnd.kubernetes.protobuf, */*\" (client-go's protobuf config)".into(),
            Request::get(&format!("{WIDGETS}/w1")).accept(PB_ANY),
        ),
        (
            "GET w1 with the protobuf Table Accept, then application/json".into(),
            Request::get(&format!("{WIDGETS}/w1")).accept(&format!("{table},application/json")),
        ),
        (
            "create a Widget with a protobuf body (envelope example.test/v1 Widget; raw: a message holding only metadata, field 1, as every Kubernetes message starts)".into(),
            pb_request(
                "POST",
                WIDGETS,
                "example.test/v1",
                "Widget",
                &meta::PartialObjectMetadata {
                    metadata: Some(object_meta("pb-w1", Some("demo"))),
                },
            ),
        ),
        (
            "PATCH pb-cm2 with Content-Type application/vnd.kubernetes.protobuf (a ConfigMap envelope as the body)".into(),
            Request::new("PATCH", &cm).accept(PB_ANY).body(
                PB,
                encode_envelope("v1", "ConfigMap", &config_map("pb-cm2", "k", "patched")),
            ),
        ),
        (
            "PATCH the custom resource w1 with Content-Type application/vnd.kubernetes.protobuf".into(),
            Request::new("PATCH", &format!("{WIDGETS}/w1")).accept(PB_ANY).body(
                PB,
                encode_envelope(
                    "example.test/v1",
                    "Widget",
                    &meta::PartialObjectMetadata {
                        metadata: Some(object_meta("w1", Some("demo"))),
                    },
                ),
            ),
        ),
    ];
    for (title, request) in steps {
        let log_from = ctx.log_len();
        let answer = ctx.send(request)?;
        file.step(&title, &answer);
        if answer.status == 0 {
            file.note(&format!(
                "no HTTP response at all: kube-apiserver panicked while decoding the body and Go's HTTP server closed the connection. Its log (timestamps and pids cut, addresses in the stack as printed):\n{}",
                ctx.panic_since(log_from)
            ));
        }
    }
    file.write(ctx.out)
}

/// 20h: errors in protobuf: 409, 422, and bad protobuf bodies on create.
fn bad_bodies(ctx: &Ctx) -> Result<()> {
    eprintln!("recorder: 20h");
    let mut file = Recording::new(
        "20h-protobuf-create-errors.txt",
        "Errors answered to protobuf requests: 409 AlreadyExists and 409 Conflict, 422 Invalid, and bad protobuf bodies POSTed to configmaps (truncated, no magic, a Secret envelope, unknown fields with and without fieldValidation=Strict, an empty body, only the magic, declared lengths past the end). Every body was made with k8s-pb/prost; the broken ones by cutting or by prost's own encoding functions (encode_key, encode_varint) for the lengths, never hand-written.",
    );
    let valid = encode_envelope("v1", "ConfigMap", &config_map("pb-bad", "k", "v"));
    let post = |body: Vec<u8>| {
        Request::new("POST", CONFIGMAPS)
            .accept(PB_ANY)
            .body(PB, body)
    };

    let exists = ctx.send(pb_request(
        "POST",
        CONFIGMAPS,
        "v1",
        "ConfigMap",
        &config_map("pb-cm2", "k", "again"),
    ))?;
    file.step("create pb-cm2, which exists: 409 AlreadyExists", &exists);
    let current = ctx.send(Request::get(&format!("{CONFIGMAPS}/pb-cm3")).accept(PB_ANY))?;
    let mut stale: core::ConfigMap = decode_envelope(&current.body)?;
    if let Some(metadata) = stale.metadata.as_mut() {
        metadata.resource_version = Some("1".into());
    }
    stale.data.insert("k".into(), "stale".into());
    let conflict = ctx.send(pb_request(
        "PUT",
        &format!("{CONFIGMAPS}/pb-cm3"),
        "v1",
        "ConfigMap",
        &stale,
    ))?;
    file.step(
        "update pb-cm3 with resourceVersion 1 (stale): 409 Conflict",
        &conflict,
    );
    let invalid = ctx.send(pb_request(
        "POST",
        CONFIGMAPS,
        "v1",
        "ConfigMap",
        &config_map("Bad_Name", "bad key!", "v"),
    ))?;
    file.step(
        "create with an invalid name and an invalid data key: 422 Invalid",
        &invalid,
    );

    let truncated = valid[..valid.len() / 2].to_vec();
    let answer = ctx.send(post(truncated.clone()))?;
    file.step(
        &format!(
            "a valid ConfigMap envelope of {} bytes cut to its first {}",
            valid.len(),
            truncated.len()
        ),
        &answer,
    );
    let answer = ctx.send(post(valid[MAGIC.len()..].to_vec()))?;
    file.step(
        "the same envelope without its k8s\\0 magic (runtime.Unknown bytes only)",
        &answer,
    );
    let answer = ctx.send(post(config_map("pb-bare", "k", "v").encode_to_vec()))?;
    file.step(
        "a bare ConfigMap message: no magic, no runtime.Unknown",
        &answer,
    );
    let secret = core::Secret {
        metadata: Some(object_meta("pb-secret", Some("demo"))),
        string_data: [("k".to_string(), "v".to_string())].into_iter().collect(),
        ..Default::default()
    };
    let answer = ctx.send(post(encode_envelope("v1", "Secret", &secret)))?;
    file.step("a valid Secret envelope POSTed to configmaps", &answer);
    let with_unknown = ConfigMapWithUnknownField {
        metadata: Some(object_meta("pb-unknown-field", Some("demo"))),
        data: [("k".to_string(), "v".to_string())].into_iter().collect(),
        not_a_configmap_field: Some("surprise".into()),
    };
    let answer = ctx.send(post(encode_envelope("v1", "ConfigMap", &with_unknown)))?;
    file.step(
        "a ConfigMap envelope whose message has a field ConfigMap lacks (tag 99, a string)",
        &answer,
    );
    let strict = ConfigMapWithUnknownField {
        metadata: Some(object_meta("pb-unknown-strict", Some("demo"))),
        ..with_unknown
    };
    let answer = ctx.send(
        Request::new("POST", &format!("{CONFIGMAPS}?fieldValidation=Strict"))
            .accept(PB_ANY)
            .body(PB, encode_envelope("v1", "ConfigMap", &strict)),
    )?;
    file.step("the same with ?fieldValidation=Strict", &answer);
    let answer = ctx.send(post(Vec::new()))?;
    file.step("an empty body (Content-Length: 0)", &answer);
    let answer = ctx.send(post(MAGIC.to_vec()))?;
    file.step(
        "only the magic k8s\\0: an empty runtime.Unknown (no kind)",
        &answer,
    );

    // runtime.Unknown: typeMeta (field 1), then raw (field 2) declaring u64::MAX bytes.
    let mut overflow = MAGIC.to_vec();
    let type_meta = k8s_pb::apimachinery::pkg::runtime::TypeMeta {
        api_version: Some("v1".into()),
        kind: Some("ConfigMap".into()),
    };
    prost::encoding::message::encode(1, &type_meta, &mut overflow);
    prost::encoding::encode_key(2, prost::encoding::WireType::LengthDelimited, &mut overflow);
    prost::encoding::encode_varint(u64::MAX, &mut overflow);
    overflow.extend(config_map("pb-overflow", "k", "v").encode_to_vec());
    let answer = ctx.send(post(overflow))?;
    file.step(
        "an envelope whose runtime.Unknown.raw declares a length of 2^64-1 bytes (ten-byte varint)",
        &answer,
    );
    // runtime.Unknown.raw well formed, but the ConfigMap inside declares metadata of 2^31 bytes.
    let mut inner = Vec::new();
    prost::encoding::encode_key(1, prost::encoding::WireType::LengthDelimited, &mut inner);
    prost::encoding::encode_varint(1 << 31, &mut inner);
    inner.extend(object_meta("pb-inner", Some("demo")).encode_to_vec());
    let answer = ctx.send(post(encode_raw_envelope("v1", "ConfigMap", inner)))?;
    file.step(
        "a well-formed envelope whose ConfigMap message declares metadata (field 1) of 2^31 bytes",
        &answer,
    );
    let mut inner = Vec::new();
    prost::encoding::encode_key(1, prost::encoding::WireType::LengthDelimited, &mut inner);
    prost::encoding::encode_varint(1 << 62, &mut inner);
    inner.extend(object_meta("pb-inner", Some("demo")).encode_to_vec());
    let answer = ctx.send(post(encode_raw_envelope("v1", "ConfigMap", inner)))?;
    file.step("the same with metadata declared as 2^62 bytes", &answer);
    file.write(ctx.out)
}

/// An envelope around bytes that are not one message (the broken cases).
fn encode_raw_envelope(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
    let unknown = k8s_pb::apimachinery::pkg::runtime::Unknown {
        type_meta: Some(k8s_pb::apimachinery::pkg::runtime::TypeMeta {
            api_version: Some(api_version.into()),
            kind: Some(kind.into()),
        }),
        raw: Some(raw),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    let mut out = MAGIC.to_vec();
    out.extend(unknown.encode_to_vec());
    out
}

/// `E1126 07:47:47.899380   18750 timeout.go:121] ...` -> `E timeout.go:121] ...`.
fn cut_klog_prefix(line: &str) -> String {
    let trimmed = line.trim();
    let mut chars = trimmed.chars();
    match (chars.next(), chars.next()) {
        (Some(level @ ('E' | 'I' | 'W')), Some(digit)) if digit.is_ascii_digit() => {
            let rest: Vec<&str> = trimmed.split_whitespace().skip(3).collect();
            format!("{level} {}", rest.join(" "))
        }
        _ => trimmed.to_string(),
    }
}

const GADGETS: &str = "/apis/example.test/v1/namespaces/demo/gadgets";
const GADGETS_CRD: &str =
    "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/gadgets.example.test";
/// Enough gadgets (of 4 KiB) that a watch cache takes a moment to fill and a full LIST keeps
/// a seat of the small priority level busy.
const GADGET_COUNT: usize = 1500;
/// The user the APF step impersonates: matched by a FlowSchema of its own.
const LIMITED_USER: &str = "recorder-limited";
/// Concurrent LISTs sent as that user in one round.
const APF_ROUND: usize = 48;

/// 21: the two 429s kube-apiserver gives: its watch cache for a resource still filling (a
/// Status from the resource's handler) and API Priority and Fairness rejecting (plain text
/// from its filter, before any handler).
fn too_many_requests(ctx: &Ctx) -> Result<()> {
    eprintln!("recorder: 21");
    gadgets(ctx)?;
    let mut file = Recording::new(
        "21-too-many-requests-cache-and-apf.txt",
        &format!(
            "The two 429s of kube-apiserver v1.36.2 (etcd 3.5.16). Step 1: a watch-list of a custom resource sent right after its CRD's storage version moved (the CRD gadgets.example.test, {GADGET_COUNT} objects of 4 KiB; kube-apiserver builds the resource's storage anew on the first request after the change, and its watch cache fills in the background): the handler answers a metav1.Status, reason TooManyRequests, \"storage is (re)initializing\", Retry-After 1. Step 2: API Priority and Fairness rejecting a request: a PriorityLevelConfiguration recorder-reject (Limited, nominalConcurrencyShares 1, lendablePercent 0, limitResponse Reject) and a FlowSchema recorder-reject (precedence 100) for the user {LIMITED_USER}, whom the admin impersonates (APF classifies after impersonation, before authorization; the user is bound to cluster-admin); {APF_ROUND} full LISTs of the gadgets at once: the filter answers in plain text, not a Status."
        ),
    );
    let (initializing, tries) = cache_initializing(ctx)?;
    file.step(
        "a watch-list (JSON) right after the storage version moved: 429, a Status",
        &initializing,
    );
    file.note(&format!(
        "storage switches until a watch-list met the filling cache: {tries}"
    ));
    let (rejected, rounds, rejections) = apf_rejection(ctx)?;
    file.step(
        &format!("one of {APF_ROUND} concurrent LISTs as {LIMITED_USER}: API Priority and Fairness rejects it"),
        &rejected,
    );
    file.note(&format!(
        "{rejections} of the {APF_ROUND} LISTs of round {rounds} were rejected; the others were answered 200 (not shown: 6 MB each)"
    ));
    file.write(ctx.out)
}

/// The gadgets CRD (v1 storage, v2 served, the same schema) and its objects (not recorded).
fn gadgets(ctx: &Ctx) -> Result<()> {
    let schema = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "data": {"type": "string"}}}}});
    let version = |name: &str, storage: bool| {
        json!({"name": name, "served": true, "storage": storage,
            "schema": {"openAPIV3Schema": schema}})
    };
    ctx.setup(json_request(
        "POST",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        "application/json",
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "gadgets.example.test"},
            "spec": {"group": "example.test", "scope": "Namespaced",
                "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget",
                    "listKind": "GadgetList"},
                "versions": [version("v1", true), version("v2", false)]}}),
    ))?;
    ctx.wait_served(GADGETS, "gadgets")?;
    let data = "x".repeat(4096);
    let threads = 4;
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let data = &data;
                scope.spawn(move || -> Result<()> {
                    for i in (t..GADGET_COUNT).step_by(threads) {
                        ctx.client.send(json_request(
                            "POST",
                            GADGETS,
                            "application/json",
                            json!({"apiVersion": "example.test/v1", "kind": "Gadget",
                                "metadata": {"name": format!("g-{i:05}"), "namespace": "demo"},
                                "spec": {"data": data}}),
                        ))?;
                    }
                    Ok(())
                })
            })
            .collect();
        for worker in workers {
            worker
                .join()
                .map_err(|_| anyhow::anyhow!("a creating thread panicked"))??;
        }
        Ok::<(), anyhow::Error>(())
    })?;
    eprintln!("recorder:   {GADGET_COUNT} gadgets created");
    Ok(())
}

/// Moves the gadgets' storage version, then sends a watch-list as the first request to the
/// new storage; again until one meets the cache filling. The answer and the switches it took.
fn cache_initializing(ctx: &Ctx) -> Result<(Exchange, usize)> {
    for tries in 1..=8 {
        let v2 = tries % 2 == 1;
        let patch = json!([
            {"op": "replace", "path": "/spec/versions/0/storage", "value": !v2},
            {"op": "replace", "path": "/spec/versions/1/storage", "value": v2}]);
        ctx.setup(
            Request::new("PATCH", GADGETS_CRD)
                .accept("application/json")
                .body(
                    "application/json-patch+json",
                    patch.to_string().into_bytes(),
                ),
        )?;
        // The handler drops the old storage when its informer sees the change.
        sleep_ms(500);
        let answer = ctx.send(Request::get(&format!(
            "{GADGETS}?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=1&labelSelector=recorder%3Dnone"
        )).accept("application/json"))?;
        if answer.status == 429 {
            return Ok((answer, tries));
        }
    }
    bail!("no watch-list met a filling watch cache in 8 storage switches")
}

/// The priority level that rejects, its FlowSchema and the user's grant; then rounds of
/// concurrent LISTs until one is rejected. The rejection, the round and its rejections.
fn apf_rejection(ctx: &Ctx) -> Result<(Exchange, usize, usize)> {
    let flowcontrol = "/apis/flowcontrol.apiserver.k8s.io/v1";
    ctx.setup(json_request(
        "POST",
        &format!("{flowcontrol}/prioritylevelconfigurations"),
        "application/json",
        json!({"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "PriorityLevelConfiguration",
            "metadata": {"name": "recorder-reject"},
            "spec": {"type": "Limited", "limited": {"nominalConcurrencyShares": 1,
                "lendablePercent": 0, "limitResponse": {"type": "Reject"}}}}),
    ))?;
    ctx.setup(json_request(
        "POST",
        &format!("{flowcontrol}/flowschemas"),
        "application/json",
        json!({"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
            "metadata": {"name": "recorder-reject"},
            "spec": {"priorityLevelConfiguration": {"name": "recorder-reject"},
                "matchingPrecedence": 100, "distinguisherMethod": {"type": "ByUser"},
                "rules": [{"subjects": [{"kind": "User", "user": {"name": LIMITED_USER}}],
                    "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                        "namespaces": ["*"], "clusterScope": true}]}]}}),
    ))?;
    ctx.setup(json_request(
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        "application/json",
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": LIMITED_USER},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": LIMITED_USER}]}),
    ))?;
    // APF's configuration controller takes the new objects up asynchronously.
    sleep_ms(2000);
    for round in 1..=5 {
        let answers: Vec<Result<Exchange>> = std::thread::scope(|scope| {
            let senders: Vec<_> = (0..APF_ROUND)
                .map(|_| {
                    scope.spawn(|| {
                        ctx.client.send(
                            Request::get(GADGETS)
                                .accept("application/json")
                                .header("Impersonate-User", LIMITED_USER),
                        )
                    })
                })
                .collect();
            senders
                .into_iter()
                .map(|s| {
                    s.join()
                        .map_err(|_| anyhow::anyhow!("a LIST thread panicked"))?
                })
                .collect()
        });
        let answers = answers.into_iter().collect::<Result<Vec<_>>>()?;
        let rejected: Vec<Exchange> = answers.into_iter().filter(|a| a.status == 429).collect();
        eprintln!(
            "recorder:   round {round}: {} of {APF_ROUND} rejected",
            rejected.len()
        );
        if let Some(first) = rejected.first() {
            return Ok((first.clone(), round, rejected.len()));
        }
    }
    bail!("API Priority and Fairness rejected none of 5 rounds of {APF_ROUND} LISTs")
}
