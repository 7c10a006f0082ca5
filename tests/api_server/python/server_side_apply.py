"""The Python kubernetes client's server_side_apply against svm-apiserver.

Usage: server_side_apply.py KUBECONFIG. Prints one JSON object with what it saw; the Rust
test (tests/api_server/python_client.rs) asserts on it.
"""
import json
import sys

from kubernetes import config, dynamic
from kubernetes.client.exceptions import ApiException


def main(kubeconfig):
    client = dynamic.DynamicClient(config.new_client_from_config(config_file=kubeconfig))
    seen = {}
    for kind, name in (("StorageVersionMigration", "py-ssa"), ("StorageState", "deployments.apps")):
        resource = client.resources.get(api_version="storagemigration.k8s.io/v1", kind=kind)
        body = {
            "apiVersion": "storagemigration.k8s.io/v1",
            "kind": kind,
            "metadata": {"name": name, "labels": {"owner": "python"}},
            "spec": {"resource": {"group": "apps", "resource": "deployments"}},
        }
        created = client.server_side_apply(resource, body=body, field_manager="python-client")
        entry = created.to_dict()["metadata"]["managedFields"][0]
        body["metadata"]["labels"]["owner"] = "someone-else"
        try:
            client.server_side_apply(resource, body=body, field_manager="other")
            conflict = None
        except ApiException as err:
            conflict = {"status": err.status, "body": json.loads(err.body)}
        forced = client.server_side_apply(
            resource, body=body, field_manager="other", force_conflicts=True
        )
        seen[kind] = {
            "manager": entry["manager"],
            "operation": entry["operation"],
            "fields": entry["fieldsV1"],
            "conflict": conflict,
            "forced_owner": forced.metadata.labels["owner"],
            "forced_managers": [m.manager for m in forced.metadata.managedFields],
        }
    print(json.dumps(seen))


if __name__ == "__main__":
    main(sys.argv[1])
