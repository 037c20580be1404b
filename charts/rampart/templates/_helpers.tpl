{{/* Labels every object carries. */}}
{{- define "rampart.labels" -}}
app.kubernetes.io/name: rampart
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: rampart
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{/* Selector labels of one component: include with (list $ "manager"). */}}
{{- define "rampart.selector" -}}
app.kubernetes.io/name: rampart
app.kubernetes.io/instance: {{ (index . 0).Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end }}

{{- define "rampart.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}
{{- end }}

{{/* Spread a component's replicas over nodes unless affinity is given: include with (list $ "manager" .Values.manager.affinity). */}}
{{- define "rampart.affinity" -}}
{{- if index . 2 }}
{{- toYaml (index . 2) }}
{{- else }}
podAntiAffinity:
  preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            {{- include "rampart.selector" (list (index . 0) (index . 1)) | nindent 12 }}
{{- end }}
{{- end }}

{{/* The restricted Pod Security profile, for Rampart's containers. */}}
{{- define "rampart.containerSecurity" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
runAsUser: 65532
capabilities:
  drop: [ALL]
seccompProfile:
  type: RuntimeDefault
{{- end }}
