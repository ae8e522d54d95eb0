{{/*
Cross-field checks values.schema.json cannot express. Each message names the value to fix.
*/}}
{{- define "pdgate.validate" -}}
{{- $ie := .Values.inferenceExtension -}}
{{- if and .Values.inferencePool.create (empty .Values.inferencePool.modelServers.matchLabels) -}}
{{- fail "inferencePool.modelServers.matchLabels is required: the labels that select this pool's model-server pods" -}}
{{- end -}}
{{- $configs := include "pdgate.configNames" . | fromJsonArray -}}
{{- if not (has $ie.pluginsConfigFile $configs) -}}
{{- fail (printf "inferenceExtension.pluginsConfigFile %q is not in the EPP ConfigMap; choose one of %s or add it under inferenceExtension.pluginsCustomConfig" $ie.pluginsConfigFile (join ", " $configs)) -}}
{{- end -}}
{{- if and $ie.pdConfig.alwaysDisaggregate (ne $ie.pluginsConfigFile "pd-plugins.yaml") -}}
{{- fail (printf "inferenceExtension.pdConfig.alwaysDisaggregate shapes pd-plugins.yaml only, but the EPP loads %s; set inferenceExtension.pluginsConfigFile=pd-plugins.yaml" $ie.pluginsConfigFile) -}}
{{- end -}}
{{- if and (eq $ie.ha.mode "active-active") (gt (int $ie.replicas) 1) (not (include "pdgate.redisAddress" .)) -}}
{{- fail "inferenceExtension.ha.mode=active-active with more than one replica shares the token-load ledger through Redis: set redis.enabled=true or redis.address" -}}
{{- end -}}
{{- if and (eq $ie.ha.mode "active-active") (gt (int $ie.replicas) 1) -}}
{{- $text := include "pdgate.configText" (dict "root" . "name" $ie.pluginsConfigFile) -}}
{{- if not (regexMatch "(?m)^\\s*-?\\s*type:\\s*[\"']?pd-token-ledger" $text) -}}
{{- fail (printf "inferenceExtension.ha.mode=active-active shares the token-load ledger between replicas, but %s has no pd-token-ledger plugin; choose a config with one (e.g. aibrix-pd.yaml) or use ha.mode=leader-election" $ie.pluginsConfigFile) -}}
{{- end -}}
{{- end -}}
{{- if and .Values.redis.enabled .Values.redis.address -}}
{{- fail "redis.enabled and redis.address are exclusive: the chart either runs Redis or uses yours" -}}
{{- end -}}
{{- /* GIE v1.5.0 refuses these flags at startup; the chart sets the others itself. */ -}}
{{- $deprecated := list "total-queued-requests-metric" "total-running-requests-metric" "kv-cache-usage-percentage-metric" "lora-info-metric" "cache-info-metric" -}}
{{- $owned := list "pool-name" "pool-namespace" "pool-group" "config-file" "config-text" "grpc-port" "grpc-health-port" "metrics-port" "secure-serving" "ha-enable-leader-election" "cert-path" "max-request-body-bytes" "decision-trace" "endpoints-file" "endpoint-selector" "prefill-release-address" -}}
{{- range $k, $_ := $ie.flags -}}
{{- if has $k $deprecated -}}
{{- fail (printf "inferenceExtension.flags.%s: GIE v1.5.0 rejects this deprecated flag; metric names come from the engine mapping (label inference.networking.k8s.io/engine-type or inferencePool.modelServerType)" $k) -}}
{{- end -}}
{{- if has $k $owned -}}
{{- fail (printf "inferenceExtension.flags.%s: the chart sets this flag from its own value; see values.yaml" $k) -}}
{{- end -}}
{{- end -}}
{{- if .Values.modelServers.enabled -}}
{{- $n := int .Values.modelServers.combined.replicas -}}
{{- range .Values.modelServers.rolesets -}}
{{- $n = add $n (int .prefillReplicas) (int .decodeReplicas) -}}
{{- end -}}
{{- if eq $n 0 -}}
{{- fail "modelServers.enabled is true but no pod is requested: add a roleset with prefillReplicas/decodeReplicas or set modelServers.combined.replicas" -}}
{{- end -}}
{{- if eq .Values.modelServers.engine "trtllm" -}}
{{- $decode := int .Values.modelServers.combined.replicas -}}
{{- range .Values.modelServers.rolesets -}}
{{- $decode = add $decode (int .decodeReplicas) -}}
{{- end -}}
{{- if gt $decode 1024 -}}
{{- fail (printf "modelServers: %d decode and combined replicas with engine trtllm, but TensorRT-LLM request ids have 1024 machine ids, one per decode sidecar; use at most 1024" $decode) -}}
{{- end -}}
{{- range $k := list "trt-machine-id" "trt-machine-id-slots" "pod-name" -}}
{{- if hasKey $.Values.sidecar.flags $k -}}
{{- fail (printf "sidecar.flags.%s: with modelServers.engine=trtllm the chart gives every decode sidecar a distinct machine id (StatefulSet ordinal ranges) and sets this flag itself" $k) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if ne (len .Values.inferencePool.targetPorts) 1 -}}
{{- fail "modelServers.enabled needs exactly one inferencePool.targetPorts entry: the port the sample pods serve on" -}}
{{- end -}}
{{- end -}}
{{- end -}}
