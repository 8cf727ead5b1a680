{{/* The chart's name in object names and the app.kubernetes.io/name label (nameOverride). */}}
{{- define "localpv.name" -}}
{{- .Values.nameOverride | default .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{/* Object name prefix: the release name, unless it already contains the chart's name. */}}
{{- define "localpv.fullname" -}}
{{- $name := include "localpv.name" . -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "localpv.labels" -}}
app.kubernetes.io/name: {{ include "localpv.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Selector labels of one component: call with (dict "ctx" $ "component" "node"). */}}
{{- define "localpv.selector" -}}
app.kubernetes.io/name: {{ include "localpv.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/*
The image. A string (the reference chart's shape) is used as is, unless it is the reference provisioner's own
image, which cannot run localpv: then the default repository and tag (NOTES say so).
*/}}
{{- define "localpv.image" -}}
{{- if kindIs "string" .Values.image -}}
{{- if contains "local-volume-provisioner" .Values.image -}}
{{- printf "ghcr.io/localpv/localpv:%s" .Chart.AppVersion -}}
{{- else -}}
{{- tpl .Values.image . -}}
{{- end -}}
{{- else if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{- define "localpv.nodeName" -}}{{ include "localpv.fullname" . }}-node{{- end -}}
{{- define "localpv.extenderName" -}}{{ include "localpv.fullname" . }}-extender{{- end -}}
{{- define "localpv.schedulerObjName" -}}{{ include "localpv.fullname" . }}-scheduler{{- end -}}

{{- define "localpv.nodeServiceAccount" -}}
{{- $sa := (include "localpv.nodeValues" . | fromJson).serviceAccount -}}
{{- if $sa.create -}}
{{- $sa.name | default (include "localpv.nodeName" .) -}}
{{- else -}}
{{- $sa.name | default "default" -}}
{{- end -}}
{{- end -}}

{{- define "localpv.pullPolicy" -}}
{{- if kindIs "string" .Values.image -}}
{{- .Values.imagePullPolicy | default "IfNotPresent" -}}
{{- else -}}
{{- .Values.imagePullPolicy | default .Values.image.pullPolicy -}}
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
{{- $entry := omit . "name" "storageClass" "allowedTopologies" -}}
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

{{/*
The node agent's settings as JSON: `node.*`, overridden by the reference chart's top-level keys where a values file
from sig-storage-local-static-provisioner's chart sets them (docs/migration.md lists the mapping).
*/}}
{{- define "localpv.nodeValues" -}}
{{- $n := deepCopy .Values.node -}}
{{- $map := dict "tolerations" "tolerations" "affinity" "affinity" "resources" "resources" "priorityClassName" "priorityClassName" "podAnnotations" "podAnnotations" "podLabels" "podLabels" "updateStrategy" "updateStrategy" "privileged" "privileged" "mountDevVolume" "mountDev" "initContainers" "initContainers" "additionalVolumes" "extraVolumes" "additionalVolumeMounts" "extraVolumeMounts" "securityContext" "securityContext" -}}
{{- range $ref, $ours := $map -}}
{{- if and (hasKey $.Values $ref) (not (kindIs "invalid" (index $.Values $ref))) -}}
{{- $_ := set $n $ours (index $.Values $ref) -}}
{{- end -}}
{{- end -}}
{{- with .Values.nodeSelector -}}
{{- $_ := set $n "nodeSelector" (mergeOverwrite (deepCopy ($n.nodeSelector | default dict)) .) -}}
{{- end -}}
{{- with .Values.serviceAccount -}}
{{- $_ := set $n "serviceAccount" (mergeOverwrite (deepCopy $n.serviceAccount) .) -}}
{{- end -}}
{{- toJson $n -}}
{{- end -}}

{{/*
Reference-chart values that mean nothing here, one line each, for the NOTES (empty when there are none).
*/}}
{{- define "localpv.ignoredReferenceValues" -}}
{{- $v := .Values -}}
{{- if kindIs "string" $v.image }}{{ if contains "local-volume-provisioner" $v.image }}
  image: {{ $v.image }} is the reference provisioner's image; localpv runs its own ({{ include "localpv.image" . }}). Set image.repository/image.tag to choose it.
{{- end }}{{ end }}
{{- if $v.enableWindows }}
  enableWindows: localpv has no Windows agent; no Windows DaemonSet is created.
{{- end }}
{{- if $v.nodeSelectorWindows }}
  nodeSelectorWindows: ignored (no Windows agent).
{{- end }}
{{- if $v.hostPID }}
  hostPID: ignored; the agent does not need the host's PID namespace.
{{- end }}
{{- range $k := list "livenessProbe" "readinessProbe" "startupProbe" }}
{{- if index $v $k }}
  {{ $k }}: ignored; the agent has its own probes on /livez and /readyz (port node.port).
{{- end }}
{{- end }}
{{- if and $v.rbac $v.rbac.extraRules }}
  rbac.extraRules: ignored; the agent's roles are fixed (docs/security.md). Give init containers their own ServiceAccount.
{{- end }}
{{- if $v.useJobForCleaning }}
  useJobForCleaning: ignored; wipes run in the agent and resume after a restart.
{{- end }}
{{- if and (kindIs "map" $v.nodeCleanupController) $v.nodeCleanupController.enabled }}
  nodeCleanupController: no separate controller is deployed; the extender cleans up after deleted Nodes (extender.nodeCleanup: every class, Available PVs after grace {{ $.Values.extender.nodeCleanup.grace }}; claims only with deleteClaimsAfter set). docs/migration.md#node-cleanup compares the two.
{{- end }}
{{- range $v.classes }}
{{- $sc := include "localpv.storageClass" . | fromJson }}
{{- if and $sc.provisioner (ne $sc.provisioner "kubernetes.io/no-provisioner") }}
  classes[{{ .name }}].storageClass.provisioner: {{ $sc.provisioner }}: the StorageClass gets it, but the extender only scores claims of kubernetes.io/no-provisioner classes (VolumeBinding still binds them).
{{- end }}
{{- end }}
{{- end -}}

{{/*
The key of the startup taint the agent removes from its node once it has published the node's disks
(`removeNodeNotReadyTaint`, read as the agent reads it: true, "true", "yes", "on"...); empty when it removes none.
The DaemonSet tolerates it and the agent's role may patch Nodes only then.
*/}}
{{- define "localpv.startupTaint" -}}
{{- $on := .Values.removeNodeNotReadyTaint -}}
{{- if kindIs "string" $on -}}
{{- $on = has $on (list "y" "Y" "yes" "Yes" "YES" "true" "True" "TRUE" "on" "On" "ON") -}}
{{- end -}}
{{- if and (kindIs "bool" $on) $on -}}
{{- .Values.provisionerNotReadyNodeTaintKey | default "sig-storage-local-static-provisioner/agent-not-ready" -}}
{{- end -}}
{{- end -}}

{{/*
The discovery directories the admission policy guards, as JSON [[key, extra terms], ...]. A key is the directory
cleaned (filepath.Clean) with a trailing slash ("/" for the root), as the policy spells PV paths. The extra terms
are the class's `selector` terms, each spelled "key op v1,v2;...|field op v1;..." and joined by "#", exactly as the
policy spells a PV's node affinity terms: the agent's PVs carry them after the node's own term. `node.hostDirs`
entries have none (with `existingConfigMap` the chart cannot see a class's selector).
*/}}
{{- /* The admission policy's name when the chart renders it (admission-policy.yaml), else empty. */}}
{{- define "localpv.admissionPolicyName" -}}
{{- $dirs := include "localpv.policyDirs" . | fromJsonArray -}}
{{- if and .Values.node.enabled .Values.admissionPolicy.enabled $dirs (semverCompare ">=1.30.0-0" .Capabilities.KubeVersion.Version) -}}
{{- printf "%s-discovery-dirs" (include "localpv.fullname" .) -}}
{{- end -}}
{{- end -}}

{{- define "localpv.policyDirs" -}}
{{- $dirs := list -}}
{{- if not .Values.existingConfigMap -}}
{{- range .Values.classes -}}
{{- $terms := list -}}
{{- range .selector -}}
{{- $terms = append $terms (include "localpv.termKey" .) -}}
{{- end -}}
{{- $dirs = append $dirs (list (include "localpv.dirKey" .hostDir) (join "#" $terms)) -}}
{{- end -}}
{{- end -}}
{{- range .Values.node.hostDirs -}}
{{- $dirs = append $dirs (list (include "localpv.dirKey" .hostPath) "") -}}
{{- end -}}
{{- toJson $dirs -}}
{{- end -}}

{{- define "localpv.dirKey" -}}
{{- $c := clean . | trimAll "/" -}}
{{- if $c -}}/{{ $c }}/{{- else -}}/{{- end -}}
{{- end -}}

{{- define "localpv.termKey" -}}
{{- $exprs := list -}}
{{- range .matchExpressions -}}
{{- $exprs = append $exprs (printf "%s %s %s" .key .operator (join "," (.values | default list))) -}}
{{- end -}}
{{- $fields := list -}}
{{- range .matchFields -}}
{{- $fields = append $fields (printf "%s %s %s" .key .operator (join "," (.values | default list))) -}}
{{- end -}}
{{- printf "%s|%s" (join ";" $exprs) (join ";" $fields) -}}
{{- end -}}
