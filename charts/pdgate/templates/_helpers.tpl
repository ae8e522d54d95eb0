{{/*
Names follow GIE's inferencepool chart: the EPP objects are "<release>-epp", the InferencePool is
"<release>", so Gateways, HTTPRoutes and dashboards written for that chart find the same objects.
*/}}
{{- define "pdgate.eppName" -}}
{{- $base := .Release.Name | default "default-pool" | lower | trim | trunc 40 -}}
{{ $base }}-epp
{{- end -}}

{{- define "pdgate.poolName" -}}
{{- .Release.Name -}}
{{- end -}}

{{/* Cluster-scoped objects carry the namespace too, so two releases of one name never collide. */}}
{{- define "pdgate.clusterRBACName" -}}
{{- $base := .Release.Name | default "default-pool" | lower | trim | trunc 40 -}}
{{- $ns := .Release.Namespace | default "default" | lower | trim | trunc 40 -}}
{{- printf "%s-%s-epp" $base $ns | trunc 84 -}}
{{- end -}}

{{- define "pdgate.sidecarName" -}}
{{- $base := .Release.Name | lower | trim | trunc 40 -}}
{{ $base }}-sidecar
{{- end -}}

{{- define "pdgate.redisName" -}}
{{- $base := .Release.Name | lower | trim | trunc 40 -}}
{{ $base }}-redis
{{- end -}}

{{/* Labels of the EPP's objects. */}}
{{- define "pdgate.labels" -}}
app.kubernetes.io/name: {{ include "pdgate.eppName" . }}
{{ include "pdgate.commonLabels" . }}
{{- end -}}

{{/* Labels every object of the release carries; add app.kubernetes.io/name per component. */}}
{{- define "pdgate.commonLabels" -}}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: pdgate
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- if .Chart.AppVersion }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}
{{- end -}}

{{/* Same selector label as GIE's chart. */}}
{{- define "pdgate.eppSelectorLabels" -}}
inferencepool: {{ include "pdgate.eppName" . }}
{{- end -}}

{{- define "pdgate.image" -}}
{{- $img := .image -}}
{{- $tag := $img.tag | default .root.Chart.AppVersion -}}
{{- if $img.registry -}}
{{ $img.registry }}/{{ $img.repository }}:{{ $tag }}
{{- else -}}
{{ $img.repository }}:{{ $tag }}
{{- end -}}
{{- end -}}

{{/* True when more than one EPP replica elects a leader. */}}
{{- define "pdgate.leaderElection" -}}
{{- if and (gt (int .Values.inferenceExtension.replicas) 1) (eq .Values.inferenceExtension.ha.mode "leader-election") -}}
true
{{- end -}}
{{- end -}}

{{/* host:port of the Redis the shared ledger uses, empty when none. */}}
{{- define "pdgate.redisAddress" -}}
{{- if .Values.redis.address -}}
{{ .Values.redis.address }}
{{- else if .Values.redis.enabled -}}
{{ include "pdgate.redisName" . }}.{{ .Release.Namespace }}.svc:{{ .Values.redis.port }}
{{- end -}}
{{- end -}}

{{/* The engine whose metric names the EPP reads by default. */}}
{{- define "pdgate.metricsPath" -}}
{{- if .Values.inferenceExtension.metricsDataSource.path -}}
{{ .Values.inferenceExtension.metricsDataSource.path }}
{{- else if and .Values.modelServers.enabled .Values.modelServers.simulator.enabled -}}
/metrics
{{- else if eq .Values.inferencePool.modelServerType "trtllm-serve" -}}
/prometheus/metrics
{{- else -}}
/metrics
{{- end -}}
{{- end -}}

{{- define "pdgate.parser" -}}
{{- if .Values.inferencePool.parser -}}
{{ .Values.inferencePool.parser }}
{{- else if and (eq .Values.inferencePool.modelServerType "vllm") (eq .Values.inferencePool.modelServerProtocol "grpc") -}}
vllmgrpc-parser
{{- end -}}
{{- end -}}

{{/*
pdgate.goMemLimit: the EPP's GOMEMLIMIT. An explicit inferenceExtension.goMemLimit wins ("off"
sets none); otherwise 90 % of the container's memory limit when it is written in Mi or Gi, so
the Go GC tightens before the kernel kills the container.
*/}}
{{- define "pdgate.goMemLimit" -}}
{{- $ie := .Values.inferenceExtension -}}
{{- $set := $ie.goMemLimit | default "" | toString -}}
{{- if eq $set "off" -}}
{{- else if $set -}}
{{- $set -}}
{{- else -}}
{{- $lim := "" -}}
{{- with $ie.resources }}{{ with .limits }}{{ $lim = .memory | default "" | toString }}{{ end }}{{ end -}}
{{- if regexMatch "^[0-9]+Gi$" $lim -}}
{{- div (mul (trimSuffix "Gi" $lim | atoi) 1024 9) 10 }}MiB
{{- else if regexMatch "^[0-9]+Mi$" $lim -}}
{{- div (mul (trimSuffix "Mi" $lim | atoi) 9) 10 }}MiB
{{- end -}}
{{- end -}}
{{- end -}}
