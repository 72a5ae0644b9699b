#!/usr/bin/python3
"""Checks deploy/ (manifests, examples, Helm chart, Dockerfile) and docs/configuration.md against
the built kgpu binary, without a cluster, helm or docker.

Usage: check_deploy.py SOURCE_DIR KGPU_BINARY SIM_LIBRARY CHECK [ARG]
CHECK is one of:
  manifests            every YAML document in deploy/kubernetes and deploy/examples parses, has a
                       known kind/apiVersion and the fields the API server requires
  args SUBCOMMAND      every container of the DaemonSet (plain and Helm) running SUBCOMMAND passes
                       only flags `kgpu SUBCOMMAND --help` lists, and env vars it reads; then a dry
                       run (device-plugin: --check-config on the ConfigMap's file; labels: one
                       pass against the simulator into a temp dir; exporter: flag parse only)
  hostpaths SUBCOMMAND the host paths the SUBCOMMAND container mounts are the defaults in code
                       (read from --help), and what its flags point at is mounted
  dockerfile           deploy/Dockerfile's build stage runs scripts/setup and deploy/image-rootfs, its
                       image stage is FROM scratch with only that directory; the staged files are
                       exactly kgpu (stripped), every library `ldd` names (at the path ldd resolved)
                       and the loader, glibc's libraries for the driver, /etc/passwd and /etc/group,
                       dcgm-exporter's default counters (/etc/dcgm-exporter/default-counters.csv);
                       no shell; under 40 MB; as root, the binary runs chrooted in it
  image                the manifests run what the image has: entrypoint or command in the image,
                       args[0] a subcommand, runAsUser = the image's USER, no capabilities, read-only
                       root, no mount hiding the image's files; image tags = the binary's version
  helm                 Chart.yaml and values.yaml parse, templates have balanced {{ }} and
                       blocks, values.yaml defaults equal the plain manifests' settings
  configdoc            every flag of every subcommand's --help is in docs/configuration.md
  mps                  the mps-control-daemon DaemonSet (plain and Helm) is NVIDIA's, with kgpu's paths
  helm-prometheusrule  the chart's prometheusrule.yaml, rendered (a small Go-template renderer for
                       what the chart uses): nothing by default or without the exporter; enabled,
                       a PrometheusRule with additionalLabels whose spec is the groups of
                       deploy/monitoring/kgpu-alerts.rules.yaml (the chart's files/ copy is equal)
Exit 0 when the check passes; 1 with one line per problem on stderr otherwise.
Run with Debian's /usr/bin/python3 (python3-yaml)."""
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

import yaml

SRC = pathlib.Path(sys.argv[1])
KGPU = sys.argv[2]
SIM = sys.argv[3]
problems = []


def problem(msg):
    problems.append(msg)


# --------------------------------------------------------------------------------------------
# kgpu --help

def run(argv, env=None, timeout=60):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run(argv, capture_output=True, text=True, env=e, timeout=timeout)


def help_text(sub):
    """`kgpu <sub...> --help` output, or None when the subcommand does not exist."""
    r = run([KGPU, *sub.split(), "--help"])
    # An unknown subcommand may still print the top-level help with exit 0: check the Usage line.
    if r.returncode != 0 or not re.search(r"^Usage: \S+ " + re.escape(sub) + r" ", r.stdout, re.M):
        return None
    return r.stdout


def parse_help(text):
    """{long or short flag name: {"names": [...], "default": str|None, "env": [..], "desc": str}}"""
    options = {}
    section = None
    current = None
    for line in text.splitlines():
        if not line.strip():
            continue
        if not line.startswith(" "):
            section = line.strip().rstrip(":")
            current = None
            continue
        if section != "Options":
            continue
        stripped = line.strip()
        if stripped.startswith("-"):
            head, _, rest = stripped.partition(" ")
            names = [n for n in head.split(",") if n.startswith("-")]
            current = {"names": names, "default": None, "env": [], "desc": rest}
            m = re.match(r"\s*[A-Z]+(?::\S+)?=(\S+)", rest)
            if m:
                current["default"] = m.group(1)
            for n in names:
                options[n] = current
        elif current is not None:
            current["desc"] += " " + stripped
    for opt in options.values():
        opt["env"] = re.findall(r"\(Env:(\w+)\)|\[env (\w+)\]", opt["desc"])
        opt["env"] = [a or b for a, b in opt["env"]]
        if opt["default"] is None:
            m = re.search(r"\(default:? (/[^\s)]*|unix://[^\s)]*)\)", opt["desc"])
            if m:
                opt["default"] = m.group(1)
    return options


def subcommands(text):
    names, section = [], None
    for line in text.splitlines():
        if line and not line.startswith(" "):
            section = line.strip().rstrip(":")
        elif section == "Subcommands" and line.strip():
            names.append(line.split()[0])
    return names


def all_subcommands():
    """Every leaf-or-not subcommand path: ['info', 'cdi generate', ..., 'doctor', 'doctor compat']."""
    out = []

    def walk(prefix):
        text = help_text(prefix) if prefix else run([KGPU, "--help"]).stdout
        for s in subcommands(text):
            path = f"{prefix} {s}".strip()
            sub_text = help_text(path)
            if sub_text is None:
                continue
            if parse_help(sub_text).keys() - {"-h", "--help"} or not subcommands(sub_text):
                out.append(path)
            walk(path)

    walk("")
    return out


# --------------------------------------------------------------------------------------------
# manifests

def load_docs(path):
    try:
        return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    except yaml.YAMLError as e:
        problem(f"{path.relative_to(SRC)}: YAML does not parse: {e}")
        return []


def manifest_files():
    files = sorted((SRC / "deploy/kubernetes").glob("*.yaml")) + sorted((SRC / "deploy/examples").glob("*.yaml"))
    return [f for f in files if f.name != "kustomization.yaml"]


KINDS = {
    "Pod": "v1", "ConfigMap": "v1", "Service": "v1", "ServiceAccount": "v1", "Namespace": "v1",
    "ResourceQuota": "v1", "LimitRange": "v1",
    "DaemonSet": "apps/v1", "Deployment": "apps/v1",
    "RuntimeClass": "node.k8s.io/v1",
    "ServiceMonitor": "monitoring.coreos.com/v1", "PrometheusRule": "monitoring.coreos.com/v1",
}
NAMESPACED = {"Pod", "ConfigMap", "Service", "ServiceAccount", "ResourceQuota", "LimitRange", "DaemonSet",
              "Deployment", "ServiceMonitor", "PrometheusRule"}
GPU_RESOURCE = re.compile(r"^nvidia\.com/(gpu|gpu\.shared|mig-\d+g\.\d+gb(\+me)?)$")
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def pod_spec(doc):
    if doc["kind"] == "Pod":
        return doc.get("spec")
    return (doc.get("spec") or {}).get("template", {}).get("spec")


# The only kgpu steps that run privileged, as NVIDIA's: the MPS DaemonSet's shm mount (mount(2)
# with Bidirectional propagation, which Kubernetes allows privileged containers only) and its
# daemon (compute mode, MPS servers on every GPU).
MPS_PRIVILEGED = {"mps-control-daemon"}
# And the container-toolkit install (`kgpu runtime install`, kgpu-runtime-install DaemonSet): it
# writes the host's /usr/local/kgpu, /etc/containerd and /dev/char, and restarts containerd, as the
# GPU Operator's toolkit container does (privileged there too).
INSTALL_PRIVILEGED = (["runtime", "install"],)


def check_pod_spec(where, spec, plain_kgpu):
    if not isinstance(spec, dict) or not spec.get("containers"):
        problem(f"{where}: no containers")
        return
    volumes = {v.get("name"): v for v in spec.get("volumes", [])}
    for v in spec.get("volumes", []):
        if not DNS_LABEL.match(v.get("name", "")):
            problem(f"{where}: volume name {v.get('name')!r} is not a DNS label")
        if "hostPath" in v:
            hp = v["hostPath"]
            if not str(hp.get("path", "")).startswith("/"):
                problem(f"{where}: volume {v['name']}: hostPath.path must be absolute")
            if hp.get("type", "") not in ("", "DirectoryOrCreate", "Directory", "FileOrCreate", "File", "Socket",
                                          "CharDevice", "BlockDevice"):
                problem(f"{where}: volume {v['name']}: unknown hostPath type {hp.get('type')!r}")
    names = set()
    for c in spec.get("initContainers", []) + spec["containers"]:
        cw = f"{where}: container {c.get('name')!r}"
        if not DNS_LABEL.match(c.get("name", "")) or c["name"] in names:
            problem(f"{cw}: missing, invalid or duplicate name")
        names.add(c.get("name"))
        if not c.get("image"):
            problem(f"{cw}: no image")
        for m in c.get("volumeMounts", []):
            if m.get("name") not in volumes:
                problem(f"{cw}: volumeMount {m.get('name')!r} names no volume")
            if not str(m.get("mountPath", "")).startswith("/"):
                problem(f"{cw}: mountPath {m.get('mountPath')!r} is not absolute")
        res = c.get("resources", {})
        req, lim = res.get("requests", {}) or {}, res.get("limits", {}) or {}
        for r in set(req) | set(lim):
            if r.startswith("nvidia.com/"):
                if not GPU_RESOURCE.match(r):
                    problem(f"{cw}: unknown GPU resource {r!r}")
                if r in req and r in lim and str(req[r]) != str(lim[r]):
                    problem(f"{cw}: {r}: requests {req[r]} != limits {lim[r]} (extended resources need them equal)")
                if r in req and r not in lim:
                    problem(f"{cw}: {r}: requests without limits (the API server rejects it)")
        for e in c.get("env", []):
            if e.get("name") == "NVIDIA_VISIBLE_DEVICES" and not plain_kgpu:
                problem(f"{cw}: sets NVIDIA_VISIBLE_DEVICES by hand: it names host GPUs and bypasses the scheduler")
        if plain_kgpu:
            for kind in ("requests", "limits"):
                for r in ("cpu", "memory"):
                    if r not in (res.get(kind) or {}):
                        problem(f"{cw}: resources.{kind}.{r} missing")
            sc = c.get("securityContext", {})
            if sc.get("privileged") and (c.get("args") or [None])[0] in MPS_PRIVILEGED:
                continue  # mount(2) with Bidirectional propagation, compute mode: see check_mps
            if sc.get("privileged") and (c.get("args") or [])[:2] in INSTALL_PRIVILEGED:
                continue  # host files and containerd: see the comment at INSTALL_PRIVILEGED
            if sc.get("privileged"):
                problem(f"{cw}: privileged")
            if sc.get("allowPrivilegeEscalation") is not False:
                problem(f"{cw}: allowPrivilegeEscalation must be false")
            if sc.get("capabilities", {}).get("drop") != ["ALL"] or sc.get("capabilities", {}).get("add"):
                problem(f"{cw}: capabilities must drop ALL and add none")


def check_manifests():
    for f in manifest_files():
        rel = f.relative_to(SRC)
        docs = load_docs(f)
        if not docs:
            problem(f"{rel}: no YAML documents")
        for i, d in enumerate(docs):
            where = f"{rel}#{i}"
            if not isinstance(d, dict):
                problem(f"{where}: not a mapping")
                continue
            kind, api = d.get("kind"), d.get("apiVersion")
            if kind not in KINDS:
                problem(f"{where}: unknown kind {kind!r}")
                continue
            if api != KINDS[kind]:
                problem(f"{where}: {kind} needs apiVersion {KINDS[kind]}, has {api!r}")
            meta = d.get("metadata") or {}
            if not meta.get("name"):
                problem(f"{where}: metadata.name missing")
            where = f"{rel}: {kind} {meta.get('name')}"
            if kind not in NAMESPACED and "namespace" in meta:
                problem(f"{where}: cluster-scoped object with a namespace")
            in_kgpu = rel.parts[1] == "kubernetes"
            if in_kgpu and kind in NAMESPACED and meta.get("namespace") != "kube-system":
                problem(f"{where}: expected namespace kube-system")
            if kind in ("DaemonSet", "Deployment"):
                spec = d.get("spec") or {}
                sel = (spec.get("selector") or {}).get("matchLabels") or {}
                tl = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
                if not sel or any(tl.get(k) != v for k, v in sel.items()):
                    problem(f"{where}: selector.matchLabels {sel} does not match the template labels {tl}")
            if kind in ("Pod", "DaemonSet", "Deployment"):
                check_pod_spec(where, pod_spec(d), in_kgpu)
            if kind == "ResourceQuota":
                for k in (d.get("spec") or {}).get("hard", {}):
                    if k.startswith("nvidia.com/") or k.startswith("limits.nvidia.com/"):
                        problem(f"{where}: quota key {k!r} is never enforced: extended resources are "
                                "counted only as requests.<name>")
            if kind == "RuntimeClass" and not d.get("handler"):
                problem(f"{where}: handler missing")
            if kind == "ConfigMap" and not d.get("data"):
                problem(f"{where}: no data")
            if kind == "Service":
                ports = (d.get("spec") or {}).get("ports") or []
                if not ports or not (d.get("spec") or {}).get("selector"):
                    problem(f"{where}: needs ports and a selector")
    # The kustomization lists files that exist.
    kz = SRC / "deploy/kubernetes/kustomization.yaml"
    k = yaml.safe_load(kz.read_text())
    for r in k.get("resources", []):
        if not (kz.parent / r).is_file():
            problem(f"deploy/kubernetes/kustomization.yaml: resource {r} does not exist")
    # What the DaemonSet needs by issue #8.
    ds = daemonset()
    spec = pod_spec(ds)
    if spec.get("priorityClassName") != "system-node-critical":
        problem("DaemonSet: priorityClassName must be system-node-critical")
    if spec.get("runtimeClassName") != "nvidia":
        problem("DaemonSet: runtimeClassName must be nvidia")
    tol = {(t.get("key"), t.get("effect")) for t in spec.get("tolerations", [])}
    for want in (("nvidia.com/gpu", "NoSchedule"), ("CriticalAddonsOnly", None)):
        if want not in tol:
            problem(f"DaemonSet: toleration {want} missing")
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    keys = {e["key"] for t in terms for e in t["matchExpressions"]}
    if "nvidia.com/gpu.present" not in keys:
        problem("DaemonSet: node affinity on nvidia.com/gpu.present missing")
    for c in spec["containers"]:
        env = {e["name"]: e.get("value") for e in c.get("env", [])}
        # The device plugin also gets compute: nvidia-cuda-mps-control, to ask the MPS daemons.
        caps = "compute,utility" if c["args"][0] == "device-plugin" else "utility"
        if env.get("NVIDIA_VISIBLE_DEVICES") != "all" or env.get("NVIDIA_DRIVER_CAPABILITIES") != caps:
            problem(f"DaemonSet: container {c['name']}: needs NVIDIA_VISIBLE_DEVICES=all and "
                    f"NVIDIA_DRIVER_CAPABILITIES={caps}")
    exporter = [c for c in spec["containers"] if c["args"][0] == "exporter"]
    for c in exporter:
        for probe in ("livenessProbe", "readinessProbe"):
            if (c.get(probe) or {}).get("httpGet", {}).get("path") != "/health":
                problem(f"DaemonSet: exporter {probe} must GET /health")
    # Examples the issue names.
    kinds = {}
    for f in sorted((SRC / "deploy/examples").glob("*.yaml")):
        for d in load_docs(f):
            kinds.setdefault(d["kind"], []).append(d)
    if "ResourceQuota" not in kinds:
        problem("deploy/examples: no ResourceQuota example")
    requested = set()
    for d in kinds.get("Pod", []) + kinds.get("Deployment", []):
        for c in pod_spec(d)["containers"]:
            requested |= set((c.get("resources", {}).get("limits") or {}))
    if not any(r.startswith("nvidia.com/mig-") for r in requested):
        problem("deploy/examples: no MIG pod")


def daemonset():
    for d in load_docs(SRC / "deploy/kubernetes/daemonset.yaml"):
        if d.get("kind") == "DaemonSet":
            return d
    raise SystemExit("deploy/kubernetes/daemonset.yaml: no DaemonSet")


def mps_daemonset():
    for d in load_docs(SRC / "deploy/kubernetes/mps-control-daemon.yaml"):
        if d.get("kind") == "DaemonSet":
            return d
    raise SystemExit("deploy/kubernetes/mps-control-daemon.yaml: no DaemonSet")


def configmap_config():
    for d in load_docs(SRC / "deploy/kubernetes/configmap.yaml"):
        if d.get("kind") == "ConfigMap":
            return d["data"]["config.yaml"]
    raise SystemExit("deploy/kubernetes/configmap.yaml: no ConfigMap")


# --------------------------------------------------------------------------------------------
# container args

RUNTIME_ENV = {"NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "NVIDIA_DRIVER_ROOT", "NODE_NAME"}


def split_args(args):
    """[(flag, value or None)] from ['--a=1', '--b', '2', '--c'] (a value follows a flag when it does
    not start with '-')."""
    out, i = [], 0
    while i < len(args):
        a = args[i]
        if a.startswith("-"):
            if "=" in a:
                f, v = a.split("=", 1)
                out.append((f, v))
            elif i + 1 < len(args) and not args[i + 1].startswith("-"):
                out.append((a, args[i + 1]))
                i += 1
            else:
                out.append((a, None))
        i += 1
    return out


def containers_running(sub):
    """(where, container) of the plain DaemonSet running `kgpu <sub>`."""
    return [(f"daemonset.yaml: container {c['name']}", c) for c in pod_spec(daemonset())["containers"]
            if c.get("args", [None])[0] == sub]


def helm_args(sub):
    """The args lists of the Helm DaemonSet template for `sub` (template expressions kept)."""
    text = (SRC / "deploy/helm/kgpu/templates/daemonset.yaml").read_text()
    out = []
    for m in re.finditer(r"^(\s*)args:\n((?:\1  - .*\n)+)", text, re.M):
        items = [line.strip()[2:] for line in m.group(2).splitlines()]
        if items and items[0] == sub:
            out.append(items[1:])
    return out


def check_args(sub):
    text = help_text(sub)
    if text is None:
        problem(f"`kgpu {sub} --help` failed: the built binary has no `{sub}` subcommand yet")
        return
    opts = parse_help(text)
    env_known = {e for o in opts.values() for e in o["env"]}
    found = containers_running(sub)
    if not found:
        problem(f"daemonset.yaml: no container runs `kgpu {sub}`")
    for where, c in found:
        for flag, _ in split_args(c["args"][1:]):
            if flag not in opts:
                problem(f"{where}: `kgpu {sub}` has no flag {flag}")
        for e in c.get("env", []):
            if e["name"] not in env_known and e["name"] not in RUNTIME_ENV:
                problem(f"{where}: env {e['name']} is read neither by `kgpu {sub}` nor by the NVIDIA runtime")
    helm = helm_args(sub)
    if not helm:
        problem(f"helm daemonset.yaml: no container runs `kgpu {sub}`")
    for args in helm:
        plain_flags = [f for f, _ in split_args(found[0][1]["args"][1:])] if found else []
        helm_flags = [f for f, _ in split_args(args)]
        for flag in helm_flags:
            if flag not in opts:
                problem(f"helm daemonset.yaml: `kgpu {sub}` has no flag {flag}")
        if helm_flags != plain_flags:
            problem(f"helm daemonset.yaml: `{sub}` flags {helm_flags} differ from the plain manifest's {plain_flags}")
    # Dry runs with the real arguments, paths moved into a temp dir.
    with tempfile.TemporaryDirectory() as tmp:
        cfg = pathlib.Path(tmp, "config.yaml")
        cfg.write_text(configmap_config())
        for where, c in found:
            args = []
            for flag, value in split_args(c["args"][1:]):
                if flag == "--config-file":
                    value = str(cfg)
                elif flag == "--output-file":
                    value = str(pathlib.Path(tmp, "features.d", "kgpu"))
                    pathlib.Path(tmp, "features.d").mkdir(exist_ok=True)
                args.append(flag if value is None else f"{flag}={value}")
            if sub == "device-plugin":
                r = run([KGPU, sub, *args, "--check-config"])
                if r.returncode != 0:
                    problem(f"{where}: `kgpu device-plugin {' '.join(args)} --check-config` exit {r.returncode}: "
                            f"{r.stderr.strip()}")
                elif f"configFile: {cfg}" not in r.stdout:
                    problem(f"{where}: --check-config did not report the config file: {r.stdout}")
                # The commented time-slicing example, uncommented, is a valid config too.
                m = re.search(r"^# sharing:\n(?:#  .*\n)+", configmap_config(), re.M)
                if not m:
                    problem("configmap.yaml: no commented `# sharing:` example")
                    continue
                shared = pathlib.Path(tmp, "shared.yaml")
                shared.write_text(configmap_config() + re.sub(r"^# ", "", m.group(0), flags=re.M))
                r = run([KGPU, sub, "--config-file", str(shared), "--check-config"])
                if r.returncode != 0 or "sharing.timeSlicing: off" in r.stdout:
                    problem(f"configmap.yaml: the time-slicing example does not load: {r.stderr.strip()} {r.stdout}")
            elif sub == "labels":
                r = run([KGPU, sub, *args, "--oneshot", "--nvml-library", SIM],
                        env={"KGPU_SIM_NODE": str(SRC / "sim/nodes/dgx-h100.yaml")})
                out = pathlib.Path(tmp, "features.d", "kgpu")
                if r.returncode != 0 or "nvidia.com/gpu.present=true" not in (out.read_text() if out.exists() else ""):
                    problem(f"{where}: `kgpu labels {' '.join(args)} --oneshot` against the simulator: "
                            f"exit {r.returncode}: {r.stderr.strip()}")


# --------------------------------------------------------------------------------------------
# host paths

# Flags that name something on the host, per subcommand. The paths themselves come from --help.
HOST_FLAGS = {
    "device-plugin": ["--device-plugin-path", "--cdi-spec-dir"],
    "labels": ["--output-file"],
    "exporter": ["--pod-resources-kubelet-socket", "--proc-root", "--container-runtime-endpoint"],
}


def strip_unix(p):
    return p[len("unix://"):] if p.startswith("unix://") else p


def under(path, root):
    return path == root or path.startswith(root.rstrip("/") + "/")


def check_hostpaths(sub):
    text = help_text(sub)
    if text is None:
        problem(f"`kgpu {sub} --help` failed: the built binary has no `{sub}` subcommand yet")
        return
    opts = parse_help(text)
    spec = pod_spec(daemonset())
    volumes = {v["name"]: v for v in spec["volumes"]}
    for where, c in containers_running(sub):
        mounts = []  # (mountPath, hostPath or None)
        for m in c.get("volumeMounts", []):
            hp = volumes[m["name"]].get("hostPath", {}).get("path")
            mounts.append((m["mountPath"], hp))
        given = dict(split_args(c["args"][1:]))
        for flag in HOST_FLAGS[sub]:
            if flag not in opts:
                problem(f"{where}: `kgpu {sub}` has no flag {flag}")
                continue
            default = opts[flag]["default"]
            if not default:
                problem(f"{where}: `kgpu {sub} --help` shows no default for {flag}")
                continue
            default = strip_unix(default)
            value = strip_unix(given.get(flag) or default)
            # A file flag (socket, output file) is served by a mount of the file or of its directory.
            best = max((m for m in mounts if under(value, m[0])), key=lambda m: len(m[0]), default=None)
            if best is None or best[1] is None:
                problem(f"{where}: {flag}={value} is not on a hostPath mount")
                continue
            host = best[1] + value[len(best[0]):]
            if host != default:
                problem(f"{where}: {flag}={value} is host path {host}, but kgpu's default is {default}")
    # Every hostPath mount of the driver root keeps the same path inside (the driver root is a host path).
    for c in spec["containers"]:
        for m in c.get("volumeMounts", []):
            if m["name"] == "driver-root":
                hp = volumes[m["name"]]["hostPath"]["path"]
                if m["mountPath"] != hp or not m.get("readOnly"):
                    problem(f"daemonset.yaml: container {c['name']}: driver root {hp} must be mounted read-only "
                            f"at the same path, is at {m['mountPath']}")
    # Read-only where the issue says so.
    for c in spec["containers"]:
        for m in c.get("volumeMounts", []):
            hp = volumes[m["name"]].get("hostPath", {}).get("path")
            if hp in ("/proc", "/var/lib/kubelet/pod-resources") and not m.get("readOnly"):
                problem(f"daemonset.yaml: container {c['name']}: {hp} must be mounted read-only")


# --------------------------------------------------------------------------------------------
# Dockerfile and the image's files (deploy/image-rootfs)

FINAL_COPY = "COPY --from=build /out/rootfs/ /"
# Regular files deploy/image-rootfs adds besides the binary and ldd's libraries.
IMAGE_EXTRA_FILES = {"/etc/passwd", "/etc/group", "/etc/dcgm-exporter/default-counters.csv"}
# glibc libraries staged for the driver's libnvidia-ml.so.1 (DRIVER_NEEDS in deploy/image-rootfs).
DRIVER_NEEDS = {"libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1"}
# Loaded by kgpu with dlopen (ldd cannot see them), staged with what they link (DLOPENED in
# deploy/image-rootfs): the exporter's TLS and basic auth for --web-config-file.
DLOPENED = {"libssl.so.3": "the exporter's TLS", "libcrypt.so.1": "the exporter's basic auth"}
IMAGE_BUDGET = 40 * 1000 * 1000  # bytes, uncompressed


def dockerfile_stages():
    """[(FROM line, [instruction lines with continuations joined])] of deploy/Dockerfile."""
    stages = []
    lines = (SRC / "deploy/Dockerfile").read_text().splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        while line.endswith("\\") and i + 1 < len(lines):
            i += 1
            line = line[:-1] + " " + lines[i].strip()
        i += 1
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if line.startswith("FROM "):
            stages.append((line, []))
        elif stages:
            stages[-1][1].append(line)
    return stages


def image_config():
    """What the final stage of deploy/Dockerfile sets: {"ENTRYPOINT": [...], "CMD": [...], "USER": str, "ENV": {...}}.
    scripts/build-image builds this stage as it is, so it is the image's config either way."""
    import json
    cfg = {"ENV": {}}
    for line in dockerfile_stages()[-1][1]:
        word, _, rest = line.partition(" ")
        if word in ("ENTRYPOINT", "CMD"):
            try:
                cfg[word] = json.loads(rest)
            except ValueError:
                problem(f"deploy/Dockerfile: {word} must be the exec (JSON) form: there is no shell in the image")
        elif word == "USER":
            cfg["USER"] = rest.strip()
        elif word == "ENV":
            k, _, v = rest.partition("=")
            cfg["ENV"][k.strip()] = v.strip()
    return cfg


def stage_rootfs(tmp):
    """Runs deploy/image-rootfs for the built binary; returns the staged directory."""
    out = pathlib.Path(tmp, "rootfs")
    r = run([str(SRC / "deploy/image-rootfs"), KGPU, str(out)])
    if r.returncode != 0:
        problem(f"deploy/image-rootfs {KGPU}: exit {r.returncode}: {r.stderr.strip()}")
        return None
    return out


def in_image(root, path, depth=0):
    """Resolves `path` inside the image root the way the kernel would (symlinks relative to the image);
    returns the host path of the final file, or None when it does not exist in the image."""
    cur = pathlib.PurePosixPath("/")
    parts = list(pathlib.PurePosixPath(path).parts[1:])
    while parts:
        if depth > 40:
            return None
        part = parts.pop(0)
        nxt = cur / part
        host = pathlib.Path(str(root) + str(nxt))
        if host.is_symlink():
            target = os.readlink(host)
            base = pathlib.PurePosixPath("/") if target.startswith("/") else cur
            rest = pathlib.PurePosixPath(os.path.normpath(str(base / target)))
            parts = list(rest.parts[1:]) + parts
            cur = pathlib.PurePosixPath("/")
            depth += 1
            continue
        if not host.exists():
            return None
        cur = nxt
    return pathlib.Path(str(root) + str(cur))


def ldd_paths():
    """[(name, path)] of `ldd KGPU` (the loader as (path, path)); problems for 'not found'."""
    out = []
    for line in run(["ldd", KGPU]).stdout.splitlines():
        if "not found" in line:
            problem(f"ldd {KGPU}: {line.strip()}")
        m = re.match(r"\s*(\S+) => (/\S+)", line) or re.match(r"\s*(/\S+) \(", line)
        if m:
            out.append((m.group(1), m.group(m.lastindex)))
    return out


def check_dockerfile():
    stages = dockerfile_stages()
    if len(stages) != 2:
        problem(f"deploy/Dockerfile: expected 2 stages (build, image), found {len(stages)}")
        return
    (build_from, build), (final_from, final) = stages
    text = (SRC / "deploy/Dockerfile").read_text()
    if not re.search(r"^ARG DEBIAN_IMAGE=debian:bookworm\b", text, re.M) or "${DEBIAN_IMAGE}" not in build_from:
        problem("deploy/Dockerfile: the build stage must be FROM ${DEBIAN_IMAGE} (ARG DEBIAN_IMAGE=debian:bookworm), "
                "so a registry mirror can be passed as a build argument")
    runs = " ".join(l for l in build if l.startswith("RUN "))
    if "scripts/setup" not in runs:
        problem("deploy/Dockerfile: the build stage does not run scripts/setup (what CI runs)")
    if "deploy/image-rootfs build/release/kgpu /out/rootfs" not in runs:
        problem("deploy/Dockerfile: the build stage does not stage /out/rootfs with deploy/image-rootfs "
                "(scripts/build-image stages the image's files with it too)")
    if "chroot /out/rootfs /usr/bin/kgpu" not in runs:
        problem("deploy/Dockerfile: the build stage does not run the staged binary in the staged root (chroot)")
    if final_from.strip() != "FROM scratch":
        problem(f"deploy/Dockerfile: the image stage must be FROM scratch, is {final_from!r}")
    words = [l.split()[0] for l in final]
    if [l for l in final if l.startswith("COPY")] != [FINAL_COPY]:
        problem(f"deploy/Dockerfile: the image stage must have exactly one COPY, {FINAL_COPY!r} "
                "(scripts/build-image replaces it with its own staged directory)")
    for w in words:
        if w not in ("COPY", "ENV", "USER", "ENTRYPOINT", "CMD", "LABEL", "WORKDIR"):
            problem(f"deploy/Dockerfile: {w} in the image stage (no shell in the image; scripts/build-image "
                    "builds only metadata instructions and the COPY)")
    cfg = image_config()
    if cfg.get("ENTRYPOINT") != ["/usr/bin/kgpu"]:
        problem(f"deploy/Dockerfile: ENTRYPOINT must be [\"/usr/bin/kgpu\"], is {cfg.get('ENTRYPOINT')}")
    if "/usr/bin" not in cfg["ENV"].get("PATH", "").split(":"):
        problem("deploy/Dockerfile: PATH must contain /usr/bin (kgpu on PATH)")
    # The staged files: every library ldd names, at the path ldd resolved, plus the loader.
    with tempfile.TemporaryDirectory() as tmp:
        root = stage_rootfs(tmp)
        if root is None:
            return
        wanted = set()
        for name, path in ldd_paths():
            found = in_image(root, path)
            if found is None or not found.is_file():
                problem(f"image: {path} ({name}, from ldd {KGPU}) is not in the image")
                continue
            if found.read_bytes() != pathlib.Path(os.path.realpath(path)).read_bytes():
                problem(f"image: {path} differs from this machine's {os.path.realpath(path)}")
            wanted.add(found)
        interp = re.search(r"Requesting program interpreter: (\S+)\]", run(["readelf", "-l", KGPU]).stdout)
        if not interp or in_image(root, interp.group(1)) is None:
            problem(f"image: the dynamic loader {interp.group(1) if interp else '?'} is not in the image")
        else:
            wanted.add(in_image(root, interp.group(1)))
        libc = dict(ldd_paths()).get("libc.so.6", "/lib/x86_64-linux-gnu/libc.so.6")
        for name in DRIVER_NEEDS:
            f = in_image(root, os.path.join(os.path.dirname(libc), name))
            if f is None:
                problem(f"image: {name} (glibc, linked by the driver's libnvidia-ml.so.1) is missing")
            else:
                wanted.add(f)
        for name, why in DLOPENED.items():
            path = os.path.join(os.path.dirname(libc), name)
            f = in_image(root, path)
            if f is None:
                problem(f"image: {name} ({why}, loaded with dlopen) is missing")
                continue
            wanted.add(f)
            for dep in re.findall(r"=> (/\S+)", run(["ldd", path]).stdout):
                d = in_image(root, dep)
                if d is None:
                    problem(f"image: {dep} (linked by {name}) is missing")
                else:
                    wanted.add(d)
        kgpu = in_image(root, "/usr/bin/kgpu")
        if kgpu is None:
            problem("image: /usr/bin/kgpu is missing")
            return
        wanted.add(kgpu)
        wanted |= {pathlib.Path(str(root) + p) for p in IMAGE_EXTRA_FILES}
        # dcgm-exporter's default counters where its Helm chart's `-f` points: what the binary serves.
        counters = root / "etc/dcgm-exporter/default-counters.csv"
        if not counters.is_file():
            problem("image: /etc/dcgm-exporter/default-counters.csv is missing")
        elif counters.read_text() != run([KGPU, "exporter", "--print-default-counters"]).stdout:
            problem("image: /etc/dcgm-exporter/default-counters.csv is not `kgpu exporter --print-default-counters`")
        total = 0
        for f in sorted(root.rglob("*")):
            rel = "/" + str(f.relative_to(root))
            if f.is_symlink():
                target = in_image(root, rel)
                if target is None:
                    problem(f"image: {rel} is a dangling symlink")
                elif rel.startswith("/usr/bin/") and target != kgpu:
                    problem(f"image: {rel} is a symlink to something other than /usr/bin/kgpu")
                elif rel.startswith("/usr/bin/"):
                    sub = f.name.removeprefix("kgpu-")
                    if help_text(sub) is None:
                        problem(f"image: /usr/bin/{f.name} names no subcommand of the binary")
                continue
            if f.is_dir():
                continue
            total += f.stat().st_size
            if f not in wanted:
                problem(f"image: {rel} is neither kgpu, a library ldd names, the loader nor one of {sorted(IMAGE_EXTRA_FILES)}")
            if f.stat().st_mode & 0o6000:
                problem(f"image: {rel} is setuid or setgid")
        for shell in ("/bin/sh", "/bin/bash", "/usr/bin/sh", "/usr/bin/apt-get", "/usr/bin/dpkg"):
            if in_image(root, shell) is not None:
                problem(f"image: {shell} is in the image")
        if run(["strip", "--strip-unneeded", "-o", os.devnull, str(kgpu)]).returncode != 0 or \
                ".debug_info" in run(["readelf", "-S", str(kgpu)]).stdout:
            problem("image: /usr/bin/kgpu is not stripped")
        if total >= IMAGE_BUDGET:
            problem(f"image: {total} bytes uncompressed, over the {IMAGE_BUDGET} budget")
        # The loader finds every library from the image alone (no ld.so.cache, no host paths).
        if os.geteuid() == 0:
            r = run(["chroot", str(root), "/usr/bin/kgpu", "--version"])
            if r.returncode != 0:
                problem(f"image: `chroot <rootfs> /usr/bin/kgpu --version` exit {r.returncode}: {r.stderr.strip()}")


def image_user_ids():
    user = image_config().get("USER", "0")
    uid, _, gid = user.partition(":")
    return uid, gid or uid


def check_image():
    """The manifests run what the image has: the entrypoint (or command) is in the image, every
    container's first argument is a subcommand of the binary, the user is the image's, no
    capabilities, and no mount hides the image's own files."""
    cfg = image_config()
    uid, gid = image_user_ids()
    if not uid.isdigit():
        problem(f"deploy/Dockerfile: USER {uid} must be numeric (runAsNonRoot checks need a uid)")
    with tempfile.TemporaryDirectory() as tmp:
        root = stage_rootfs(tmp)
        if root is None:
            return
        passwd = {l.split(":")[2] for l in (root / "etc/passwd").read_text().splitlines() if l.count(":") >= 6}
        if uid not in passwd:
            problem(f"image: USER {uid} has no /etc/passwd entry")
        groups = {l.split(":")[2] for l in (root / "etc/group").read_text().splitlines() if l.count(":") >= 3}
        if gid not in groups:
            problem(f"image: USER group {gid} has no /etc/group entry")
        image_files = ["/" + str(f.relative_to(root)) for f in root.rglob("*") if not f.is_dir() or f.is_symlink()]
        for where, spec in (("daemonset.yaml", pod_spec(daemonset())),
                            ("mps-control-daemon.yaml", pod_spec(mps_daemonset()))):
            for c in spec.get("initContainers", []) + spec["containers"]:
                cw = f"{where}: container {c['name']}"
                command = c.get("command") or cfg.get("ENTRYPOINT")
                if not command or in_image(root, command[0]) is None:
                    problem(f"{cw}: runs {command}, which is not in the image")
                elif in_image(root, command[0]) != in_image(root, "/usr/bin/kgpu"):
                    problem(f"{cw}: runs {command[0]}, not kgpu (the image has no other program)")
                args = c.get("args") or []
                if not args or help_text(args[0]) is None:
                    problem(f"{cw}: args {args[:1]} name no kgpu subcommand (every step must be one: no shell)")
                sc = c.get("securityContext", {})
                if str(sc.get("runAsUser", uid)) != uid:
                    problem(f"{cw}: runAsUser {sc.get('runAsUser')} but the image's USER is {uid}")
                if uid == "0" and sc.get("runAsNonRoot"):
                    problem(f"{cw}: runAsNonRoot with an image that runs as root")
                if sc.get("privileged") and args[:1] and args[0] in MPS_PRIVILEGED:
                    pass  # privileged has every capability (check_mps says why it must be)
                elif sc.get("capabilities", {}).get("drop") != ["ALL"] or sc.get("capabilities", {}).get("add"):
                    problem(f"{cw}: capabilities must drop ALL and add none")
                if not sc.get("readOnlyRootFilesystem"):
                    problem(f"{cw}: readOnlyRootFilesystem must be true (the image needs no writes)")
                for m in c.get("volumeMounts", []):
                    hidden = [f for f in image_files if under(f, m["mountPath"])]
                    if hidden:
                        problem(f"{cw}: mount {m['name']} at {m['mountPath']} hides the image's {hidden[:3]}")
        # The Helm chart runs the same image the same way.
        helpers = (SRC / "deploy/helm/kgpu/templates/_helpers.tpl").read_text()
        m = re.search(r'define "kgpu.securityContext".*?\n(.*?)\{\{- end', helpers, re.S)
        helm_sc = yaml.safe_load(m.group(1)) if m else {}
        plain_sc = pod_spec(daemonset())["containers"][0]["securityContext"]
        if helm_sc != plain_sc:
            problem(f"helm kgpu.securityContext {helm_sc} != the plain DaemonSet's {plain_sc}")
        dtmpl = (SRC / "deploy/helm/kgpu/templates/daemonset.yaml").read_text()
        if re.search(r"^\s+command:", dtmpl, re.M):
            problem("helm daemonset.yaml: a container sets command: the image's ENTRYPOINT is the binary")
        n = dtmpl.count('securityContext:\n            {{- include "kgpu.securityContext" . | nindent 12 }}')
        if n < len(pod_spec(daemonset())["containers"]):
            problem(f"helm daemonset.yaml: {n} containers include kgpu.securityContext, the plain DaemonSet has "
                    f"{len(pod_spec(daemonset())['containers'])}")
    # The image's name and tag: the manifests and the chart run kgpu:<the binary's version>.
    version = run([KGPU, "--version"]).stdout.strip()
    for c in [c for ds in (daemonset(), mps_daemonset())
              for c in pod_spec(ds).get("initContainers", []) + pod_spec(ds)["containers"]]:
        if c["image"] != f"kgpu:{version}":
            problem(f"daemonset.yaml: container {c['name']}: image {c['image']}, but scripts/build-image names "
                    f"it kgpu:{version}")
    k = yaml.safe_load((SRC / "deploy/kubernetes/kustomization.yaml").read_text())
    for img in k.get("images", []):
        if img.get("name") == "kgpu" and str(img.get("newTag")) != version:
            problem(f"kustomization.yaml: newTag {img.get('newTag')} != {version}")
    if str(values()["image"]["tag"]) != version:
        problem(f"values.yaml: image.tag {values()['image']['tag']} != {version}")


# --------------------------------------------------------------------------------------------
# Helm chart

def check_template_syntax(path):
    text = path.read_text()
    rel = path.relative_to(SRC)
    if text.count("{{") != text.count("}}"):
        problem(f"{rel}: {text.count('{{')} '{{{{' but {text.count('}}')} '}}}}'")
    depth = []
    for m in re.finditer(r"\{\{-?\s*(.*?)\s*-?\}\}", text, re.S):
        action = m.group(1)
        word = action.split()[0] if action.split() else ""
        line = text.count("\n", 0, m.start()) + 1
        if word in ("if", "with", "range", "define", "block"):
            depth.append((word, line))
        elif word == "end":
            if not depth:
                problem(f"{rel}:{line}: {{{{ end }}}} without a block")
            else:
                depth.pop()
        elif word in ("else",) and not depth:
            problem(f"{rel}:{line}: else outside a block")
        for ref in re.findall(r"\.Values\.([\w.]+)", action):
            node = values()
            for part in ref.split("."):
                if not isinstance(node, dict) or part not in node:
                    problem(f"{rel}:{line}: .Values.{ref} is not in values.yaml")
                    break
                node = node[part]
        for name in re.findall(r'include "([\w.]+)"', action):
            if name not in helper_names():
                problem(f"{rel}:{line}: include of undefined template {name!r}")
    for word, line in depth:
        problem(f"{rel}:{line}: {{{{ {word} }}}} is never closed")


_values = None


def values():
    global _values
    if _values is None:
        _values = yaml.safe_load((SRC / "deploy/helm/kgpu/values.yaml").read_text())
    return _values


def helper_names():
    return set(re.findall(r'define "([\w.]+)"', (SRC / "deploy/helm/kgpu/templates/_helpers.tpl").read_text()))


def check_helm():
    chart_dir = SRC / "deploy/helm/kgpu"
    chart = yaml.safe_load((chart_dir / "Chart.yaml").read_text())
    for k in ("apiVersion", "name", "version", "appVersion"):
        if not chart.get(k):
            problem(f"Chart.yaml: {k} missing")
    if chart.get("apiVersion") != "v2" or chart.get("name") != "kgpu":
        problem("Chart.yaml: expected apiVersion v2 and name kgpu")
    cmake = (SRC / "CMakeLists.txt").read_text()
    m = re.search(r"project\(kgpu VERSION (\S+)", cmake)
    if m and str(chart.get("appVersion")) != m.group(1):
        problem(f"Chart.yaml: appVersion {chart.get('appVersion')} != the project version {m.group(1)}")
    templates = sorted((chart_dir / "templates").iterdir())
    for t in templates:
        if t.suffix in (".yaml", ".tpl", ".txt"):
            check_template_syntax(t)
    v = values()
    # values.yaml defaults = the plain manifests.
    ds = daemonset()
    spec = pod_spec(ds)
    by_sub = {c["args"][0]: c for c in spec["containers"]}
    image = by_sub["device-plugin"]["image"]
    if f"{v['image']['repository']}:{v['image']['tag']}" != image:
        problem(f"values.yaml: image {v['image']['repository']}:{v['image']['tag']} != manifests' {image}")
    if v["image"]["pullPolicy"] != by_sub["device-plugin"].get("imagePullPolicy"):
        problem("values.yaml: image.pullPolicy differs from the manifests")
    if v["namespace"] != ds["metadata"]["namespace"]:
        problem("values.yaml: namespace differs from the manifests")
    if v["priorityClassName"] != spec["priorityClassName"]:
        problem("values.yaml: priorityClassName differs")
    if v["runtimeClass"]["name"] != spec["runtimeClassName"]:
        problem("values.yaml: runtimeClass.name differs")
    if v["tolerations"] != spec["tolerations"]:
        problem(f"values.yaml: tolerations {v['tolerations']} != {spec['tolerations']}")
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    keys = [t["matchExpressions"][0]["key"] for t in terms]
    if v["nodeAffinityLabels"] != keys:
        problem(f"values.yaml: nodeAffinityLabels {v['nodeAffinityLabels']} != {keys}")
    for key, sub in (("devicePlugin", "device-plugin"), ("exporter", "exporter"), ("labels", "labels")):
        if v[key]["resources"] != by_sub[sub]["resources"]:
            problem(f"values.yaml: {key}.resources {v[key]['resources']} != {by_sub[sub]['resources']}")
    exp = dict(split_args(by_sub["exporter"]["args"][1:]))
    if f":{v['exporter']['port']}" != exp.get("--address"):
        problem("values.yaml: exporter.port differs from --address")
    if str(v["exporter"]["collectIntervalMs"]) != exp.get("--collect-interval"):
        problem("values.yaml: exporter.collectIntervalMs differs from --collect-interval")
    if v["exporter"]["containerRuntimeEndpoint"] != exp.get("--container-runtime-endpoint"):
        problem("values.yaml: exporter.containerRuntimeEndpoint differs")
    lab = dict(split_args(by_sub["labels"]["args"][1:]))
    if v["labels"]["sleepInterval"] != lab.get("--sleep-interval"):
        problem("values.yaml: labels.sleepInterval differs from --sleep-interval")
    cfg = yaml.safe_load(configmap_config())
    if v["migStrategy"] != cfg["flags"]["migStrategy"]:
        problem("values.yaml: migStrategy differs from the ConfigMap")
    if v["failOnInitError"] != cfg["flags"]["failOnInitError"]:
        problem("values.yaml: failOnInitError differs from the ConfigMap")
    if v["health"] != cfg.get("health"):
        problem(f"values.yaml: health {v['health']} != the ConfigMap's {cfg.get('health')}")
    if (v["sharing"] or None) != cfg.get("sharing"):
        problem("values.yaml: sharing differs from the ConfigMap")
    volumes = {x["name"]: x for x in spec["volumes"]}
    if v["driverRootMount"] != volumes["driver-root"]["hostPath"]["path"]:
        problem("values.yaml: driverRootMount differs from the manifests' driver-root volume")
    # The Helm ConfigMap renders the same plain-config lines (template lines aside).
    tmpl = (chart_dir / "templates/configmap.yaml").read_text()
    for line in configmap_config().splitlines():
        s = line.strip()
        if s and not s.startswith("#") and ":" in s and s.split(":")[0] in ("passDeviceSpecs", "deviceListStrategy",
                                                                             "deviceIDStrategy", "version"):
            if s not in tmpl:
                problem(f"helm configmap.yaml: lacks {s!r} of the plain ConfigMap")
    # Every hostPath of the plain DaemonSet appears in the Helm one.
    dtmpl = (chart_dir / "templates/daemonset.yaml").read_text()
    for vol in spec["volumes"]:
        p = vol.get("hostPath", {}).get("path")
        templated = (v["driverRootMount"], strip_unix(v["exporter"]["containerRuntimeEndpoint"]), v["mps"]["root"],
                     v["mps"]["root"] + "/shm")
        if p and p not in dtmpl and p not in templated:
            problem(f"helm daemonset.yaml: hostPath {p} of the plain manifest is missing")



# A small renderer for the Go templates the chart uses (there is no helm here): text/template's
# actions (if/with/else/end, define/include, {{- -}} trimming, pipelines) and the few Sprig/Helm
# functions the templates call. Anything else is an error naming the template and the action, so
# a template that starts using more fails here rather than rendering wrong.
class TemplateError(Exception):
    pass


def _tokens(action):
    return re.findall(r'"(?:[^"\\]|\\.)*"|\(|\)|\||[^\s()|]+', action)


class Chart:
    def __init__(self, chart_dir, values_overrides=None):
        self.dir = chart_dir
        self.meta = yaml.safe_load((chart_dir / "Chart.yaml").read_text())
        self.values = yaml.safe_load((chart_dir / "values.yaml").read_text())
        for path, value in (values_overrides or {}).items():  # --set a.b.c=value
            node = self.values
            *parents, last = path.split(".")
            for part in parents:
                node = node.setdefault(part, {})
            node[last] = value
        self.root = {"Values": self.values, "Release": {"Name": "kgpu", "Namespace": self.values.get("namespace")},
                     "Chart": {"Name": self.meta["name"], "Version": self.meta["version"],
                               "AppVersion": self.meta["appVersion"]},
                     "Files": {"Get": lambda path: (chart_dir / path).read_text()}}
        self.defines = {}
        for t in sorted((chart_dir / "templates").glob("*.tpl")):
            self._parse(t.read_text(), t.name)

    def _parse(self, text, name):
        """Text and actions as a tree of ("text", s) / ("action", a) / (block, arg, body, else_body)."""
        parts = []
        pos = 0
        for m in re.finditer(r"\{\{(-?)\s*(.*?)\s*(-?)\}\}", text, re.S):
            before = text[pos:m.start()]
            if m.group(1):
                before = before.rstrip()
            if parts and parts[-1][0] == "trim":
                before = before.lstrip()
                parts.pop()
            parts.append(("text", before))
            parts.append(("action", m.group(2)))
            if m.group(3):
                parts.append(("trim", ""))
            pos = m.end()
        tail = text[pos:]
        if parts and parts[-1][0] == "trim":
            tail = tail.lstrip()
            parts.pop()
        parts.append(("text", tail))
        stack = [("root", None, [], None)]
        for kind, value in parts:
            if kind == "text":
                stack[-1][2].append(("text", value))
                continue
            if value.startswith("/*"):
                continue
            word = value.split()[0]
            if word in ("if", "with", "define"):
                stack.append((word, value[len(word):].strip(), [], None))
            elif word == "else":
                block = stack.pop()
                stack.append((block[0], block[1], block[2], []))
            elif word == "end":
                block = stack.pop()
                if block[0] == "define":
                    self.defines[block[1].strip('"')] = block[2]
                else:
                    node = (block[0], block[1], block[2], block[3] or [])
                    (stack[-1][3] if stack[-1][3] is not None else stack[-1][2]).append(node)
            else:
                (stack[-1][3] if stack[-1][3] is not None else stack[-1][2]).append(("action", value))
        if len(stack) != 1:
            raise TemplateError(f"{name}: unclosed {stack[-1][0]}")
        return stack[0][2]

    def _value(self, token, dot):
        if token.startswith('"'):
            return yaml.safe_load(token)
        if re.fullmatch(r"-?\d+", token):
            return int(token)
        if token == ".":
            return dot
        if token.startswith(".") or token.startswith("$."):
            node = self.root if token.startswith("$") else dot
            for part in token.lstrip("$").strip(".").split("."):
                if not isinstance(node, dict) or part not in node:
                    raise TemplateError(f"{token}: no field {part}")
                node = node[part]
            return node
        raise TemplateError(f"unsupported operand {token}")

    def _call(self, words, dot, piped):
        args = [self._value(w, dot) for w in words[1:]] + piped
        fn = words[0]
        if not (fn.startswith(".") or fn.startswith('"') or fn == "$") and fn not in self.FUNCS:
            raise TemplateError(f"unsupported function {fn}")
        if fn in self.FUNCS:
            return self.FUNCS[fn](self, *args)
        value = self._value(fn, dot)
        return value(*args) if callable(value) else value

    def _pipeline(self, action, dot):
        out = []
        for command in " ".join(_tokens(action)).split(" | "):
            out = [self._call(_tokens(command), dot, out)]
        return out[0]

    @staticmethod
    def _truthy(v):
        return bool(v)

    def _exec(self, nodes, dot):
        out = []
        for node in nodes:
            if node[0] == "text":
                out.append(node[1])
            elif node[0] == "action":
                v = self._pipeline(node[1], dot)
                out.append("" if v is None else str(v))
            elif node[0] == "if":
                out.append(self._exec(node[2] if self._truthy(self._pipeline(node[1], dot)) else node[3], dot))
            elif node[0] == "with":
                v = self._pipeline(node[1], dot)
                out.append(self._exec(node[2], v) if self._truthy(v) else self._exec(node[3], dot))
        return "".join(out)

    def _to_yaml(self, v):
        return yaml.safe_dump(v, default_flow_style=False, sort_keys=True).rstrip("\n")

    FUNCS = {
        "and": lambda self, *a: next((x for x in a if not x), a[-1]),
        "or": lambda self, *a: next((x for x in a if x), a[-1]),
        "not": lambda self, a: not a,
        "include": lambda self, name, dot: self._exec(self.defines[name], dot),
        "nindent": lambda self, n, s: "\n" + "\n".join(" " * n + line for line in str(s).split("\n")),
        "indent": lambda self, n, s: "\n".join(" " * n + line for line in str(s).split("\n")),
        "toYaml": lambda self, v: self._to_yaml(v),
        "quote": lambda self, v: '"' + str(v) + '"',
        "printf": lambda self, fmt, *a: re.sub(r"%[sdv]", "{}", fmt).format(*a),
    }

    def render(self, template):
        path = self.dir / "templates" / template
        try:
            return self._exec(self._parse(path.read_text(), template), self.root)
        except (TemplateError, KeyError, TypeError) as e:
            raise TemplateError(f"{path.relative_to(SRC)}: {e}") from e


def check_helm_prometheusrule():
    """The chart's PrometheusRule, rendered: off by default; on, the rules file's groups as its spec."""
    chart_dir = SRC / "deploy/helm/kgpu"
    plain = SRC / "deploy/monitoring/kgpu-alerts.rules.yaml"
    copy = chart_dir / "files/kgpu-alerts.rules.yaml"
    if not copy.exists() or copy.read_text() != plain.read_text():
        problem(f"{copy.relative_to(SRC)} differs from {plain.relative_to(SRC)}: copy it over")
    try:
        for overrides in ({}, {"exporter.enabled": False, "exporter.prometheusRule.enabled": True}):
            out = Chart(chart_dir, overrides).render("prometheusrule.yaml")
            if out.strip():
                problem(f"helm prometheusrule.yaml renders an object with {overrides or 'the defaults'}:\n{out}")
        on = {"exporter.prometheusRule.enabled": True, "exporter.prometheusRule.additionalLabels": {"release": "prom"}}
        out = Chart(chart_dir, on).render("prometheusrule.yaml")
    except TemplateError as e:
        problem(str(e))
        return
    docs = [d for d in yaml.safe_load_all(out) if d]
    if len(docs) != 1:
        problem(f"helm prometheusrule.yaml (enabled) renders {len(docs)} documents:\n{out}")
        return
    doc = docs[0]
    if doc.get("apiVersion") != "monitoring.coreos.com/v1" or doc.get("kind") != "PrometheusRule":
        problem(f"helm prometheusrule.yaml: {doc.get('apiVersion')} {doc.get('kind')}, expected a PrometheusRule")
    meta = doc.get("metadata", {})
    if meta.get("namespace") != values()["namespace"]:
        problem(f"helm prometheusrule.yaml: namespace {meta.get('namespace')} != values' {values()['namespace']}")
    labels = meta.get("labels") or {}
    if labels.get("release") != "prom" or labels.get("app.kubernetes.io/name") != "kgpu":
        problem(f"helm prometheusrule.yaml: labels {labels} lack additionalLabels (release: prom) or the chart's")
    if doc.get("spec") != yaml.safe_load(plain.read_text()):
        problem(f"helm prometheusrule.yaml: spec is not the groups of {plain.relative_to(SRC)}")
    cr = [d for d in yaml.safe_load_all((SRC / "deploy/kubernetes/prometheusrule.yaml").read_text()) if d][-1]
    if doc.get("spec") != cr.get("spec"):
        problem("helm prometheusrule.yaml: spec differs from deploy/kubernetes/prometheusrule.yaml's")
    if values()["exporter"]["prometheusRule"]["additionalLabels"] != {"release": cr["metadata"]["labels"].get("release")}:
        problem("values.yaml: exporter.prometheusRule.additionalLabels differs from the plain PrometheusRule's release label")

# --------------------------------------------------------------------------------------------
# docs/configuration.md

def check_configdoc():
    doc = (SRC / "docs/configuration.md").read_text()
    sections = {}
    current = None
    for line in doc.splitlines():
        m = re.match(r"^## `kgpu ([\w -]+)`", line)
        if m:
            current = m.group(1).strip()
            sections[current] = ""
        elif line.startswith("## "):
            current = None
        elif current:
            sections[current] += line + "\n"
    for sub in all_subcommands():
        if sub not in sections:
            problem(f"docs/configuration.md: no section \"## `kgpu {sub}`\"")
            continue
        opts = parse_help(help_text(sub))
        for name, o in opts.items():
            if name in ("-h", "--help") or not name.startswith("--"):
                continue
            if not re.search(r"`" + re.escape(name) + r"[`= \[]", sections[sub]):
                problem(f"docs/configuration.md: `kgpu {sub}` flag {name} is not documented")
            for env in o["env"]:
                if env not in sections[sub] and env not in doc:
                    problem(f"docs/configuration.md: `kgpu {sub}` env {env} (of {name}) is not documented")
    top = parse_help(run([KGPU, "--help"]).stdout)
    for name in top:
        if name.startswith("--") and name not in ("--help",) and f"`{name}" not in doc:
            problem(f"docs/configuration.md: global flag {name} is not documented")


# --------------------------------------------------------------------------------------------
# MPS

def check_mps():
    """The MPS DaemonSet (plain and Helm) is NVIDIA's: selected by nvidia.com/mps.capable=true, an
    init container mounting the shm tmpfs into the MPS root with Bidirectional propagation, the
    daemon with compute capability, the root and shm at the paths kgpu's --mps-root default names,
    the same config file as the device plugin; flags and env vars the binary reads."""
    daemon_help = help_text("mps-control-daemon")
    shm_help = help_text("mps-control-daemon mount-shm")
    if daemon_help is None or shm_help is None:
        problem("`kgpu mps-control-daemon [mount-shm] --help` failed: the binary has no such subcommand")
        return
    opts, shm_opts = parse_help(daemon_help), parse_help(shm_help)
    root = opts["--mps-root"]["default"]
    if not root or shm_opts["--mps-root"]["default"] != root:
        problem(f"--mps-root defaults differ or are missing: {root} / {shm_opts['--mps-root']['default']}")
    ds = mps_daemonset()
    spec = pod_spec(ds)
    where = "mps-control-daemon.yaml"
    if spec.get("nodeSelector") != {"nvidia.com/mps.capable": "true"}:
        problem(f"{where}: nodeSelector must be nvidia.com/mps.capable=true (NVIDIA's), is {spec.get('nodeSelector')}")
    if spec.get("runtimeClassName") != "nvidia" or spec.get("priorityClassName") != "system-node-critical":
        problem(f"{where}: runtimeClassName nvidia and priorityClassName system-node-critical expected")
    if spec.get("tolerations") != pod_spec(daemonset()).get("tolerations"):
        problem(f"{where}: tolerations differ from daemonset.yaml's")
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    host = lambda m: volumes.get(m["name"], {}).get("hostPath", {}).get("path")
    inits = [c for c in spec.get("initContainers", []) if c.get("args") == ["mps-control-daemon", "mount-shm"]]
    if len(inits) != 1:
        problem(f"{where}: needs one init container running `mps-control-daemon mount-shm`")
    for c in inits:
        mounts = [m for m in c.get("volumeMounts", []) if host(m) == root]
        if not mounts or mounts[0]["mountPath"] != root or mounts[0].get("mountPropagation") != "Bidirectional":
            problem(f"{where}: {c['name']}: the MPS root {root} must be mounted at the same path, Bidirectional")
        if not (c.get("securityContext") or {}).get("privileged"):
            problem(f"{where}: {c['name']}: Bidirectional propagation needs privileged")
    daemons = [c for c in spec["containers"] if (c.get("args") or [None])[0] == "mps-control-daemon"]
    if len(daemons) != 1:
        problem(f"{where}: needs one container running `mps-control-daemon`")
        return
    c = daemons[0]
    env_known = {e for o in opts.values() for e in o["env"]}
    for flag, _ in split_args(c["args"][1:]):
        if flag not in opts:
            problem(f"{where}: `kgpu mps-control-daemon` has no flag {flag}")
    env = {e["name"]: e.get("value") for e in c.get("env", [])}
    for name in env:
        if name not in env_known and name not in RUNTIME_ENV:
            problem(f"{where}: env {name} is read neither by `kgpu mps-control-daemon` nor by the NVIDIA runtime")
    if env.get("NVIDIA_VISIBLE_DEVICES") != "all" or "compute" not in (env.get("NVIDIA_DRIVER_CAPABILITIES") or ""):
        problem(f"{where}: the daemon needs NVIDIA_VISIBLE_DEVICES=all and the compute capability "
                "(the runtime then injects nvidia-cuda-mps-control)")
    mounts = {m["mountPath"]: host(m) for m in c.get("volumeMounts", [])}
    if mounts.get(root) != root:
        problem(f"{where}: the daemon must mount the MPS root {root} at the same path")
    if mounts.get("/dev/shm") != root.rstrip("/") + "/shm":
        problem(f"{where}: the daemon must mount {root}/shm at /dev/shm")
    dp = [x for x in pod_spec(daemonset())["containers"] if x["args"][0] == "device-plugin"][0]
    cfg = dict(split_args(c["args"][1:])).get("--config-file")
    if cfg != dict(split_args(dp["args"][1:])).get("--config-file"):
        problem(f"{where}: --config-file {cfg} is not the device plugin's")
    # The chart renders the same steps.
    tmpl = (SRC / "deploy/helm/kgpu/templates/mps-control-daemon.yaml").read_text()
    for needle in ("nvidia.com/mps.capable: \"true\"", "- mount-shm", "mountPropagation: Bidirectional",
                   "- --config-file=/etc/kgpu/config.yaml", "mountPath: /dev/shm", "value: compute,utility"):
        if needle not in tmpl:
            problem(f"helm mps-control-daemon.yaml: lacks {needle!r}")
    if values()["mps"]["root"] != root:
        problem(f"values.yaml: mps.root {values()['mps']['root']} != --mps-root's default {root}")
    # The kgpu pod: the plugin asks the daemons (root and shm), the exporter reads their status.
    kspec = pod_spec(daemonset())
    kvol = {v["name"]: v for v in kspec["volumes"]}
    for sub, want in (("device-plugin", {root: root, "/dev/shm": root.rstrip("/") + "/shm"}), ("exporter", {root: root})):
        for c in [x for x in kspec["containers"] if x["args"][0] == sub]:
            have = {m["mountPath"]: kvol[m["name"]].get("hostPath", {}).get("path") for m in c.get("volumeMounts", [])}
            for path, hp in want.items():
                if have.get(path) != hp:
                    problem(f"daemonset.yaml: {sub} must mount {hp} at {path} (MPS), has {have.get(path)}")
            if sub == "exporter":
                default = parse_help(help_text(sub)).get("--mps-root", {}).get("default")
            else:
                out = run([KGPU, sub, "--check-config"]).stdout
                default = root if f"flags.mpsRoot: {root}\n" in out else None
            if default != root:
                problem(f"`kgpu {sub}`: the MPS root does not default to {root}")


CHECKS = {
    "manifests": check_manifests, "args": check_args, "hostpaths": check_hostpaths,
    "dockerfile": check_dockerfile, "image": check_image, "helm": check_helm, "configdoc": check_configdoc,
    "mps": check_mps, "helm-prometheusrule": check_helm_prometheusrule,
}

if __name__ == "__main__":
    check = sys.argv[4]
    CHECKS[check](*sys.argv[5:])
    for p in problems:
        print(p, file=sys.stderr)
    if not problems:
        print(f"{check} {' '.join(sys.argv[5:])}: ok")
    sys.exit(1 if problems else 0)
