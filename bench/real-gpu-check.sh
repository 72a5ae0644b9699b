#!/bin/bash
# kgpu and NVIDIA's tools side by side on a node with a real driver (no kubelet, no containerd
# needed): what the simulator cannot show. Writes every output under OUT and a summary on stdout.
#
#   bench/real-gpu-check.sh KGPU PROBE PEERS OUT
#
# KGPU: the kgpu binary; PROBE: build/release/bench/kgpu_plugin_probe; PEERS: a folder with
# NVIDIA's gpu-feature-discovery, nvidia-ctk and nvidia-device-plugin (plain or .xz, as in
# ../shared/peers/nvidia); OUT: a folder for the results. Needs root, nvidia-smi, curl or python3,
# and for the XID step python3 with CuPy (or nvcc): it runs one kernel that writes to an unmapped
# address, which raises XID 31 (an application's page fault: the GPU itself is not affected).
# Changes nothing on the card (no MIG mode, clocks, persistence or reset).
set -u
KGPU=$1 PROBE=$2 PEERS=$3 OUT=$4
mkdir -p "$OUT"
WORK=$(mktemp -d /tmp/kgpu-real-XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$WORK"' EXIT
step() { echo; echo "=== $* ($(date +%T))"; }

unpack() {  # NAME -> $WORK/NAME
    if [ -x "$PEERS/$1" ]; then cp "$PEERS/$1" "$WORK/$1"
    elif command -v xz >/dev/null; then xz -dc "$PEERS/$1.xz" > "$WORK/$1"
    else python3 -c 'import lzma,sys; open(sys.argv[2],"wb").write(lzma.open(sys.argv[1]).read())' "$PEERS/$1.xz" "$WORK/$1"
    fi
    chmod 755 "$WORK/$1"
}
for p in gpu-feature-discovery nvidia-ctk nvidia-device-plugin; do unpack $p; done

scrape() {  # PORT FILE
    if command -v curl >/dev/null; then curl -s "http://127.0.0.1:$1/metrics" > "$2"
    else python3 -c 'import sys,urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1]).read().decode())' "http://127.0.0.1:$1/metrics" > "$2"
    fi
}

raise_xid31() {  # one kernel writes 1 TiB past its buffer
    cat > "$WORK/xid.py" <<'PY'
import cupy as cp
k = cp.RawKernel(r'''extern "C" __global__ void k(int* p) { *(volatile int*)((char*)p + (1ull << 40)) = 1; }''', 'k')
a = cp.zeros(1, dtype=cp.int32)
k((1,), (1,), (a,))
cp.cuda.runtime.deviceSynchronize()
PY
    timeout 60 python3 "$WORK/xid.py" > "$WORK/xid.log" 2>&1
    echo "xid kernel: exit $? $(tail -1 "$WORK/xid.log")"
}

step "the node"
uname -a
cat /proc/driver/nvidia/version 2>&1 | head -2
nvidia-smi 2>&1 | tee "$OUT/nvidia-smi.txt"
nvidia-smi -q > "$OUT/nvidia-smi-q.txt" 2>&1
nvidia-smi -q -x > "$OUT/nvidia-smi-q.xml" 2>&1
nvidia-smi topo -m 2>&1
ls -la /dev/nvidia* /dev/nvidia-caps 2>&1
ldconfig -p | grep -E "nvidia|cuda" | head -30
grep -h . /etc/ld.so.conf.d/* 2>/dev/null

step "kgpu info / smi"
timeout 60 "$KGPU" info 2>&1
time (timeout 60 "$KGPU" info --json > "$OUT/kgpu-info.json" 2>&1; echo "kgpu info --json: exit $?")
time nvidia-smi -L
timeout 60 "$KGPU" smi 2>&1
diff <(nvidia-smi -L 2>&1) <(timeout 60 "$KGPU" smi -L 2>&1) && echo "smi -L: same"

step "labels: GFD v0.18.2 and kgpu labels"
for s in none single mixed; do
    timeout 60 "$WORK/gpu-feature-discovery" --oneshot --no-timestamp --mig-strategy $s --output-file "$WORK/gfd-$s" > "$WORK/gfd-$s.log" 2>&1
    echo "GFD ($s): exit $?"
    timeout 60 "$KGPU" labels --oneshot --no-timestamp --mig-strategy $s --output-file "$WORK/kgpu-$s" > "$WORK/kgpu-labels-$s.log" 2>&1
    echo "kgpu labels ($s): exit $?"
    diff <(sort "$WORK/gfd-$s" 2>&1) <(sort "$WORK/kgpu-$s" 2>&1) && echo "labels ($s): same"
done
cat "$WORK/gfd-none" "$WORK/gfd-none.log" | tail -80
cp "$WORK/gfd-none" "$OUT/labels-gfd.txt" 2>/dev/null; cp "$WORK/kgpu-none" "$OUT/labels-kgpu.txt" 2>/dev/null

step "CDI: nvidia-ctk cdi generate v1.20.0 and kgpu cdi generate"
timeout 60 "$WORK/nvidia-ctk" cdi generate --output "$WORK/ctk.yaml" > "$WORK/ctk.log" 2>&1; echo "nvidia-ctk: exit $?"; tail -20 "$WORK/ctk.log"
timeout 60 "$KGPU" cdi generate --output "$WORK/kgpu.yaml" > "$WORK/kgpu-cdi.log" 2>&1; echo "kgpu cdi: exit $?"; tail -20 "$WORK/kgpu-cdi.log"
diff "$WORK/ctk.yaml" "$WORK/kgpu.yaml" && echo "CDI: same"
cp "$WORK/ctk.yaml" "$OUT/cdi-ctk.yaml" 2>/dev/null; cp "$WORK/kgpu.yaml" "$OUT/cdi-kgpu.yaml" 2>/dev/null

step "kgpu doctor"
timeout 60 "$KGPU" doctor 2>&1 | head -120

step "exporter under load"
awk -F, '{print $1 ", " $2 ", x"}' "$(dirname "$0")/real-gpu-counters.txt" > "$WORK/all.csv"
"$KGPU" exporter -a 127.0.0.1:9400 -c 1000 -f "$WORK/all.csv" > "$WORK/exporter.log" 2>&1 &
EXPORTER=$!
sleep 3
scrape 9400 "$OUT/metrics-idle.txt"
Q=timestamp,utilization.gpu,utilization.memory,memory.used,memory.free,memory.reserved,memory.total,temperature.gpu,temperature.memory,power.draw,clocks.sm,clocks.mem,pcie.link.gen.current,pcie.link.width.current
nvidia-smi --query-gpu=$Q --format=csv > "$OUT/smi-idle.csv" 2>&1
python3 -c '
import torch, time
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
t = time.time()
while time.time() - t < 14:
    b = a @ a
    torch.cuda.synchronize()
' > "$WORK/load.log" 2>&1 &
LOAD=$!
sleep 9
nvidia-smi --query-gpu=$Q --format=csv > "$OUT/smi-load.csv" 2>&1
scrape 9400 "$OUT/metrics-load.txt"
nvidia-smi --query-gpu=$Q --format=csv,noheader >> "$OUT/smi-load.csv" 2>&1
wait $LOAD; echo "load: exit $? $(tail -1 "$WORK/load.log")"
grep -v "^#" "$OUT/metrics-load.txt" | sed 's/{.*}//' | head -60
cat "$OUT/smi-idle.csv" "$OUT/smi-load.csv"
echo "exporter RSS: $(grep VmRSS /proc/$EXPORTER/status)"

step "device plugins and a real XID 31"
mkdir -p /var/lib/kubelet/device-plugins
printf 'version: v1\nhealth:\n  ignoredXids: []\n' > "$WORK/unignore.yaml"
run_probe() {  # NAME WATCH XID_AT PROBE-ARGS...
    local name=$1 watch=$2 at=$3; shift 3
    ( sleep "$at"; raise_xid31 ) > "$WORK/xid-$name.txt" 2>&1 &
    local xid=$!
    "$PROBE" --watch "$watch" "$@" > "$OUT/probe-$name.txt" 2>&1
    echo "probe $name: exit $?"; wait $xid
    cat "$WORK/xid-$name.txt"
    grep -v "^flags\.\|^health\.\|^sharing\.\|^resources\.\|^imex\.\|^cdi\|^configFile" "$OUT/probe-$name.txt" | head -60
}
run_probe kgpu 25 6 --dir "$WORK/dp" -- "$KGPU" device-plugin --device-plugin-path '{dir}' --cdi-spec-dir "$WORK/cdi" --log-level debug
run_probe kgpu-unignored 25 6 --dir "$WORK/dp2" -- "$KGPU" device-plugin --device-plugin-path '{dir}' --cdi-spec-dir "$WORK/cdi" --config-file "$WORK/unignore.yaml"
run_probe nvidia 25 8 --dir /var/lib/kubelet/device-plugins -- "$WORK/nvidia-device-plugin"
scrape 9400 "$OUT/metrics-after-xid.txt"
grep -E "XID|xid" "$OUT/metrics-after-xid.txt" | head
kill $EXPORTER; wait $EXPORTER 2>/dev/null
tail -20 "$WORK/exporter.log"
cp "$WORK"/*.log "$WORK"/*.txt "$WORK"/gfd-* "$WORK"/kgpu-* "$OUT"/ 2>/dev/null
step "done"
