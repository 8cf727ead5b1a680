{{/* Object name prefix: the release name, unless it already says localpv. */}}
{{- define "localpv.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else if contains "localpv" .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-localpv" .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "localpv.labels" -}}
app.kubernetes.io/name: localpv
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Selector labels of one component: call with (dict "ctx" $ "component" "node"). */}}
{{- define "localpv.selector" -}}
app.kubernetes.io/name: localpv
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "localpv.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{- define "localpv.nodeName" -}}{{ include "localpv.fullname" . }}-node{{- end -}}
{{- define "localpv.extenderName" -}}{{ include "localpv.fullname" . }}-extender{{- end -}}
{{- define "localpv.schedulerObjName" -}}{{ include "localpv.fullname" . }}-scheduler{{- end -}}

{{- define "localpv.nodeServiceAccount" -}}
{{- if .Values.node.serviceAccount.create -}}
{{- .Values.node.serviceAccount.name | default (include "localpv.nodeName" .) -}}
{{- else -}}
{{- .Values.node.serviceAccount.name | default "default" -}}
{{- end -}}
{{- end -}}

{{- define "localpv.extenderServiceAccount" -}}
{{- if .Values.extender.serviceAccount.create -}}
{{- .Values.extender.serviceAccount.name | default (include "localpv.extenderName" .) -}}
{{- else -}}
{{- .Values.extender.serviceAccount.name | default "default" -}}
{{- end -}}
{{- end -}}

{{- define "localpv.configMapName" -}}
{{- .Values.existingConfigMap | default (printf "%s-config" (include "localpv.fullname" .)) -}}
{{- end -}}

{{/* The extender's in-cluster URL, as a scheduler calls it. */}}
{{- define "localpv.extenderURL" -}}
{{- printf "%s://%s.%s.svc:%d" (ternary "https" "http" .Values.extender.tls.enabled) (include "localpv.extenderName" .) .Release.Namespace (int .Values.extender.port) -}}
{{- end -}}

{{/*
The storageClassMap entry of one class: every key of the class except `name` and `storageClass`, which are chart
settings, not agent settings.
*/}}
{{- define "localpv.classEntry" -}}
{{- $entry := omit . "name" "storageClass" -}}
{{- toYaml $entry -}}
{{- end -}}

{{/* The host directories the DaemonSet mounts: every class's hostDir (at its mountDir) plus node.hostDirs. */}}
{{- define "localpv.hostDirs" -}}
{{- $dirs := list -}}
{{- if not .Values.existingConfigMap -}}
{{- range .Values.classes -}}
{{- $dirs = append $dirs (dict "hostPath" .hostDir "mountPath" (.mountDir | default .hostDir)) -}}
{{- end -}}
{{- end -}}
{{- range .Values.node.hostDirs -}}
{{- $dirs = append $dirs (dict "hostPath" .hostPath "mountPath" (.mountPath | default .hostPath)) -}}
{{- end -}}
{{- toJson $dirs -}}
{{- end -}}
