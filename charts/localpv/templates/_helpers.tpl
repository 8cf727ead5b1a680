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

{{/*
The StorageClass settings of one class as JSON: `{}` for defaults, `{"none": true}` when it renders none.
Absent means defaults (unlike the reference chart, where absent meant none: docs/migration.md).
*/}}
{{- define "localpv.storageClass" -}}
{{- $sc := dict -}}
{{- if hasKey . "storageClass" -}}
{{- $sc = .storageClass -}}
{{- end -}}
{{- if kindIs "invalid" $sc -}}{{- $sc = dict -}}{{- end -}}
{{- if kindIs "bool" $sc -}}
{{- $sc = ternary (dict) (dict "none" true) $sc -}}
{{- end -}}
{{- toJson $sc -}}
{{- end -}}

{{- define "localpv.extenderServiceName" -}}{{ include "localpv.extenderName" . }}{{- end -}}

{{/* The DNS name in the extender's certificate, which schedulers check (`tlsConfig.serverName`). */}}
{{- define "localpv.extenderServerName" -}}
{{- printf "%s.%s.svc" (include "localpv.extenderName" .) .Release.Namespace -}}
{{- end -}}

{{/* The Secret the extender serves from: the user's, or the one the chart or cert-manager fills. */}}
{{- define "localpv.extenderTLSSecret" -}}
{{- .Values.extender.tls.secretName | default (printf "%s-tls" (include "localpv.extenderName" .)) -}}
{{- end -}}

{{- define "localpv.schedulerClientSecret" -}}
{{- if eq .Values.extender.tls.source "secret" -}}
{{- required "scheduler.clientCertSecretName is required with extender.tls.clientAuth and tls.source secret" .Values.scheduler.clientCertSecretName -}}
{{- else -}}
{{- .Values.scheduler.clientCertSecretName | default (printf "%s-scheduler-client" (include "localpv.fullname" .)) -}}
{{- end -}}
{{- end -}}

{{/*
tls.source=generate: the CA, the extender's serving certificate and (with clientAuth) a scheduler client
certificate, as base64 PEM in a dict {ca, crt, key, clientCrt, clientKey}. Taken from the Secrets of an earlier
install when they exist (`lookup`), so `helm upgrade` keeps them and the schedulers' caData stays valid; made once
per rendering otherwise (kept in .Values so the Secret and the NOTES see the same CA).
*/}}
{{- define "localpv.generatedTLS" -}}
{{- if not (hasKey .Values "__localpvGeneratedTLS") -}}
{{- $tls := dict -}}
{{- $server := lookup "v1" "Secret" .Release.Namespace (include "localpv.extenderTLSSecret" .) -}}
{{- $client := lookup "v1" "Secret" .Release.Namespace (include "localpv.schedulerClientSecret" .) -}}
{{- if and $server $server.data (index $server.data "ca.crt") (index $server.data "tls.crt") -}}
{{- $_ := set $tls "ca" (index $server.data "ca.crt") -}}
{{- $_ := set $tls "crt" (index $server.data "tls.crt") -}}
{{- $_ := set $tls "key" (index $server.data "tls.key") -}}
{{- if and $client $client.data -}}
{{- $_ := set $tls "clientCrt" (index $client.data "tls.crt") -}}
{{- $_ := set $tls "clientKey" (index $client.data "tls.key") -}}
{{- end -}}
{{- else -}}
{{- $days := int .Values.extender.tls.generatedValidityDays -}}
{{- $ca := genCA (printf "%s-ca" (include "localpv.extenderName" .)) $days -}}
{{- $name := include "localpv.extenderName" . -}}
{{- $ns := .Release.Namespace -}}
{{- $dns := list $name (printf "%s.%s" $name $ns) (printf "%s.%s.svc" $name $ns) (printf "%s.%s.svc.cluster.local" $name $ns) -}}
{{- $ips := list -}}
{{- with .Values.extender.service.clusterIP -}}{{- $ips = append $ips . -}}{{- end -}}
{{- $cert := genSignedCert (include "localpv.extenderServerName" .) $ips $dns $days $ca -}}
{{- $_ := set $tls "ca" ($ca.Cert | b64enc) -}}
{{- $_ := set $tls "crt" ($cert.Cert | b64enc) -}}
{{- $_ := set $tls "key" ($cert.Key | b64enc) -}}
{{- $clientCert := genSignedCert "localpv-scheduler" nil nil $days $ca -}}
{{- $_ := set $tls "clientCrt" ($clientCert.Cert | b64enc) -}}
{{- $_ := set $tls "clientKey" ($clientCert.Key | b64enc) -}}
{{- end -}}
{{- $_ := set .Values "__localpvGeneratedTLS" $tls -}}
{{- end -}}
{{- toJson (index .Values "__localpvGeneratedTLS") -}}
{{- end -}}
