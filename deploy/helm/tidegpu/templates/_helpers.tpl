{{/* The release's base name: "<release>" when it already says tidegpu, else "<release>-tidegpu". */}}
{{- define "tidegpu.fullname" -}}
{{- if contains "tidegpu" .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-tidegpu" .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "tidegpu.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/part-of: tidegpu
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* The labels of an object that belongs to no one component. */}}
{{- define "tidegpu.labelsAll" -}}
{{ include "tidegpu.labels" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Selector labels of one component: include "tidegpu.selector" (list . "operator") */}}
{{- define "tidegpu.selector" -}}
app.kubernetes.io/name: tidegpu-{{ index . 1 }}
app.kubernetes.io/instance: {{ (index . 0).Release.Name }}
{{- end -}}

{{- define "tidegpu.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The Secret holding the admin token, empty under admin.insecure. */}}
{{- define "tidegpu.tokenSecret" -}}
{{- if not .Values.admin.insecure -}}
{{- default (printf "%s-admin-token" (include "tidegpu.fullname" .)) .Values.admin.existingSecret -}}
{{- end -}}
{{- end -}}

{{/* The admin token's environment variable (nothing under admin.insecure). */}}
{{- define "tidegpu.tokenEnv" -}}
{{- if not .Values.admin.insecure -}}
- name: TIDEGPU_ADMIN_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ include "tidegpu.tokenSecret" . }}
      key: {{ .Values.admin.secretKey }}
{{- end }}
{{- end -}}

{{- define "tidegpu.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "tidegpu.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
{{- end -}}
