{{/* Every file name the EPP ConfigMap holds, as a JSON array. */}}
{{- define "pdgate.configNames" -}}
{{- $names := list "pd-plugins.yaml" "default-plugins.yaml" -}}
{{- range $path, $_ := .Files.Glob "configs/*.yaml" -}}
{{- $names = append $names (base $path) -}}
{{- end -}}
{{- range $k, $_ := .Values.inferenceExtension.pluginsCustomConfig -}}
{{- $names = append $names $k -}}
{{- end -}}
{{- $names | uniq | toJson -}}
{{- end -}}

{{/* The text of one ConfigMap entry (dict "root" $ "name" FILE); a later source wins. */}}
{{- define "pdgate.configText" -}}
{{- $r := .root -}}
{{- if hasKey $r.Values.inferenceExtension.pluginsCustomConfig .name -}}
{{- index $r.Values.inferenceExtension.pluginsCustomConfig .name -}}
{{- else if eq .name "pd-plugins.yaml" -}}
{{- include "pdgate.pdConfig" $r -}}
{{- else if eq .name "default-plugins.yaml" -}}
{{- include "pdgate.gieDefaultConfig" $r -}}
{{- else -}}
{{- $r.Files.Get (printf "configs/%s" .name) -}}
{{- end -}}
{{- end -}}

{{/* The metrics source and extractor every rendered config uses. */}}
{{- define "pdgate.dataLayerPlugins" -}}
- type: metrics-data-source
  parameters:
    scheme: {{ .Values.inferenceExtension.metricsDataSource.scheme | quote }}
    path: {{ include "pdgate.metricsPath" . | quote }}
    insecureSkipVerify: {{ .Values.inferenceExtension.metricsDataSource.insecureSkipVerify }}
- type: core-metrics-extractor
{{- if ne .Values.inferencePool.modelServerType "vllm" }}
  parameters:
    defaultEngine: {{ .Values.inferencePool.modelServerType | quote }}
{{- end }}
{{- with include "pdgate.parser" . }}
- type: {{ . }}
{{- end }}
{{- end -}}

{{- define "pdgate.dataLayerSection" -}}
dataLayer:
  sources:
  - pluginRef: metrics-data-source
    extractors:
    - pluginRef: core-metrics-extractor
{{- with include "pdgate.parser" . }}
parser:
  pluginRef: {{ . }}
{{- end }}
{{- end -}}

{{/*
pd-plugins.yaml: llm-d's disaggregation plugin set as pdgate implements it. Decode always runs
and is the primary profile (Envoy routes to the decode pod's sidecar); prefill runs on another
pod when the decider approves, and its host:port goes to the sidecar in x-prefiller-host-port.
*/}}
{{- define "pdgate.pdConfig" -}}
{{- $pd := .Values.inferenceExtension.pdConfig -}}
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: prefill-filter
- type: decode-filter
- type: prefix-cache-scorer
- type: queue-scorer
- type: kv-cache-utilization-scorer
{{- if gt (float64 $pd.weights.inFlight) 0.0 }}
- type: inflight-load-producer
- type: inflight-load-scorer
  parameters:
    queueThresholdTokens: {{ int64 $pd.inFlightThresholdTokens }}
{{- end }}
- type: max-score-picker
{{- if $pd.alwaysDisaggregate }}
- name: pd-decider
  type: always-disagg-pd-decider
{{- else }}
- name: pd-decider
  type: prefix-based-pd-decider
  parameters:
    nonCachedTokens: {{ int $pd.nonCachedTokens }}
{{- end }}
- type: disagg-profile-handler
  parameters:
    deciders:
      prefill: pd-decider
{{ include "pdgate.dataLayerPlugins" . }}
{{- if not (include "pdgate.parser" .) }}
# pdgate's one-pass request parser; raw keeps the client's bytes (no plugin here needs the map).
- type: pdgate-openai-parser
  parameters:
    payload: raw
{{- end }}
schedulingProfiles:
{{- range $profile := list "prefill" "decode" }}
- name: {{ $profile }}
  plugins:
  - pluginRef: {{ $profile }}-filter
  - pluginRef: prefix-cache-scorer
    weight: {{ $pd.weights.prefixCache }}
  - pluginRef: queue-scorer
    weight: {{ $pd.weights.queue }}
  - pluginRef: kv-cache-utilization-scorer
    weight: {{ $pd.weights.kvCacheUtilization }}
{{- if and (eq $profile "decode") (gt (float64 $pd.weights.inFlight) 0.0) }}
  - pluginRef: inflight-load-scorer
    weight: {{ $pd.weights.inFlight }}
{{- end }}
  - pluginRef: max-score-picker
{{- end }}
{{ include "pdgate.dataLayerSection" . }}
{{- if not (include "pdgate.parser" .) }}
parser:
  pluginRef: pdgate-openai-parser
{{- end }}
{{- end -}}

{{/* default-plugins.yaml: GIE's default scheduling (no disaggregation), for parity with GIE's chart. */}}
{{- define "pdgate.gieDefaultConfig" -}}
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: queue-scorer
- type: kv-cache-utilization-scorer
- type: prefix-cache-scorer
{{ include "pdgate.dataLayerPlugins" . }}
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
    weight: 2
  - pluginRef: kv-cache-utilization-scorer
    weight: 2
  - pluginRef: prefix-cache-scorer
    weight: 3
{{ include "pdgate.dataLayerSection" . }}
{{- end -}}
