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
