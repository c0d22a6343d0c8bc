#!/usr/bin/python3
"""Checks Kubernetes manifests against the API schema of Debian's python3-kubernetes.

Debian packages no manifest validator (kubeconform, kubeval), and `kubectl apply --dry-run`
needs an API server. python3-kubernetes (22.6, the Kubernetes 1.22 API) carries the schema as
its model classes: each class lists its fields (attribute_map) and their types (openapi_types).
This walks every document of the given files from its kind's class down and reports:

- a field that the API object does not have (a misspelled or misplaced key),
- a value of the wrong type (a string where a list or an integer belongs, ...),
- a required field that is missing (the model's constructor rejects it).

Quantities (resources.limits and requests) are declared strings there but the API also takes
numbers, so numbers pass for them. What it cannot check: semantic rules of the API server
(label selectors matching the template, valid DNS names, ...) and fields newer than 1.22.

Usage: deploy/k8s_schema_check.py FILE.yaml...   Exit status 0 when no problem was found.
"""

import datetime
import re
import sys

import yaml
from kubernetes import client

PRIMITIVES = {"str": str, "int": int, "bool": bool, "float": (int, float)}
QUANTITY_PARENTS = {"limits", "requests", "capacity", "allocatable"}


def class_for(document):
    group_version = document.get("apiVersion", "")
    version = group_version.split("/")[-1]
    name = version[0].upper() + version[1:] + document.get("kind", "")
    return name if hasattr(client.models, name) else None


def check(value, type_name, path, problems):
    if type_name == "object":
        return
    if type_name in PRIMITIVES:
        allowed = PRIMITIVES[type_name]
        if type_name == "str" and len(path) >= 2 and path[-2] in QUANTITY_PARENTS:
            allowed = (str, int, float)
        if isinstance(value, bool) and type_name != "bool":
            allowed = ()
        if not isinstance(value, allowed):
            problems.append("%s: %r is not %s" % (".".join(path), value, type_name))
        return
    if type_name in ("datetime", "date"):
        if not isinstance(value, (str, datetime.date)):
            problems.append("%s: %r is not a %s" % (".".join(path), value, type_name))
        return
    inner = re.fullmatch(r"list\[(.*)\]", type_name)
    if inner:
        if not isinstance(value, list):
            problems.append("%s: not a list" % ".".join(path))
            return
        for i, item in enumerate(value):
            check(item, inner.group(1), path[:-1] + ["%s[%d]" % (path[-1], i)], problems)
        return
    inner = re.fullmatch(r"dict\(str, (.*)\)", type_name)
    if inner:
        if not isinstance(value, dict):
            problems.append("%s: not a map" % ".".join(path))
            return
        for key, item in value.items():
            check(item, inner.group(1), path + [str(key)], problems)
        return
    model = getattr(client.models, type_name)
    if not isinstance(value, dict):
        problems.append("%s: not an object (%s)" % (".".join(path), type_name))
        return
    attributes = {json_name: attr for attr, json_name in model.attribute_map.items()}
    for key, item in value.items():
        if key not in attributes:
            problems.append("%s: %s has no field %r" % (".".join(path), type_name, key))
            continue
        check(item, model.openapi_types[attributes[key]], path + [key], problems)


def check_required(document, type_name, path, problems):
    """The models' constructors raise ValueError for a missing required field."""
    try:
        client.ApiClient()._ApiClient__deserialize(document, type_name)
    except (ValueError, TypeError) as error:
        problems.append("%s: %s" % (".".join(path), error))


def main(paths):
    problems, checked = [], 0
    for path in paths:
        with open(path) as f:
            documents = [d for d in yaml.safe_load_all(f) if d is not None]
        for index, document in enumerate(documents):
            where = ["%s#%d(%s)" % (path, index, document.get("kind"))]
            type_name = class_for(document)
            if type_name is None:
                problems.append("%s: unknown apiVersion/kind %s/%s" % (
                    where[0], document.get("apiVersion"), document.get("kind")))
                continue
            check(document, type_name, where, problems)
            check_required(document, type_name, where, problems)
            checked += 1
    for problem in problems:
        print(problem)
    print("%d documents checked against the Kubernetes %s API schema of python3-kubernetes "
          "%s: %d problems" % (checked, "1.22", client.__version__ if hasattr(client, "__version__")
                               else "", len(problems)))
    return 1 if problems or not checked else 0


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1:]))
