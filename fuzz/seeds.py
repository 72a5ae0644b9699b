#!/usr/bin/python3
"""Writes the seed corpora fuzz/corpus/<target>/ from the test fixtures (run from anywhere:
/usr/bin/python3 fuzz/seeds.py). Each seed is named by the SHA-1 of its content, as libFuzzer
names its corpus files, so re-running adds what is new and duplicates nothing. Inputs that once
crashed a target are added by hand (fuzz/README.md) and are left alone here."""
import hashlib
import pathlib
import re
import struct
import subprocess
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
CORPUS = ROOT / "fuzz" / "corpus"
SEP = b"\n---8<---\n"


def mixed_pending_seeds():
    """doctor pending inputs with a List of mixed kinds (kubectl get pods,nodes,events -o json)."""
    import json
    node = {"kind": "Node", "metadata": {"name": "gpu-a"},
            "status": {"capacity": {"nvidia.com/gpu": "8"}, "allocatable": {"nvidia.com/gpu": "7"}}}
    holder = {"kind": "Pod", "metadata": {"namespace": "ml", "name": "holder"},
              "spec": {"nodeName": "gpu-a", "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]},
              "status": {"phase": "Running"}}
    event = {"kind": "Event", "metadata": {"namespace": "ml", "name": "train.1"},
             "involvedObject": {"kind": "Pod", "namespace": "ml", "name": "train"}, "type": "Warning",
             "reason": "FailedScheduling", "count": 3, "lastTimestamp": "2025-01-02T03:04:05Z",
             "source": {"component": "default-scheduler"},
             "message": "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."}
    train = {"kind": "Pod", "metadata": {"namespace": "ml", "name": "train"},
             "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "9"}}}]},
             "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                        "reason": "Unschedulable", "message": "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."}]}}
    mixed = json.dumps({"kind": "List", "items": [node, holder, event, {"kind": "Service", "metadata": {"name": "s"}}]}).encode()
    p = json.dumps(train).encode()
    return [p + SEP + mixed + SEP + mixed + SEP + b"null" + SEP + mixed,
            p + SEP + mixed + SEP + b"null" + SEP + b"null" + SEP + json.dumps({"items": [event]}).encode(),
            p + SEP + json.dumps({"items": [holder]}).encode()]


def put(target, data):
    if isinstance(data, str):
        data = data.encode()
    d = CORPUS / target
    d.mkdir(parents=True, exist_ok=True)
    (d / hashlib.sha1(data).hexdigest()).write_bytes(data)


def read(rel):
    return (ROOT / rel).read_bytes()


def raw_strings(rel, must_contain):
    """The C++ raw strings R"(...)" of a test file that contain `must_contain`."""
    text = (ROOT / rel).read_text()
    return [m for m in re.findall(r'R"\((.*?)\)"', text, re.S) if must_contain in m]


def configmap_yaml(rel):
    """The indented `config.yaml: |` block of a ConfigMap."""
    lines = (ROOT / rel).read_text().splitlines()
    out, inside = [], False
    for line in lines:
        if line.strip() == "config.yaml: |":
            inside = True
            continue
        if inside:
            if line and not line.startswith("    "):
                break
            out.append(line[4:])
    return "\n".join(out) + "\n"


def protoc_encode(proto, message, text):
    with tempfile.NamedTemporaryFile("w", suffix=".txtpb") as f:
        f.write(text)
        f.flush()
        with open(f.name, "rb") as src:
            return subprocess.run(["protoc", f"--proto_path={ROOT / 'proto'}", f"--encode={message}", proto],
                                  stdin=src, check=True, capture_output=True).stdout


# Device plugin and labels config (YAML).
configs = [read("tests/labels/fixtures/time-slicing.yaml"), read("tests/labels/fixtures/bad-sharing.yaml"),
           configmap_yaml("deploy/kubernetes/configmap.yaml").encode()]
configs += [s.encode() for s in raw_strings("tests/deviceplugin/config_test.cpp", "version: v1")]
configs += [b"version: v1\nflags: {plugin: {deviceListStrategy: \"envvar, cdi-cri\"}}\n",
            b"version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/mig-1g.10gb\n      replicas: 3\n"
            b"      devices: [\"0:1\", \"MIG-4b69808b-66a3-1662-f86c-3b76eedd0860\"]\n",
            b"version: v1\nsharing:\n  mps:\n    resources: []\n",
            b"version: v1\nhealth: {disabled: true, recoveryPeriod: 1h30m}\n"]
for c in configs:
    put("deviceplugin_config", c)

# Simulator fixtures.
for f in sorted((ROOT / "sim" / "nodes").glob("*.yaml")):
    put("sim_fixture", f.read_bytes())

# containerd configs: for runtime configure the first byte is the options (bit 0 set-as-default,
# 1 enable-cdi, 2 another runtime name, 3 drop-in).
tomls = sorted((ROOT / "tests" / "runtime" / "fixtures").glob("*.toml"))
tomls += sorted((ROOT / "tests" / "doctor" / "fixtures" / "containerd").rglob("*.toml"))
tomls.append(ROOT / "tests" / "doctor" / "hosts" / "healthy" / "etc" / "containerd" / "config.toml")
for i, f in enumerate(tomls):
    text = f.read_bytes()
    put("containerd_config", bytes([0]) + text)
    put("containerd_config", bytes([(i % 15) + 1]) + text)
    put("doctor_containerd", text)
put("containerd_config", bytes([3]))  # a new (empty) config

# runtime configure --dry-run: before and after.
for f in sorted((ROOT / "tests" / "runtime" / "expected").glob("*.toml")):
    base = f.name.split(".")[0]
    before = ROOT / "tests" / "runtime" / "fixtures" / (base + ".toml")
    if before.exists():
        put("diff", before.read_bytes() + SEP + f.read_bytes())
put("diff", b"a\nb\nc" + SEP + b"a\nx\nc\n")
put("diff", b"" + SEP + b"one line\n")

# Kernel text for doctor.
for f in sorted((ROOT / "tests" / "doctor" / "fixtures").glob("kern-*.log")):
    put("doctor_kernel_log", f.read_bytes())
for rel in ["proc/modules", "proc/driver/nvidia/version"]:
    p = ROOT / "tests" / "doctor" / "hosts" / "healthy" / rel
    if p.exists():
        put("doctor_kernel_log", p.read_bytes())

# doctor pending: pod, nodes, pods, quotas.
k = ROOT / "tests" / "doctor" / "fixtures" / "kubectl"
pod, nodes, pods, quotas = (read(k / n) for n in ["pod.json", "nodes.json", "pods.json", "quotas.json"])
put("doctor_pending", pod + SEP + nodes + SEP + pods + SEP + quotas)
put("doctor_pending", pod + SEP + nodes)
for shape in [b"1", b"[1]", b'"x"', b'{"items":[1]}', b'{"items":[{"metadata":[]}]}']:  # issue #14
    put("doctor_pending", pod + SEP + shape)
    put("doctor_pending", pod + SEP + nodes + SEP + shape + SEP + shape)
# issue #23: a mixed List (nodes, pods and events in one) for every option, and events
for seed in mixed_pending_seeds():
    put("doctor_pending", seed)

# /proc/<pid>/cgroup (shapes of tests/attribution/cgroup_test.cpp).
cid = "0b1c4e2b7f3d1a9e8c6b5a4f3e2d1c0b9a8f7e6d5c4b3a291807f6e5d4c3b2a1"
uid = "1f2e3d4c-5b6a-4978-8695-a4b3c2d1e0f9"
suid = uid.replace("-", "_")
for text in [f"0::/kubepods/burstable/pod{uid}/{cid}\n",
             f"0::/kubepods/pod{uid}/{cid}\n",
             f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{suid}.slice/cri-containerd-{cid}.scope\n",
             f"0::/kubepods.slice/kubepods-pod{suid}.slice/crio-{cid}.scope",
             f"12:memory:/kubepods/besteffort/pod{uid}/crio-{cid}\n11:cpu,cpuacct:/kubepods/besteffort/pod{uid}/{cid}\n0::/\n",
             f"0::/../../pod{uid}/{cid}/sub\r\n",
             "0::/kubepods/pod0123456789abcdef0123456789abcdef/" + cid + "\n",
             "0::/system.slice/containerd.service\n"]:
    put("cgroup", text)

# Device IDs (every form resolve_device_id knows; fuzz/node.h has these GPUs).
for i in ["GPU-5ad70d24-867c-2e2a-7049-b5408d9d30fb", "GPU-51f34de5-fb30-d2be-2d0f-a742c74f58f8::3", "1", "3::0",
          "MIG-4b69808b-66a3-1662-f86c-3b76eedd0860", "MIG-6fdb8a69-cebe-b4c1-ea4b-353499403a8a::1", "0:1", "3:2",
          "MIG-GPU-5ad70d24-867c-2e2a-7049-b5408d9d30fb/7/0", "nvidia.com/mig-1g.10gb.shared"]:
    put("device_id", i)

# PodResources and CRI answers (protobuf wire format, from text format).
put("podresources", protoc_encode("podresources_v1.proto", "v1.ListPodResourcesResponse", """
pod_resources { name: "trainer-0" namespace: "ml" containers { name: "main"
  devices { resource_name: "nvidia.com/gpu" device_ids: "GPU-5ad70d24-867c-2e2a-7049-b5408d9d30fb" device_ids: "1" } } }
pod_resources { name: "shared" namespace: "ml" containers { name: "w"
  devices { resource_name: "nvidia.com/gpu.shared" device_ids: "GPU-51f34de5-fb30-d2be-2d0f-a742c74f58f8::2" device_ids: "1::3" } } }
pod_resources { name: "mig" namespace: "infer" containers { name: "srv"
  devices { resource_name: "nvidia.com/mig-1g.10gb" device_ids: "MIG-4b69808b-66a3-1662-f86c-3b76eedd0860" device_ids: "3:2" } }
  containers { name: "cpu" devices { resource_name: "example.com/fpga" device_ids: "fpga0" } } }
"""))
put("podresources", protoc_encode("podresources_v1.proto", "v1.ListPodResourcesResponse", """
pod_resources { name: "renamed" namespace: "default" containers { name: "c"
  devices { resource_name: "example.com/shared-gpu" device_ids: "0:1" device_ids: "unknown-id" } } }
"""))
put("cri", protoc_encode("cri_runtime_v1.proto", "runtime.v1.ListContainersResponse", f"""
containers {{ id: "{cid}" pod_sandbox_id: "s1" metadata {{ name: "main" attempt: 1 }} state: CONTAINER_RUNNING
  labels {{ key: "io.kubernetes.pod.name" value: "trainer-0" }} labels {{ key: "io.kubernetes.pod.namespace" value: "ml" }}
  labels {{ key: "io.kubernetes.container.name" value: "main" }} }}
containers {{ id: "ffff" metadata {{ name: "ctr-made" }} }}
"""))

# dcgm-exporter counters CSV (-f) and the exporter's web config.
for f in sorted((ROOT / "tests" / "exporter" / "data").glob("*.csv")):
    put("counters_csv", f.read_bytes())
put("counters_csv", b'DCGM_FI_DEV_GPU_UTIL, gauge, "GPU utilization, in %."\n# comment\n'
                    b'DCGM_FI_DRIVER_VERSION, label, Driver version\n"DCGM_FI_DEV_FB_USED" , gauge , "a ""quoted"" help"\n')
put("counters_csv", b"DCGM_FI_DEV_GPU_UTIL gauge\n")
put("web_config", b"tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  min_version: TLS12\n"
                  b"  cipher_suites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]\n  curve_preferences: [X25519]\n"
                  b"  client_auth_type: RequireAndVerifyClientCert\n  client_allowed_sans: [a.example]\n")
put("web_config", b"basic_auth_users:\n  alice: $2y$10$abcdefghijklmnopqrstuu5Q3hV0OZ8xkSQ0Yp6g3RK8iE6Q3Fq5i\n"
                  b"http_server_config:\n  http2: false\n  headers:\n    X-Frame-Options: deny\n"
                  b"rate_limit:\n  interval: 1s500ms\n  burst: 10\n")
put("web_config", b"http_server_config: {}\n")
# kgpu mig apply -f: mig-parted configs (docs/mig.md), one with a subsystem filter and a mix that fits.
put("mig_config", b"""version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  all-1g.10gb:
    - device-filter: ["0x233010DE", "0x20B210DE"]
      devices: all
      mig-enabled: true
      mig-devices:
        "1g.10gb": 7
  all-balanced:
    - device-filter: "0x20B210DE:0x147F10DE"
      devices: [0, 1]
      mig-enabled: true
      mig-devices: {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}
""")
put("mig_config", b"""version: v1
mig-configs:
  mixed:
    - devices: [2]
      mig-enabled: true
      mig-devices: {"4g.40gb": 1, "3g.40gb": 1, "1g.10gb+me": 0, "3c.7g.80gb": 1}
""")
for s in raw_strings("tests/exporter/web_config_test.cpp", ":"):
    put("web_config", s)
# The device plugin's --mig-paused-gpus-file (kgpu mig-manager's file, or one written by hand).
put("paused_gpus", b"# GPUs the kgpu device plugin does not offer: kgpu mig-manager is applying MIG config 'all-1g.10gb'\n"
                   b"GPU-5ad70d24-867c-2e2a-7049-b5408d9d30fb\nGPU-51f34de5-fb30-d2be-2d0f-a742c74f58f8\n")
put("paused_gpus", b"  GPU-03bd6612-b354-b775-7d54-189b181b2d28  # by hand\r\n\n\tGPU-ABCDEF\n")
put("paused_gpus", b"GPU-5ad70d24\nGPU 2\n")

# PCI configuration spaces for the vGPU scan, from the PCI layout (tests/support/pci_config.h
# builds the same in C++): a GPU, a vGPU, records before the host driver record, a loop, a short
# read, a capability past the end.
def pci_config(caps, size=256, status_caps=True):
    b = bytearray(size)
    b[0:4] = bytes([0xde, 0x10, 0xb8, 0x1e])
    b[0x0a:0x0c] = bytes([0x02, 0x03])
    if size < 256:
        return bytes(b)
    if status_caps:
        b[0x06] = 0x10
    prev = 0x34
    for off, cid, data in caps:
        b[prev if prev == 0x34 else prev + 1] = off
        b[off] = cid
        b[off + 2:off + 2 + len(data)] = data
        prev = off
    return bytes(b)


def vgpu_cap(version, branch, before=b""):
    body = b"VF" + before + bytes([0, 22]) + version.ljust(10, b"\0") + branch.ljust(10, b"\0")
    return bytes([3 + len(body)]) + body


gpu_caps = [(0x60, 0x01, b"\x03\x06"), (0x68, 0x05, b""), (0x78, 0x10, b"\x02\x00")]
put("pci_config", pci_config(gpu_caps))
put("pci_config", pci_config(gpu_caps + [(0xc8, 0x09, vgpu_cap(b"550.54.16", b"r550_00"))]))
put("pci_config", pci_config(gpu_caps + [(0xa0, 0x09, vgpu_cap(b"535.161.05", b"r535_14", b"\x03\x06abcd\x07\x02"))]))
put("pci_config", pci_config([(0x60, 0x01, b""), (0x68, 0x05, b""), (0x60, 0x01, b"")]))
put("pci_config", pci_config(gpu_caps, size=64))
put("pci_config", pci_config(gpu_caps + [(0xf0, 0x09, bytes([27]) + b"VF\0\x16")]))

# HTTP request heads, as a client sends them on one connection (the exporter's server).
prom = ("GET /metrics HTTP/1.1\r\nHost: 10.0.0.7:9400\r\nUser-Agent: Prometheus/2.45.0\r\n"
        "Accept: application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1\r\n"
        "Accept-Encoding: gzip\r\nX-Prometheus-Scrape-Timeout-Seconds: 10\r\n\r\n")
for head in [prom,
             prom + "HEAD /health HTTP/1.1\r\nHost: x\r\n\r\nGET /%6detrics?x=1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
             "\r\n\r\nGET / HTTP/1.1\nHost: x\n\n\nGET /health HTTP/1.0\nConnection: keep-alive\n\n",
             "GET http://node:9400/metrics HTTP/1.1\r\nHost: node:9400\r\nAuthorization: Basic cHJvbWV0aGV1czpzM2NyZXQ=\r\n\r\n",
             "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello",
             "GET * HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip;q=0, *;q=0.5\r\nTransfer-Encoding: chunked\r\n\r\n",
             "GET / HTTP/2.0\r\n\r\n", "GET /x HTTP/1.1\r\n\r\n", "GET /x HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
             "GET /x HTTP/1.1\r\nHost: a\r\nX: a\x00b\r\n\r\n", "GET /x HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n",
             "GET /%zz HTTP/1.1\r\nHost: a\r\n\r\n", "GET /x HTTP/1.1\r\nHost: a\r\nX: " + "a" * 8200 + "\r\n\r\n"]:
    put("http_head", head)

# Docker's daemon.json for runtime configure: the first byte is the options (bit 0 set-as-default,
# 1 enable-cdi, 2 another runtime name, 3 an absolute runtime path).
daemons = [s for s in raw_strings("tests/runtime/nvidia_ctk_cases_test.cpp", '"') if s.lstrip().startswith("{")]
daemons += ['', '{}', '{\n    "runtimes": {\n        "nvidia": {\n            "path": "nvidia-container-runtime",\n'
            '            "args": []\n        }\n    }\n}\n',
            '{\n\t"features": {"buildkit": true},\n\t"log-opts": {"max-size": "10m", "max-file": "3"},\n'
            '\t"registry-mirrors": ["https://mirror.example"], "max-concurrent-downloads": 3, "debug": false\n}\n',
            '{"default-runtime": "runc", "runtimes": {"runsc": {"path": "/usr/bin/runsc", "runtimeArgs": ["--platform=kvm"]}},'
            ' "data-root": "/var/lib/docker", "x": 1.5e300, "y": null, "z": "\\u00e9\\ud83d\\ude00"}',
            '[1, 2]', '{"runtimes": []}', '{"features": "cdi"}', '{"a": 1,}']
for i, d in enumerate(daemons):
    put("docker_daemon_json", bytes([i % 16]) + d.encode())

# glibc's ld.so.cache (common/ld_cache.h): the new format alone, and after the old format (glibc
# < 2.32, ldconfig -c compat), with x86-64, i386, AArch64, unknown-architecture and non-ELF
# entries; one cut short, one counting absurdly many entries.
def ld_so_cache(entries, compat=False):
    new_size = 48 + 24 * len(entries)
    strings, offsets = b"", []
    for key, value, _ in entries:
        k = new_size + len(strings)
        strings += key + b"\0"
        v = new_size + len(strings)
        strings += value + b"\0"
        offsets.append((k, v))
    new = b"glibc-ld.so.cache1.1" + struct.pack("<II", len(entries), len(strings)) + bytes(20)
    for (_, _, flags), (k, v) in zip(entries, offsets):
        new += struct.pack("<iIIIQ", flags, k, v, 0, 0)
    if not compat:
        return new + strings
    old = b"ld.so-1.7.0\0" + struct.pack("<I", len(entries))
    pad = -(len(old) + 12 * len(entries)) % 8
    for (_, _, flags), (k, v) in zip(entries, offsets):
        old += struct.pack("<iII", flags, k + pad, v + pad)
    return old + bytes(pad) + new + strings


libs = [(b"libcuda.so.1", b"/usr/lib/x86_64-linux-gnu/nvidia/current/libcuda.so.1", 0x0303),
        (b"libcuda.so.1", b"/usr/lib/i386-linux-gnu/nvidia/current/libcuda.so.1", 0x0003),
        (b"libnvidia-ml.so.1", b"/usr/lib/aarch64-linux-gnu/libnvidia-ml.so.1", 0x0a03),
        (b"libfoo.so.1", b"/../../opt/libfoo.so.1", 0x0403),
        (b"libbar.so", b"/lib/libbar.so", 0x0300)]
put("ld_so_cache", ld_so_cache(libs))
put("ld_so_cache", ld_so_cache(libs[:1], compat=True))
put("ld_so_cache", ld_so_cache(libs, compat=True))
put("ld_so_cache", ld_so_cache(libs)[:100])
put("ld_so_cache", ld_so_cache(libs)[:20] + b"\xff\xff\xff\xff" + ld_so_cache(libs)[24:])

# The container runtime's config.json (toolkit/oci_edit.h, request.h): the first byte is the
# security settings (bit 0 accept NVIDIA_VISIBLE_DEVICES unprivileged, bit 1 volume mounts).
specs = [s.encode() for s in raw_strings("tests/toolkit/oci_edit_test.cpp", "ociVersion")]
specs += [s.encode() for s in raw_strings("tests/toolkit/runtime_unit_test.cpp", "ociVersion")]
specs += [b'{"ociVersion":"1.0.2","process":{"env":["NVIDIA_VISIBLE_DEVICES=all","NVIDIA_DRIVER_CAPABILITIES=compute,video",'
          b'"NVIDIA_REQUIRE_CUDA=cuda>=12.4 brand=tesla,driver>=535","CUDA_VERSION=12.4.1"],'
          b'"capabilities":{"bounding":["CAP_SYS_ADMIN"]}},"root":{"path":"rootfs"}}',
          b'{"ociVersion":"1.0.2","process":{"env":["NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices"]},'
          b'"mounts":[{"destination":"/var/run/nvidia-container-devices/GPU-2fbe396f","source":"/dev/null"},'
          b'{"destination":"/var/run/nvidia-container-devices/cdi/nvidia.com/gpu/0","source":"/dev/null"}]}',
          b'{"annotations":{"cdi.k8s.io/a":"nvidia.com/gpu=0,nvidia.com/gpu=1","cdi.k8s.io/b":"other.com/x=y"},'
          b'"hooks":{"prestart":[{"path":"/usr/bin/nvidia-container-runtime-hook","args":["nvidia-container-runtime-hook","prestart"]},'
          b'{"path":"/usr/local/bin/audit"},{"path":"nvidia-container-toolkit"}],"createContainer":[]}}',
          b'{"process":{"user":{"uid":1000,"gid":1000,"additionalGids":[44]},"env":["A=1","A=2"]},'
          b'"linux":{"devices":[{"path":"/dev/nvidia0","type":"c","major":195,"minor":0}],"resources":{"devices":[]}}}',
          b'{"x":' + b"[" * 600 + b"]" * 600 + b'}', b'{"process":{"env":"x"}}', b'[1]', b'{"a":', b'{"\\ud800":1}']
for i, spec in enumerate(specs):
    put("oci_spec", bytes([i % 4]) + spec)

print(f"seeds written under {CORPUS}")
