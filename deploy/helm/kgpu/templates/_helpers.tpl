{{/* Labels on every object. */}}
{{- define "kgpu.labels" -}}
app.kubernetes.io/name: kgpu
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The image of every container. */}}
{{- define "kgpu.image" -}}
{{ printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end -}}

{{/* Root (the host sockets and directories are root's), no capabilities, no escalation. */}}
{{- define "kgpu.securityContext" -}}
runAsUser: 0
runAsNonRoot: false
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
{{- end -}}

{{/* What the nvidia runtime needs to inject libnvidia-ml.so.1 and /dev/nvidia*; called with the
     chart's context, or with (dict "Values" .Values "capabilities" "compute,utility") for the
     device plugin (nvidia-cuda-mps-control comes with compute). */}}
{{- define "kgpu.nvidiaEnv" -}}
- name: NVIDIA_VISIBLE_DEVICES
  value: all
- name: NVIDIA_DRIVER_CAPABILITIES
  value: {{ .capabilities | default "utility" }}
{{- if ne .Values.driverRoot "/" }}
- name: NVIDIA_DRIVER_ROOT
  value: {{ .Values.driverRoot | quote }}
{{- end }}
{{- end -}}

{{/* The device plugin's deviceListStrategy: the value, else what the node's runtime accepts
     (values.yaml says why): volume-mounts under kgpu's runtime, envvar under NVIDIA's toolkit. */}}
{{- define "kgpu.deviceListStrategy" -}}
{{- if .Values.deviceListStrategy -}}
{{ .Values.deviceListStrategy }}
{{- else if .Values.runtimeInstall.enabled -}}
volume-mounts
{{- else -}}
envvar
{{- end -}}
{{- end -}}

{{/* The device plugin's --nvidia-cdi-hook-path: the value, else kgpu's hook where
     kgpu-runtime-install puts it; empty (no flag: the plugin's default, NVIDIA's
     /usr/bin/nvidia-cdi-hook) under NVIDIA's toolkit. */}}
{{- define "kgpu.nvidiaHookPath" -}}
{{- if .Values.cdi.nvidiaHookPath -}}
{{ .Values.cdi.nvidiaHookPath }}
{{- else if .Values.runtimeInstall.enabled -}}
/usr/local/kgpu/nvidia-cdi-hook
{{- end -}}
{{- end -}}

{{/* "true" when the exporter serves TLS or basic auth (exporter.webConfig). */}}
{{- define "kgpu.webConfig" -}}
{{- if and .Values.exporter.enabled (or .Values.exporter.webConfig.tlsSecretName .Values.exporter.webConfig.basicAuthUsers) -}}
true
{{- end -}}
{{- end -}}

{{/* The exporter's probe handler: /health over HTTP or HTTPS; the port alone with basic auth
     (every path asks for credentials) or client certificates (the handshake asks for one): the
     kubelet's probes have neither. */}}
{{- define "kgpu.exporterProbe" -}}
{{- if or .Values.exporter.webConfig.basicAuthUsers (and .Values.exporter.webConfig.tlsSecretName .Values.exporter.webConfig.clientAuthType) -}}
tcpSocket:
  port: metrics
{{- else -}}
httpGet:
  path: /health
  port: metrics
  {{- if .Values.exporter.webConfig.tlsSecretName }}
  scheme: HTTPS
  {{- end }}
{{- end -}}
{{- end -}}
