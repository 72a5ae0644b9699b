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
                       blocks, values.yaml defaults equal the plain manifests' settings, and the
                       chart rendered with them (chart_render.py, a small Go-template renderer for
                       what the chart uses) gives the plain manifests' config file and pods
  configdoc            every flag of every subcommand's --help is in docs/configuration.md
  docs-figures         measured figures (RSS, latency, CPU, sizes) are only in the README's
                       "Measurements" table: docs/ and the manifests' comments link to it
  docs-manifests       docs/operator-guide.md's manifest table lists every file of deploy/kubernetes
                       and says which ones the kustomization leaves out
  docs-commands        no doc chains a command after one that never returns (port-forward, logs -f)
  setup                scripts/setup without --all (the quick start) builds only the CMake target
                       demo (kgpu, the simulator, its MPS stand-in; no test code) from packages of
                       its own list and their dependencies, none of them test-only
  mps                  the mps-control-daemon DaemonSet (plain and Helm) is NVIDIA's, with kgpu's paths
  helm-prometheusrule  the chart's prometheusrule.yaml, rendered: nothing by default or without the
                       exporter; enabled, a PrometheusRule with additionalLabels whose spec is the
                       groups of deploy/monitoring/kgpu-alerts.rules.yaml (the chart's files/ copy is equal)
  helm-toolkit         runtimeInstall.enabled, deviceListStrategy, cdi.nvidiaHookPath and
                       compatWithCPUManager, rendered: `kgpu device-plugin --check-config` with the
                       rendered flags and config file reports what each value set asks for (NVIDIA's
                       defaults when NVIDIA's toolkit stays, kgpu's secure ones by default)
  helm-webconfig       exporter.webConfig (TLS, client certificates, basic auth), rendered: the Secret,
                       flag, mounts and ServiceMonitor; the exporter run with the rendered file
                       answers scrapes with credentials, refuses them without, and the rendered
                       probes succeed against it
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

from chart_render import Chart, TemplateError

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
    "ClusterRole": "rbac.authorization.k8s.io/v1", "ClusterRoleBinding": "rbac.authorization.k8s.io/v1",
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
# And the MIG manager (mig-manager.yaml), as NVIDIA's: MIG mode and instances need the driver's MIG
# configuration capability and root on every GPU, and WITH_REBOOT reboots the host.
MIG_PRIVILEGED = {"mig-manager"}
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
            if sc.get("privileged") and (c.get("args") or [None])[0] in MIG_PRIVILEGED:
                continue  # MIG configuration capability, reboot: see the comment at MIG_PRIVILEGED
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
    # GPU health Events on the Node (issue #27): the device plugin knows its node, the pod mounts
    # the service account's token, and rbac.yaml grants exactly what the plugin calls.
    dp = [c for c in spec["containers"] if c["args"][0] == "device-plugin"]
    for c in dp:
        refs = {e["name"]: ((e.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath") for e in c.get("env", [])}
        if refs.get("NODE_NAME") != "spec.nodeName":
            problem("DaemonSet: the device-plugin container needs NODE_NAME from spec.nodeName (GPU health Events)")
    if spec.get("automountServiceAccountToken") is not True or spec.get("serviceAccountName") != "kgpu":
        problem("DaemonSet: the pod needs serviceAccountName kgpu and automountServiceAccountToken: true (GPU health Events)")
    rbac = {d["kind"]: d for d in load_docs(SRC / "deploy/kubernetes/rbac.yaml")}
    want = {("", "events"): {"create", "patch"}, ("", "nodes"): {"get", "list", "watch", "patch"}}
    granted = {}
    for r in (rbac.get("ClusterRole") or {}).get("rules", []):
        for g in r.get("apiGroups", []):
            for res in r.get("resources", []):
                granted.setdefault((g, res), set()).update(r.get("verbs", []))
    if granted != want:
        problem(f"rbac.yaml: ClusterRole kgpu grants {granted}, the device plugin needs exactly {want}")
    subjects = (rbac.get("ClusterRoleBinding") or {}).get("subjects", [])
    if subjects != [{"kind": "ServiceAccount", "name": "kgpu", "namespace": "kube-system"}]:
        problem(f"rbac.yaml: ClusterRoleBinding kgpu binds {subjects}, expected the kube-system/kgpu ServiceAccount")
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


def mig_daemonset():
    for d in load_docs(SRC / "deploy/kubernetes/mig-manager.yaml"):
        if d.get("kind") == "DaemonSet":
            return d
    raise SystemExit("deploy/kubernetes/mig-manager.yaml: no DaemonSet")


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


def helm_objects(overrides=None):
    """{(kind, name): object} of the chart rendered with values.yaml (and `overrides`, as --set);
    the pods of its DaemonSets checked as the plain manifests' are (check_pod_spec)."""
    out = {}
    for template, docs in Chart(SRC / "deploy/helm/kgpu", overrides).manifests():
        for d in docs:
            key = (d.get("kind"), (d.get("metadata") or {}).get("name"))
            if key in out:
                problem(f"helm {template}: {key[0]} {key[1]} is rendered twice")
            out[key] = d
            if key[0] == "DaemonSet":
                check_pod_spec(f"helm {template} ({overrides or 'defaults'}): DaemonSet {key[1]}", pod_spec(d), True)
    return out


def helm_args(sub):
    """The args (after the subcommand) of each container of the chart's DaemonSet kgpu that runs
    `sub`, rendered with the defaults."""
    try:
        ds = helm_objects().get(("DaemonSet", "kgpu"))
    except TemplateError as e:
        problem(str(e))
        return []
    if ds is None:
        problem("helm: no DaemonSet kgpu rendered with the defaults")
        return []
    return [c["args"][1:] for c in pod_spec(ds)["containers"] if (c.get("args") or [None])[0] == sub]


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
    "device-plugin": ["--device-plugin-path", "--cdi-spec-dir", "--mig-paused-gpus-file"],
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
                            ("mps-control-daemon.yaml", pod_spec(mps_daemonset())),
                            ("mig-manager.yaml", pod_spec(mig_daemonset()))):
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
                if sc.get("privileged") and args[:1] and args[0] in MPS_PRIVILEGED | MIG_PRIVILEGED:
                    pass  # privileged has every capability (check_mps / MIG_PRIVILEGED say why it must be)
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
    for c in [c for ds in (daemonset(), mps_daemonset(), mig_daemonset())
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
    check_helm_renders_the_manifests()


def plain_objects():
    """{(kind, name): object} of every file in deploy/kubernetes (the kustomization aside)."""
    out = {}
    for f in sorted((SRC / "deploy/kubernetes").glob("*.yaml")):
        if f.name != "kustomization.yaml":
            for d in load_docs(f):
                out[(d.get("kind"), (d.get("metadata") or {}).get("name"))] = d
    return out


def by_name(items):
    return {i.get("name"): i for i in items or []}


def compare_pod_specs(where, helm, plain):
    """The settings of two pod specs that matter to the node (labels and comments aside); volumes,
    containers, env and mounts compared by name. MPS_ROOT set to the MPS root the pod mounts is the
    default's value (the chart passes mps.root on)."""
    for key in sorted(set(helm) | set(plain)):
        if key in ("volumes", "containers", "initContainers"):
            continue
        if helm.get(key) != plain.get(key):
            problem(f"{where}: {key} {helm.get(key)} != the plain manifest's {plain.get(key)}")
    if by_name(helm.get("volumes")) != by_name(plain.get("volumes")):
        problem(f"{where}: volumes {helm.get('volumes')} != the plain manifest's {plain.get('volumes')}")
    for kind in ("initContainers", "containers"):
        hc, pc = by_name(helm.get(kind)), by_name(plain.get(kind))
        if hc.keys() != pc.keys():
            problem(f"{where}: {kind} {sorted(hc)} != the plain manifest's {sorted(pc)}")
            continue
        for name in hc:
            h, p = dict(hc[name]), dict(pc[name])
            for c in (h, p):
                c["env"] = by_name(c.get("env"))
                c["volumeMounts"] = by_name(c.get("volumeMounts"))
            mps = h["env"].get("MPS_ROOT")
            if mps and "MPS_ROOT" not in p["env"] and mps.get("value") in p["volumeMounts"] \
                    .get("mps-root", {}).get("mountPath", ""):
                del h["env"]["MPS_ROOT"]
            for key in sorted(set(h) | set(p)):
                if h.get(key) != p.get(key):
                    problem(f"{where}: container {name}: {key} {h.get(key)} != the plain manifest's {p.get(key)}")


def check_helm_renders_the_manifests():
    """The chart rendered with its defaults: the plain manifests' ConfigMap (the config file itself),
    the same pods for the DaemonSets kgpu, kgpu-runtime-install and kgpu-mps-control-daemon, and
    the same RuntimeClass, Service port and ServiceMonitor endpoint (enabled)."""
    try:
        helm = helm_objects({"exporter.serviceMonitor.enabled": True})
    except TemplateError as e:
        problem(str(e))
        return
    plain = plain_objects()
    cm = helm.get(("ConfigMap", "kgpu-config"))
    if cm is None or yaml.safe_load(cm["data"]["config.yaml"]) != yaml.safe_load(configmap_config()):
        problem(f"helm configmap.yaml: the config file {cm and cm['data']['config.yaml']!r} != the plain "
                f"ConfigMap's {yaml.safe_load(configmap_config())}")
    # The MIG manager's configs: the chart's file is the plain ConfigMap's data.
    mig_h, mig_p = helm.get(("ConfigMap", "kgpu-mig-parted-config")), plain.get(("ConfigMap", "kgpu-mig-parted-config"))
    if mig_h is None or mig_p is None or \
            yaml.safe_load(mig_h["data"]["config.yaml"]) != yaml.safe_load(mig_p["data"]["config.yaml"]):
        problem("helm files/mig-parted-config.yaml (ConfigMap kgpu-mig-parted-config) != the data of "
                "deploy/kubernetes/mig-manager.yaml's ConfigMap")
    for key, obj in sorted(plain.items()):
        if key[0] == "DaemonSet":
            if key not in helm:
                problem(f"helm: no {key[0]} {key[1]} (deploy/kubernetes has one)")
            else:
                compare_pod_specs(f"helm {key[0]} {key[1]}", pod_spec(helm[key]), pod_spec(obj))
    for kind, name, path in (("RuntimeClass", "nvidia", ["handler"]), ("Service", "kgpu-exporter", ["spec", "ports"]),
                             ("ClusterRole", "kgpu", ["rules"]), ("ClusterRoleBinding", "kgpu", ["roleRef"]),
                             ("ClusterRoleBinding", "kgpu", ["subjects"]),
                             ("ServiceMonitor", "kgpu-exporter", ["spec", "endpoints"])):
        h, p = helm.get((kind, name)), plain.get((kind, name))
        for part in path:
            h, p = (h or {}).get(part), (p or {}).get(part)
        if h != p:
            problem(f"helm {kind} {name}: {'.'.join(path)} {h} != the plain manifest's {p}")


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
# Helm values: the container toolkit the node runs, and the exporter's web config

# (values, effective settings `kgpu device-plugin --check-config` must report for the rendered
# DaemonSet and ConfigMap, whether kgpu-runtime-install is rendered)
TOOLKIT_CASES = [
    ({}, {"deviceListStrategy": "volume-mounts", "nvidiaCTKPath": "/usr/local/kgpu/nvidia-cdi-hook",
          "passDeviceSpecs": "false"}, True),
    # NVIDIA's toolkit keeps the nvidia runtime: NVIDIA's defaults, which its default settings accept.
    ({"runtimeInstall.enabled": False}, {"deviceListStrategy": "envvar", "nvidiaCTKPath": "(/usr/bin/nvidia-cdi-hook)",
                                         "passDeviceSpecs": "false"}, False),
    ({"runtimeInstall.enabled": False, "deviceListStrategy": "cdi-cri",
      "cdi.nvidiaHookPath": "/usr/local/nvidia/toolkit/nvidia-cdi-hook"},
     {"deviceListStrategy": "cdi-cri", "nvidiaCTKPath": "/usr/local/nvidia/toolkit/nvidia-cdi-hook"}, False),
    ({"runtimeInstall.enabled": False, "deviceListStrategy": "volume-mounts"}, {"deviceListStrategy": "volume-mounts"},
     False),
    ({"deviceListStrategy": "envvar,cdi-annotations"},
     {"deviceListStrategy": "envvar,cdi-annotations", "nvidiaCTKPath": "/usr/local/kgpu/nvidia-cdi-hook"}, True),
    ({"compatWithCPUManager": True}, {"passDeviceSpecs": "true", "deviceListStrategy": "volume-mounts"}, True),
    ({"runtimeInstall.enabled": False, "compatWithCPUManager": True},
     {"passDeviceSpecs": "true", "deviceListStrategy": "envvar"}, False),
]


def check_helm_toolkit():
    """runtimeInstall.enabled, deviceListStrategy, cdi.nvidiaHookPath and compatWithCPUManager,
    rendered: the device plugin's container and ConfigMap, run with --check-config, have the
    settings each value set asks for; the chart's securityContext stays (compatWithCPUManager makes
    nothing privileged); kgpu-runtime-install is rendered only when enabled."""
    with tempfile.TemporaryDirectory() as tmp:
        for values, want, install in TOOLKIT_CASES:
            where = f"helm --set {','.join(f'{k}={v}' for k, v in values.items()) or '(defaults)'}"
            try:
                objs = helm_objects(values)
                notes = Chart(SRC / "deploy/helm/kgpu", values).render("NOTES.txt")
            except TemplateError as e:
                problem(f"{where}: {e}")
                continue
            if "deviceListStrategy" in want and f"deviceListStrategy {want['deviceListStrategy']}," not in notes:
                problem(f"{where}: NOTES.txt does not name deviceListStrategy {want['deviceListStrategy']}:\n{notes}")
            if (("DaemonSet", "kgpu-runtime-install") in objs) != install:
                problem(f"{where}: DaemonSet kgpu-runtime-install {'missing' if install else 'rendered'}")
            cfg = pathlib.Path(tmp, "config.yaml")
            cfg.write_text(objs[("ConfigMap", "kgpu-config")]["data"]["config.yaml"])
            dp = [c for c in pod_spec(objs[("DaemonSet", "kgpu")])["containers"] if c["args"][0] == "device-plugin"][0]
            args = [f"--config-file={cfg}" if a.startswith("--config-file=") else a for a in dp["args"][1:]]
            r = run([KGPU, "device-plugin", *args, "--check-config"])
            if r.returncode != 0:
                problem(f"{where}: `kgpu device-plugin {' '.join(args)} --check-config` exit {r.returncode}: "
                        f"{r.stderr.strip()}")
                continue
            got = dict(line.split(": ", 1) for line in r.stdout.splitlines() if ": " in line)
            for key, value in want.items():
                have = got.get(f"flags.plugin.{key}")
                if have != value:
                    problem(f"{where}: the device plugin runs with {key} {have}, expected {value}")
            if dp.get("securityContext") != pod_spec(daemonset())["containers"][0]["securityContext"]:
                problem(f"{where}: device-plugin securityContext {dp.get('securityContext')} is not the chart's")


BCRYPT_USER, BCRYPT_PASSWORD = "prometheus", "scrape-me"
BCRYPT_HASH = "$2b$04$fDOPr0R4MUeAn4KWkndLnecntGMeSmQJ9h3gyqSjt3F4ssU1PxsoC"  # of BCRYPT_PASSWORD, cost 4


def start_exporter(args, tmp):
    """`kgpu exporter ARGS` against the simulator on 127.0.0.1:0: (process, port), the port read
    from its --ready-file ("host:port", written atomically once it serves)."""
    import time
    ready, log = os.path.join(tmp, "exporter-ready"), os.path.join(tmp, "exporter.log")
    if os.path.exists(ready):
        os.unlink(ready)
    with open(log, "wb") as err:
        proc = subprocess.Popen([KGPU, "exporter", "--address=127.0.0.1:0", "--ready-file", ready,
                                 "--nvml-library", SIM, *args],
                                stdout=subprocess.DEVNULL, stderr=err,
                                env={**os.environ, "KGPU_SIM_NODE": str(SRC / "sim/nodes/t4x4.yaml")})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with open(ready) as f:
                return proc, int(f.read().strip().rsplit(":", 1)[1])
        except FileNotFoundError:
            time.sleep(0.01)
    proc.kill()
    proc.wait()
    with open(log, errors="replace") as f:
        raise RuntimeError(f"`kgpu exporter {' '.join(args)}` did not start serving: {f.read().strip()}")


def http_get(port, path, tls=None, auth=None):
    """(status, None) of GET path, or (None, error) when no answer came (refused handshake...).
    tls: None for plain HTTP, else (cafile, client cert or None, key or None)."""
    import base64
    import http.client
    import ssl
    try:
        if tls is None:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        else:
            ctx = ssl.create_default_context(cafile=tls[0])
            ctx.check_hostname = False
            if tls[1]:
                ctx.load_cert_chain(tls[1], tls[2])
            conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=30, context=ctx)
        headers = {"Authorization": "Basic " + base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()} if auth else {}
        conn.request("GET", path, headers=headers)
        status = conn.getresponse().status
        conn.close()
        return status, None
    except (OSError, http.client.HTTPException) as e:
        return None, str(e)


def probe(port, handler, tls_cafile):
    """What the kubelet's probe sees: True when the handler succeeds (no credentials, no client certificate)."""
    import socket
    if "tcpSocket" in handler:
        with socket.create_connection(("127.0.0.1", port), timeout=10):
            return True
    get = handler.get("httpGet") or {}
    status, _ = http_get(port, get.get("path", "/"), tls=(tls_cafile, None, None) if get.get("scheme") == "HTTPS" else None)
    return status is not None and 200 <= status < 400


# (values beyond tlsSecretName/basicAuthUsers: client certificates)
WEBCONFIG_CASES = [
    {"exporter.webConfig.tlsSecretName": "kgpu-exporter-tls"},
    {"exporter.webConfig.basicAuthUsers": {BCRYPT_USER: BCRYPT_HASH}},
    {"exporter.webConfig.tlsSecretName": "kgpu-exporter-tls", "exporter.webConfig.basicAuthUsers": {BCRYPT_USER: BCRYPT_HASH}},
    {"exporter.webConfig.tlsSecretName": "kgpu-exporter-tls", "exporter.webConfig.clientAuthType": "RequireAndVerifyClientCert"},
]


def check_helm_webconfig():
    """exporter.webConfig rendered: without it no Secret, flag or mount; with it the Secret
    kgpu-exporter-web-config, --web-config-file and the mounts of it and of the TLS Secret, the
    ServiceMonitor's scheme, tlsConfig and basicAuth. Then the exporter runs with the rendered
    flags and files (the container's paths moved into a temp dir, a test certificate for the TLS
    Secret): a scrape with the right credentials gets 200, one without 401 (basic auth), plain
    HTTP on TLS 400, no client certificate no answer; and both probes succeed the way the kubelet
    runs them (no credentials, no client certificate)."""
    try:
        plain = helm_objects()
    except TemplateError as e:
        problem(str(e))
        return
    exp = [c for c in pod_spec(plain[("DaemonSet", "kgpu")])["containers"] if c["args"][0] == "exporter"][0]
    if ("Secret", "kgpu-exporter-web-config") in plain or any(a.startswith("--web-config-file") for a in exp["args"]):
        problem("helm (defaults): the exporter has a web config although exporter.webConfig is empty")
    if shutil.which("openssl") is None:
        problem("openssl is not installed (scripts/setup --all installs it): cannot make the test certificate")
        return
    with tempfile.TemporaryDirectory() as tmp:
        tls_dir = pathlib.Path(tmp, "tls")
        tls_dir.mkdir()
        r = run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                 "-subj", "/CN=kgpu-exporter", "-days", "2", "-keyout", str(tls_dir / "tls.key"),
                 "-out", str(tls_dir / "tls.crt")])
        if r.returncode != 0:
            problem(f"openssl req: {r.stderr.strip()}")
            return
        shutil.copy(tls_dir / "tls.crt", tls_dir / "ca.crt")  # self-signed: also the client's CA
        cert, key = str(tls_dir / "tls.crt"), str(tls_dir / "tls.key")
        for values in WEBCONFIG_CASES:
            values = {**values, "exporter.serviceMonitor.enabled": True,
                      "exporter.serviceMonitor.tlsConfig": {"insecureSkipVerify": True},
                      "exporter.serviceMonitor.basicAuth": {"username": {"name": "s", "key": "u"}}}
            where = f"helm --set {','.join(f'{k}={v}' for k, v in values.items())}"
            tls = "exporter.webConfig.tlsSecretName" in values
            users = "exporter.webConfig.basicAuthUsers" in values
            client_auth = "exporter.webConfig.clientAuthType" in values
            try:
                objs = helm_objects(values)
            except TemplateError as e:
                problem(f"{where}: {e}")
                continue
            secret = objs.get(("Secret", "kgpu-exporter-web-config"))
            spec = pod_spec(objs[("DaemonSet", "kgpu")])
            c = [x for x in spec["containers"] if x["args"][0] == "exporter"][0]
            flags = dict(split_args(c["args"][1:]))
            web = flags.get("--web-config-file")
            volumes = by_name(spec["volumes"])
            mounts = {m["mountPath"]: volumes.get(m["name"], {}).get("secret", {}).get("secretName")
                      for m in c.get("volumeMounts", [])}
            if secret is None or not web:
                problem(f"{where}: no Secret kgpu-exporter-web-config or no --web-config-file ({web})")
                continue
            if mounts.get(os.path.dirname(web)) != "kgpu-exporter-web-config":
                problem(f"{where}: --web-config-file={web}, but Secret kgpu-exporter-web-config is not mounted at its directory")
            if tls and mounts.get("/etc/kgpu/tls") != values["exporter.webConfig.tlsSecretName"]:
                problem(f"{where}: the TLS Secret is not mounted at /etc/kgpu/tls: {mounts}")
            endpoint = objs[("ServiceMonitor", "kgpu-exporter")]["spec"]["endpoints"][0]
            if endpoint.get("scheme", "http") != ("https" if tls else "http") or \
                    endpoint.get("tlsConfig") != {"insecureSkipVerify": True} or \
                    endpoint.get("basicAuth") != {"username": {"name": "s", "key": "u"}}:
                problem(f"{where}: ServiceMonitor endpoint {endpoint} lacks the scheme, tlsConfig or basicAuth")
            # The rendered file, with the container's /etc/kgpu/ moved to the temp dir.
            text = secret["stringData"][os.path.basename(web)].replace("/etc/kgpu/", tmp + "/")
            web_file = pathlib.Path(tmp, "web", os.path.basename(web))
            web_file.parent.mkdir(exist_ok=True)
            web_file.write_text(text)
            try:
                proc, port = start_exporter([f"--web-config-file={web_file}"], tmp)
            except RuntimeError as e:
                problem(f"{where}: {e}\n{text}")
                continue
            try:
                client = (cert, cert, key) if client_auth else (cert, None, None)
                creds = (BCRYPT_USER, BCRYPT_PASSWORD) if users else None
                status, err = http_get(port, "/metrics", tls=client if tls else None, auth=creds)
                if status != 200:
                    problem(f"{where}: GET /metrics as the ServiceMonitor scrapes: {status or err}, expected 200")
                if users:
                    status, err = http_get(port, "/metrics", tls=client if tls else None)
                    if status != 401:
                        problem(f"{where}: GET /metrics without credentials: {status or err}, expected 401")
                if tls:
                    status, err = http_get(port, "/metrics")
                    if status != 400:
                        problem(f"{where}: plain HTTP on the TLS port: {status or err}, expected 400")
                if client_auth:
                    status, err = http_get(port, "/metrics", tls=(cert, None, None), auth=creds)
                    if status is not None:
                        problem(f"{where}: a scrape without a client certificate got {status}")
                for name in ("readinessProbe", "livenessProbe"):
                    if not probe(port, c[name], cert):
                        problem(f"{where}: the {name} {c[name]} fails against the running exporter")
            finally:
                proc.kill()
                proc.wait()


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
# Docs: measured figures in one place, the operator's guide's manifest table, commands that return

# A figure with a unit: "11.6 MiB", "0.31 ms", "72–143 ms", "23.7 KB".
FIGURE = re.compile(r"(?<![\w.])(\d+(?:[.,]\d+)?(?:\s?[–-]\s?\d+(?:\.\d+)?)?)\s?(MiB|MB|KiB|KB|kB|GB|GiB|ms|µs|us|s)\b")
# Words that make a figure a measurement...
MEASURED = re.compile(r"\b(RSS|medians?|p50|p99|peak|measured|measures|benchmarks?)\b", re.I)
# ... unless the figure is a bound, a setting or someone else's ("under its 96 MiB budget",
# "every 60 s", "dcgm-exporter's published 400-500 MiB").
BOUND = re.compile(r"\b(under|below|at most|within|budget|limits?|target|up to|over|more than|larger than|capped at|"
                   r"at least|every|after|timeout|deadline|published|reported)\s+((of|its|the|a)\s+)?(~|about\s+)?$",
                   re.I)
BOUND_AFTER = re.compile(r"^\s*(budget|limits?|cap)\b", re.I)


def readme_figures():
    """The figures of the README's "Measurements" table: (number, unit) with a decimal point and
    two significant digits at least (integers and 0.6 s are too often settings or chance: 100 ms,
    60 s)."""
    text = (SRC / "README.md").read_text()
    m = re.search(r"^## Measurements\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    if not m:
        problem("README.md: no \"## Measurements\" section")
        return set()
    return {(n, u) for n, u in FIGURE.findall(m.group(1)) if "." in n and len(n.replace(".", "").lstrip("0")) >= 2}


def doc_sentences(path):
    """(line, sentence) of a Markdown file, or of the comments of a YAML file: paragraphs, list
    items and table rows split into sentences; code blocks left out (commands and their output)."""
    lines = path.read_text().split("\n")
    if path.suffix == ".yaml":
        lines = [l.strip()[1:] if l.strip().startswith("#") else "" for l in lines]
    paras, cur, start, fenced = [], [], 0, False
    for i, line in enumerate(lines, 1):
        if line.startswith("```"):
            fenced = not fenced
            line = ""
        if fenced or line.startswith("    ") and not cur:
            line = ""
        new_item = line.startswith("|") or re.match(r"\s*([-*]|\d+\.) ", line) or line.startswith("#")
        if not line.strip() or new_item:
            if cur:
                paras.append((start, " ".join(cur)))
            cur = []
        if line.strip():
            if not cur:
                start = i
            cur.append(line.strip())
    if cur:
        paras.append((start, " ".join(cur)))
    for start, p in paras:
        for sentence in re.split(r"(?<=[.;:])\s+(?=[A-Z(`*])", p):
            yield start, sentence


def check_docs_figures():
    """A measured figure (RSS, latency, CPU, sizes) lives in one place, the README's
    "Measurements" table; the docs and the manifests' comments link to it instead of repeating or
    contradicting it. Flagged: a figure in a sentence that says it was measured (RSS, median, p50,
    p99, peak, measured), unless it is a bound ("under 96 MiB"); and any decimal figure of that
    table repeated. Code (blocks and `spans`: commands, quoted output) is left out."""
    figures = readme_figures()
    files = sorted((SRC / "docs").glob("*.md")) + sorted((SRC / "deploy").rglob("*.yaml"))
    for f in files:
        rel = f.relative_to(SRC)
        for line, sentence in doc_sentences(f):
            sentence = re.sub(r"`[^`]*`", "`…`", sentence)  # commands and their quoted output
            measured = MEASURED.search(sentence)
            for m in FIGURE.finditer(sentence):
                if BOUND.search(sentence[:m.start()]) or BOUND_AFTER.search(sentence[m.end():]):
                    continue
                figure = f"{m.group(1)} {m.group(2)}"
                if measured:
                    problem(f"{rel}:{line}: measured figure {figure} ({measured.group(0)}): put it in the README's "
                            f"Measurements table and link there: {sentence[:160]}")
                elif (m.group(1), m.group(2)) in figures:
                    problem(f"{rel}:{line}: {figure} repeats the README's Measurements table: link there instead: "
                            f"{sentence[:160]}")


def check_docs_manifests():
    """The operator's guide's table of deploy/kubernetes lists every file there, each one file that
    exists, and says "not in the kustomization" exactly for the files kustomization.yaml leaves out."""
    guide = (SRC / "docs/operator-guide.md").read_text()
    m = re.search(r"^\| file \| objects \|\n\|[-|]+\|\n((?:\|.*\n)+)", guide, re.M)
    if not m:
        problem("docs/operator-guide.md: no table \"| file | objects |\" of deploy/kubernetes")
        return
    rows = {}
    for row in m.group(1).splitlines():
        cells = [c.strip() for c in row.strip("|").split("|")]
        name = cells[0].strip("`")
        if name in rows:
            problem(f"docs/operator-guide.md: {name} is listed twice")
        rows[name] = cells[1] if len(cells) > 1 else ""
    files = {f.name for f in (SRC / "deploy/kubernetes").glob("*.yaml")} - {"kustomization.yaml"}
    for name in sorted(files - rows.keys()):
        problem(f"docs/operator-guide.md: the manifest table does not list deploy/kubernetes/{name}")
    for name in sorted(rows.keys() - files):
        problem(f"docs/operator-guide.md: the manifest table lists {name}, which is not in deploy/kubernetes")
    k = yaml.safe_load((SRC / "deploy/kubernetes/kustomization.yaml").read_text())
    in_kustomization = set(k.get("resources", []))
    for name, what in sorted(rows.items()):
        says_out = "not in the kustomization" in what
        if name in files and says_out == (name in in_kustomization):
            problem(f"docs/operator-guide.md: {name} is {'' if name in in_kustomization else 'not '}in "
                    f"kustomization.yaml, but the table says {what!r}")


# Commands that do not return until interrupted: in a doc's command line, anything after them with
# && or ; never runs.
FOREGROUND = re.compile(r"\b(port-forward|logs -f|logs --follow|get -w|get --watch|watch)\b[^&;|`]*?(&&|;)")


def check_docs_commands():
    """No doc chains a command after one that never returns (`kubectl port-forward … && curl`):
    the first must be backgrounded (`&`)."""
    for f in sorted((SRC / "docs").glob("*.md")) + [SRC / "README.md"]:
        for i, line in enumerate(f.read_text().splitlines(), 1):
            m = FOREGROUND.search(line)
            if m:
                problem(f"{f.relative_to(SRC)}:{i}: `{m.group(1)}` does not return, so what follows {m.group(2)} "
                        f"never runs: background it (`&`): {line.strip()}")


# --------------------------------------------------------------------------------------------
# scripts/setup: the quick start installs and builds what `kgpu demo` runs, nothing more

# Packages only the tests, benchmarks and fuzzers need: never in the quick start's list.
TEST_ONLY_PACKAGES = {"libgtest-dev", "libgmock-dev", "libbenchmark-dev", "valgrind", "containerd", "prometheus",
                      "buildah", "busybox-static", "dbus-daemon", "clang-19", "libclang-rt-19-dev", "python3-jsonschema"}
# What `kgpu demo` executes or loads, relative to the build directory: the binary (its children
# are the same binary), the simulator and its MPS stand-in (`demo --mps`).
DEMO_OUTPUTS = {"kgpu", "sim/libnvidia-ml.so.1", "sim/nvidia-cuda-mps-control"}


def setup_packages():
    """(quick, all) package lists of scripts/setup: the first `packages=(...)` and the `--all`
    additions (`packages+=(...)`)."""
    text = (SRC / "scripts/setup").read_text()

    def words(block):
        return [w for line in block.splitlines() for w in line.split("#")[0].split()]
    quick = re.search(r"^packages=\((.*?)^\)", text, re.M | re.S)
    more = re.search(r"^\s*packages\+=\((.*?)^\s*\)", text, re.M | re.S)
    return (words(quick.group(1)) if quick else []), (words(more.group(1)) if more else [])


def dpkg_owners():
    """{path: package} from dpkg's file lists, with /lib, /bin, /sbin also under /usr (merged /usr)."""
    owners = {}
    for lst in pathlib.Path("/var/lib/dpkg/info").glob("*.list"):
        pkg = lst.name[:-len(".list")].split(":")[0]
        for line in lst.read_text(errors="replace").splitlines():
            owners.setdefault(line, pkg)
            for top in ("/lib", "/bin", "/sbin", "/lib64"):
                if line.startswith(top + "/"):
                    owners.setdefault("/usr" + line, pkg)
    return owners


def check_setup():
    """`scripts/setup` without --all (the README's quick start) builds the CMake target `demo`,
    whose build steps make exactly what the demo runs and compile nothing of tests/ or bench/;
    its package list has no test-only package, and every header, library and tool the `demo`
    build steps used (ninja's dependency log, the link lines) belongs to a package of that list
    or one they depend on (apt-cache). `scripts/test` runs `scripts/setup --all`, which adds the
    test-only packages and builds everything."""
    text = (SRC / "scripts/setup").read_text()
    quick, more = setup_packages()
    if not quick or not more:
        problem("scripts/setup: expected a `packages=(...)` list and an `--all` addition `packages+=(...)`")
        return
    for p in sorted(TEST_ONLY_PACKAGES & set(quick)):
        problem(f"scripts/setup: the quick start installs {p}, which only the tests need (move it to --all)")
    if not re.search(r"cmake --build --preset release --target demo\b", text):
        problem("scripts/setup: without --all it must build only the target demo")
    if not re.search(r"^scripts/setup --all$", (SRC / "scripts/test").read_text(), re.M):
        problem("scripts/test: must run `scripts/setup --all` (the tests' packages and the whole tree)")
    build = pathlib.Path(KGPU).parent
    if not (build / "build.ninja").exists():
        print(f"setup: {build} is not a Ninja build: the build steps of `demo` are not checked")
        return
    commands = run(["ninja", "-C", str(build), "-t", "commands", "demo"])
    if commands.returncode != 0:
        problem(f"ninja -t commands demo: {commands.stderr.strip() or commands.stdout.strip()} (no CMake target demo?)")
        return
    lines = commands.stdout.splitlines()
    for line in lines:
        if re.search(r"\s(\S*/)?(tests|bench|fuzz)/\S+\.(cpp|cc|c)\b", line.replace(str(SRC), "")):
            problem(f"the demo target compiles test code: {line[:200]}")
            break
    outputs = {o for line in lines for o in re.findall(r"\s-o\s+(\S+)", line)}
    for want in sorted(DEMO_OUTPUTS):
        if want not in outputs:
            problem(f"the demo target does not build {want} (what `kgpu demo` runs)")
    # What the build steps used, and whose it is.
    objects = sorted(o for o in outputs if o.endswith(".o"))
    deps = run(["ninja", "-C", str(build), "-t", "deps", *objects])
    used = {l.strip() for l in deps.stdout.splitlines() if l.startswith("    ") and l.strip().startswith("/")}
    if not used:
        problem(f"ninja -t deps: no headers recorded for the demo's {len(objects)} objects (build the target demo first)")
    used |= {w for line in lines for w in line.split() if re.match(r"/usr/lib/\S+\.(a|so[.\d]*)$", w)}
    for tool in ("cmake", "ninja", "protoc", "grpc_cpp_plugin", "pkg-config", "c++", "cc"):
        path = shutil.which(tool)
        if path:
            used.add(path)
    r = run(["apt-cache", "depends", "--recurse", "--no-recommends", "--no-suggests", "--no-conflicts",
             "--no-breaks", "--no-replaces", "--no-enhances", *quick])
    if r.returncode != 0:
        print(f"setup: apt-cache failed ({r.stderr.strip()}): the packages of the demo's build are not checked")
        return
    closure = {l.strip() for l in r.stdout.splitlines() if not l.startswith(" ")}
    owners = dpkg_owners()
    # Essential packages are on every Debian system (libc6, coreutils, ...): apt never lists them.
    essential = {l.split()[0] for l in run(["dpkg-query", "-W", "-f", "${Package} ${Essential}\n"]).stdout.splitlines()
                 if l.endswith(" yes")}
    unowned, missing = [], {}
    for f in sorted(used):
        real = os.path.realpath(f)
        pkg = owners.get(f) or owners.get(real)
        if pkg is None:
            if f.startswith("/usr/") and not f.startswith("/usr/local/"):
                unowned.append(f)
        elif pkg not in closure and pkg not in essential:
            missing.setdefault(pkg, f)
    for pkg, f in sorted(missing.items()):
        problem(f"the demo's build uses {f} (and maybe more) from {pkg}, which scripts/setup's quick list does "
                f"not install (nor anything it depends on)")
    if unowned:
        problem(f"the demo's build uses files no package owns: {unowned[:5]}")


# --------------------------------------------------------------------------------------------
# MPS

def check_mps_config_manager(where, spec, daemon):
    """The MPS daemon follows the node label nvidia.com/device-plugin.config as the device plugin
    does: `kgpu config-manager` once as an init container (--oneshot, no signal) and as a sidecar
    links the config the label names at the daemon's --config-file, from the device plugin's
    CONFIG_FILE_SRCDIR (the same ConfigMap), with the plugin's --config-file as DEFAULT_CONFIG and
    its fallbacks, and signals `kgpu mps-control-daemon` in the pod's shared process namespace;
    the link resolves in the daemon's container (the ConfigMap at the same path); only the
    config-manager containers hold the service-account token."""
    cm_help = help_text("config-manager")
    if cm_help is None:
        problem("`kgpu config-manager --help` failed: the binary has no such subcommand")
        return
    cm_opts = parse_help(cm_help)
    cm_env_known = {e for o in cm_opts.values() for e in o["env"]}
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    kspec = pod_spec(daemonset())
    kvol = {v["name"]: v for v in kspec["volumes"]}
    dp = [x for x in kspec["containers"] if x["args"][0] == "device-plugin"][0]
    dp_env = {e["name"]: e.get("value") for e in dp.get("env", [])}
    dp_cfg = dict(split_args(dp["args"][1:])).get("--config-file", "")
    srcdir = dp_env.get("CONFIG_FILE_SRCDIR")
    dp_src_vol = [kvol[m["name"]] for m in dp.get("volumeMounts", []) if m["mountPath"] == srcdir]
    if not srcdir or not dp_src_vol:
        problem("daemonset.yaml: the device plugin has no CONFIG_FILE_SRCDIR mount to compare the MPS pod's with")
        return
    if spec.get("shareProcessNamespace") is not True:
        problem(f"{where}: shareProcessNamespace must be true (config-manager signals the daemon)")
    if spec.get("automountServiceAccountToken") is not False:
        problem(f"{where}: automountServiceAccountToken must be false (only config-manager gets the token)")
    cfg = dict(split_args(daemon["args"][1:])).get("--config-file")
    managers = {}
    for kind in ("initContainers", "containers"):
        for c in spec.get(kind, []):
            if (c.get("args") or [None])[0] == "config-manager":
                managers[kind] = managers.get(kind, []) + [c]
    if len(managers.get("initContainers", [])) != 1 or len(managers.get("containers", [])) != 1:
        problem(f"{where}: needs `kgpu config-manager` once as an init container and once as a sidecar")
        return
    for kind, c in (("initContainers", managers["initContainers"][0]), ("containers", managers["containers"][0])):
        cw = f"{where}: {c['name']}"
        args = dict(split_args(c["args"][1:]))
        for flag in args:
            if flag not in cm_opts:
                problem(f"{cw}: `kgpu config-manager` has no flag {flag}")
        oneshot = kind == "initContainers"
        if ("--oneshot" in args) != oneshot or (oneshot and args.get("--send-signal") != "false"):
            problem(f"{cw}: the init container runs --oneshot --send-signal=false, the sidecar neither")
        env = {e["name"]: e for e in c.get("env", [])}
        for name in env:
            if name not in cm_env_known:
                problem(f"{cw}: env {name} is not read by `kgpu config-manager`")
        val = lambda n: env.get(n, {}).get("value")
        if env.get("NODE_NAME", {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") != "spec.nodeName":
            problem(f"{cw}: NODE_NAME must come from spec.nodeName")
        want = {"CONFIG_FILE_SRCDIR": srcdir, "CONFIG_FILE_DST": cfg,
                "DEFAULT_CONFIG": pathlib.PurePosixPath(dp_cfg).name,
                "FALLBACK_STRATEGIES": "named,single", "PROCESS_TO_SIGNAL": "kgpu mps-control-daemon"}
        for name, value in want.items():
            if val(name) != value:
                problem(f"{cw}: {name} {val(name)!r}, expected {value!r} (what the device plugin picks, linked "
                        "where the daemon reads it)")
        mounts = {m["mountPath"]: m for m in c.get("volumeMounts", [])}
        if volumes.get(mounts.get(srcdir, {}).get("name"), {}).get("configMap") != dp_src_vol[0].get("configMap"):
            problem(f"{cw}: {srcdir} must be the device plugin's ConfigMap")
        dst_dir = str(pathlib.PurePosixPath(cfg or "/").parent)
        if dst_dir not in mounts or mounts[dst_dir].get("readOnly"):
            problem(f"{cw}: {dst_dir} must be mounted writable (the link is made there)")
        token = mounts.get("/var/run/secrets/kubernetes.io/serviceaccount")
        sources = volumes.get((token or {}).get("name"), {}).get("projected", {}).get("sources", [])
        if not any("serviceAccountToken" in x for x in sources):
            problem(f"{cw}: needs the service-account token (a projected volume) to read its Node")
    dmounts = {m["mountPath"]: m for m in daemon.get("volumeMounts", [])}
    if dmounts.get(srcdir, {}).get("name") != mounts.get(srcdir, {}).get("name"):
        problem(f"{where}: the daemon must mount the configs at {srcdir} too (the link points there)")
    dst_dir = str(pathlib.PurePosixPath(cfg or "/").parent)
    if dmounts.get(dst_dir, {}).get("name") != mounts.get(dst_dir, {}).get("name"):
        problem(f"{where}: the daemon must mount {dst_dir}, where config-manager links its --config-file")
    if "/var/run/secrets/kubernetes.io/serviceaccount" in dmounts:
        problem(f"{where}: the privileged daemon must not hold the service-account token")


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
    check_mps_config_manager(where, spec, c)
    # The chart renders the same steps.
    tmpl = (SRC / "deploy/helm/kgpu/templates/mps-control-daemon.yaml").read_text()
    for needle in ("nvidia.com/mps.capable: \"true\"", "- mount-shm", "mountPropagation: Bidirectional",
                   "- --config-file=/config/config.yaml", "mountPath: /dev/shm", "value: compute,utility",
                   "shareProcessNamespace: true", "value: kgpu mps-control-daemon", "- --oneshot"):
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
    "mps": check_mps, "helm-prometheusrule": check_helm_prometheusrule, "helm-toolkit": check_helm_toolkit,
    "helm-webconfig": check_helm_webconfig, "docs-figures": check_docs_figures,
    "docs-manifests": check_docs_manifests, "docs-commands": check_docs_commands, "setup": check_setup,
}

if __name__ == "__main__":
    check = sys.argv[4]
    CHECKS[check](*sys.argv[5:])
    for p in problems:
        print(p, file=sys.stderr)
    if not problems:
        print(f"{check} {' '.join(sys.argv[5:])}: ok")
    sys.exit(1 if problems else 0)
