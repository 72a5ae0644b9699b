#!/usr/bin/python3
"""Validates CDI specs (JSON or YAML) against the CDI JSON schema (draft-07) and, because CDI
loaders reject unknown fields while the schema does not, against the list of known field names.
Usage: validate_cdi.py SCHEMA_DIR SPEC... or validate_cdi.py --equal A B; exit 0 when every spec is valid, 1 otherwise.
Run with Debian's /usr/bin/python3 (python3-jsonschema, python3-yaml)."""
import json
import pathlib
import sys

import jsonschema
import yaml

SPEC_KEYS = {"cdiVersion", "kind", "annotations", "devices", "containerEdits"}
DEVICE_KEYS = {"name", "annotations", "containerEdits"}
EDIT_KEYS = {"env", "deviceNodes", "mounts", "hooks", "netDevices", "intelRdt", "additionalGids"}
NODE_KEYS = {"path", "hostPath", "type", "major", "minor", "fileMode", "permissions", "uid", "gid"}
MOUNT_KEYS = {"hostPath", "containerPath", "type", "options"}
HOOK_KEYS = {"hookName", "path", "args", "env", "timeout"}
HOOK_NAMES = {"prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop"}


def strict(spec):
    errors = []

    def keys(obj, allowed, where):
        for k in obj:
            if k not in allowed:
                errors.append(f"{where}: unknown field {k!r}")

    def edits(e, where):
        keys(e, EDIT_KEYS, where)
        for i, n in enumerate(e.get("deviceNodes", [])):
            keys(n, NODE_KEYS, f"{where}.deviceNodes[{i}]")
            if not n["path"].startswith("/"):
                errors.append(f"{where}.deviceNodes[{i}]: path not absolute")
        for i, m in enumerate(e.get("mounts", [])):
            keys(m, MOUNT_KEYS, f"{where}.mounts[{i}]")
        for i, h in enumerate(e.get("hooks", [])):
            keys(h, HOOK_KEYS, f"{where}.hooks[{i}]")
            if h["hookName"] not in HOOK_NAMES:
                errors.append(f"{where}.hooks[{i}]: hookName {h['hookName']!r}")
            if not h["path"].startswith("/"):
                errors.append(f"{where}.hooks[{i}]: path not absolute")
        for i, v in enumerate(e.get("env", [])):
            if not isinstance(v, str) or "=" not in v:
                errors.append(f"{where}.env[{i}]: expected KEY=VALUE")

    keys(spec, SPEC_KEYS, "spec")
    if "containerEdits" in spec:
        edits(spec["containerEdits"], "containerEdits")
    names = set()
    for i, d in enumerate(spec.get("devices", [])):
        keys(d, DEVICE_KEYS, f"devices[{i}]")
        edits(d["containerEdits"], f"devices[{i}].containerEdits")
        if d["name"] in names:
            errors.append(f"devices[{i}]: duplicate name {d['name']!r}")
        names.add(d["name"])
    if not spec.get("devices"):
        errors.append("spec: no devices")
    return errors


def load(path):
    text = pathlib.Path(path).read_text()
    return json.loads(text) if path.endswith(".json") else yaml.safe_load(text)


def main():
    if sys.argv[1] == "--equal":  # validate_cdi.py --equal A B: same content (JSON or YAML)
        same = load(sys.argv[2]) == load(sys.argv[3])
        if not same:
            print(f"{sys.argv[2]} and {sys.argv[3]} differ")
        sys.exit(0 if same else 1)
    schema_dir = pathlib.Path(sys.argv[1]).resolve()
    schema = json.loads((schema_dir / "schema.json").read_text())
    resolver = jsonschema.RefResolver(base_uri=schema_dir.as_uri() + "/", referrer=schema)
    validator = jsonschema.Draft7Validator(schema, resolver=resolver)
    bad = 0
    for path in sys.argv[2:]:
        spec = load(path)
        errors = [f"{'/'.join(map(str, e.path))}: {e.message}" for e in validator.iter_errors(spec)]
        errors += strict(spec) if not errors else []
        for e in errors:
            print(f"{path}: {e}")
        bad += bool(errors)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
