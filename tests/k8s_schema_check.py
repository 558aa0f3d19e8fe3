#!/usr/bin/python3
# k8s_schema_check.py — validates Kubernetes manifests against a CustomResourceDefinition's
# own OpenAPI v3 schema (the CRD file as its project publishes it, kept in tests/data/k8s),
# as the API server would with strict field validation: every field the schema does not
# declare is an error (unless the schema preserves unknown fields there), then every type,
# enum, required field and bound. Usage: k8s_schema_check.py CRD.yaml MANIFEST.yaml
# Prints one line per problem (the field's path and what is wrong) and exits 1 when any.
import sys

import jsonschema
import yaml


def strict(schema):
    """The schema with additionalProperties: false wherever it lists properties and does
    not preserve unknown fields (the API server's strict field validation)."""
    if isinstance(schema, dict):
        out = {k: strict(v) for k, v in schema.items()}
        if "properties" in out and "additionalProperties" not in out and not out.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [strict(v) for v in schema]
    return schema


def main():
    crd_path, manifest_path = sys.argv[1], sys.argv[2]
    crd = yaml.safe_load(open(crd_path))
    group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
    schemas = {v["name"]: v["schema"]["openAPIV3Schema"] for v in crd["spec"]["versions"]}
    problems = []
    documents = [d for d in yaml.safe_load_all(open(manifest_path)) if d is not None]
    if not documents:
        problems.append(f"{manifest_path}: no object in the file")
    for doc in documents:
        api = doc.get("apiVersion", "")
        if doc.get("kind") != kind or not api.startswith(group + "/"):
            problems.append(f"{manifest_path}: {doc.get('kind')} {api}: not a {kind} of {group}")
            continue
        version = api.split("/", 1)[1]
        if version not in schemas:
            problems.append(f"{manifest_path}: {kind} version {version} not in the CRD (it has {', '.join(schemas)})")
            continue
        schema = strict(schemas[version])
        # metadata is checked by the API server itself, not by the CRD's schema.
        schema["properties"]["metadata"] = {"type": "object"}
        for e in sorted(jsonschema.Draft4Validator(schema).iter_errors(doc), key=lambda e: list(e.path)):
            path = ".".join(str(p) for p in e.path) or "(top)"
            problems.append(f"{manifest_path}: {kind} {path}: {e.message}")
    for p in problems:
        print(p)
    sys.exit(1 if problems else 0)


main()
