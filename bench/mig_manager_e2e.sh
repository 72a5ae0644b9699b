#!/usr/bin/env bash
# MIG by node label, end to end (issue #28): the time from `kubectl label node ...
# nvidia.com/mig.config=<name>` to the node's allocatable in the API showing the new layout, on an
# idle simulated 8-GPU node (sim/nodes/dgx-h100.yaml: 8x H100, MIG off, nothing running), through
# a real API server and kubelet (kube-mini, ../shared/tools/kube), with `kgpu device-plugin`
# (strategy mixed) and `kgpu mig-manager` on the host as the manifests run them. Each run:
# all-1g.10gb (allocatable nvidia.com/mig-1g.10gb 0 -> 56: 8 mode changes, 56 GPU instances),
# then all-disabled (nvidia.com/gpu back to 8). Two figures each: the label to
# nvidia.com/mig.config.state=success in the API (kgpu's part: the watch, the changes, the state
# label), and the label to the new allocatable (on top: the kubelet's node status update, every
# 5 s on kube-mini as its nodeStatusUpdateFrequency says, 10 s by default). The API is read every
# 100 ms, so each figure carries up to ~0.1 s of polling (and kubectl's own start, ~0.1 s).
#
#   sudo bench/mig_manager_e2e.sh [runs]        (root: kube-mini; default 5 runs)
#
# Prints each run's figures and their medians. Leaves nothing behind (kube-mini down).
set -euo pipefail
runs=${1:-5}
src=$(cd "$(dirname "$0")/.." && pwd)
build=${KGPU_BUILD:-$src/build/release}
shared=${KGPU_SHARED_DIR:-$src/../shared}
kgpu=$build/kgpu
sim=$build/sim/libnvidia-ml.so.1
[[ -x $kgpu && -f $sim ]] || { echo "build first: $kgpu and $sim are needed" >&2; exit 1; }
[[ -x $shared/tools/kube/kube-mini.sh ]] || { echo "no $shared/tools/kube (kube-mini)" >&2; exit 1; }

dir=$(mktemp -d /tmp/kgpu-bench-mig-XXXXXX)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    bash "$shared/tools/kube/kube-mini.sh" down "$dir/k" >/dev/null 2>&1 || true
    rm -rf "$dir"
}
trap cleanup EXIT
bash "$shared/tools/kube/kube-mini.sh" up "$dir/k" >/dev/null
# shellcheck disable=SC1091
. "$dir/k/env"

export KGPU_SIM_NODE=$src/sim/nodes/dgx-h100.yaml KGPU_SIM_EVENTS=$dir/events
: > "$KGPU_SIM_EVENTS"
mkdir -p "$dir/run"
printf 'version: v1\nflags:\n  migStrategy: mixed\n' > "$dir/plugin.yaml"
printf 'version: v1\nmig-configs:\n  all-disabled:\n    - devices: all\n      mig-enabled: false\n  all-1g.10gb:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {"1g.10gb": 7}\n' > "$dir/mig.yaml"
"$kgpu" device-plugin --nvml-library "$sim" --device-plugin-path "$KUBELET_DEVICE_PLUGINS_DIR" \
    --config-file "$dir/plugin.yaml" --cdi-spec-dir "$dir/cdi" --mig-paused-gpus-file "$dir/run/paused-gpus" \
    --node-health-events=false 2> "$dir/plugin.log" &
pids+=($!)
"$kgpu" mig-manager --nvml-library "$sim" -n "$KUBE_NODE_NAME" --kubeconfig "$KUBECONFIG" -f "$dir/mig.yaml" \
    --paused-gpus-file "$dir/run/paused-gpus" --pod-resources-kubelet-socket "$KUBELET_POD_RESOURCES_SOCKET" 2> "$dir/manager.log" &
pids+=($!)

allocatable() {  # allocatable of resource $1, "0" when absent
    local v
    v=$("$KUBECTL" get node "$KUBE_NODE_NAME" -o jsonpath="{.status.allocatable.${1//./\\.}}" 2>/dev/null || true)
    echo "${v:-0}"
}
state() {
    "$KUBECTL" get node "$KUBE_NODE_NAME" -o jsonpath='{.metadata.labels.nvidia\.com/mig\.config\.state}' 2>/dev/null || true
}
# Waits (60 s at most) until `$1` prints $2; prints the seconds since $3 (date +%s.%N).
until_is() {
    local deadline=$((SECONDS + 60))
    while [[ $(eval "$1") != "$2" ]]; do
        if ((SECONDS > deadline)); then
            echo "timeout: $1 is $(eval "$1"), not $2" >&2
            tail -20 "$dir/manager.log" "$dir/plugin.log" >&2
            exit 1
        fi
        sleep 0.1
    done
    awk -v now="$(date +%s.%N)" -v t0="$3" 'BEGIN { printf "%.3f\n", now - t0 }'
}
until_is "allocatable nvidia.com/gpu" 8 "$(date +%s.%N)" >/dev/null
# Labels the node config=$1 (the state label cleared first, so the wait sees this run's success)
# and prints "<to success> <to allocatable $2 = $3>".
switch() {
    "$KUBECTL" label node "$KUBE_NODE_NAME" nvidia.com/mig.config.state- >/dev/null
    local t0 s a
    t0=$(date +%s.%N)
    "$KUBECTL" label node "$KUBE_NODE_NAME" "nvidia.com/mig.config=$1" --overwrite >/dev/null
    s=$(until_is state success "$t0")
    a=$(until_is "allocatable $2" "$3" "$t0")
    echo "$s $a"
}

on_s=() on_a=() off_s=() off_a=()
for ((i = 1; i <= runs; i++)); do
    read -r s a < <(switch all-1g.10gb nvidia.com/mig-1g.10gb 56)
    on_s+=("$s") on_a+=("$a")
    read -r s a < <(switch all-disabled nvidia.com/gpu 8)
    off_s+=("$s") off_a+=("$a")
    printf 'run %d: all-1g.10gb -> state success %.2f s, allocatable mig-1g.10gb 56 %.2f s; all-disabled -> success %.2f s, nvidia.com/gpu 8 %.2f s\n' \
        "$i" "${on_s[-1]}" "${on_a[-1]}" "${off_s[-1]}" "${off_a[-1]}"
done
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
printf 'median of %d runs (8 idle GPUs): all-1g.10gb -> state success %.2f s, 56 MIG devices allocatable %.2f s; all-disabled -> success %.2f s, 8 GPUs allocatable %.2f s\n' \
    "$runs" "$(median "${on_s[@]}")" "$(median "${on_a[@]}")" "$(median "${off_s[@]}")" "$(median "${off_a[@]}")"
