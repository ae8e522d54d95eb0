{{/*
Sample model servers. Called with (dict "root" $ "role" prefill|decode|combined "roleset" NAME
"replicas" N). Decode and combined pods run the pdgate sidecar on the pool's target port in front
of the engine (they can be the decode pick, which receives x-prefiller-host-port); prefill pods
serve the pool's target port themselves.
*/}}
{{- define "pdgate.ms.servedName" -}}
{{- .Values.modelServers.servedModelName | default .Values.modelServers.model -}}
{{- end -}}

{{- define "pdgate.ms.name" -}}
{{- $r := .root -}}
{{- if eq .role "combined" -}}
{{- printf "%s-%s-combined" ($r.Release.Name | trunc 30) $r.Values.modelServers.engine | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s-%s-%s" ($r.Release.Name | trunc 30) $r.Values.modelServers.engine .role .roleset | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* GIE's engine-type label value for the engine (selects the metric names the EPP reads). */}}
{{- define "pdgate.ms.gieEngine" -}}
{{- $e := .Values.modelServers.engine -}}
{{- if eq $e "trtllm" -}}trtllm-serve{{- else -}}{{ $e }}{{- end -}}
{{- end -}}

{{/* The port the engine listens on: behind the sidecar on decode-capable pods. */}}
{{- define "pdgate.ms.enginePort" -}}
{{- $r := .root -}}
{{- if eq .role "prefill" -}}
{{ (first $r.Values.inferencePool.targetPorts).number | int }}
{{- else -}}
{{ $r.Values.modelServers.decodeEnginePort | int }}
{{- end -}}
{{- end -}}

{{- define "pdgate.ms.labels" -}}
{{- $r := .root -}}
{{- $ms := $r.Values.modelServers -}}
{{- range $k, $v := $r.Values.inferencePool.modelServers.matchLabels }}
{{ $k }}: {{ $v | toString | quote }}
{{- end }}
pdgate.io/model-server: {{ include "pdgate.ms.name" . }}
llm-d.ai/role: {{ if eq .role "combined" }}prefill-decode{{ else }}{{ .role }}{{ end }}
role-name: {{ .role }}
roleset-name: {{ .roleset }}
model.aibrix.ai/name: {{ include "pdgate.ms.servedName" $r | replace "/" "-" | trunc 63 | trimSuffix "-" | quote }}
model.aibrix.ai/port: {{ (first $r.Values.inferencePool.targetPorts).number | toString | quote }}
model.aibrix.ai/engine: {{ $ms.engine }}
{{- with $ms.aibrixKVConnectorType }}
model.aibrix.ai/kv-connector-type: {{ . }}
{{- end }}
inference.networking.k8s.io/engine-type: {{ include "pdgate.ms.gieEngine" $r }}
{{- end -}}

{{- define "pdgate.ms.annotations" -}}
{{- $ms := .root.Values.modelServers -}}
{{- if and (eq $ms.engine "sglang") (eq .role "prefill") }}
model.aibrix.ai/sglang-bootstrap-port: {{ $ms.sglang.bootstrapPort | toString | quote }}
{{- end }}
{{- if $ms.aibrixConfig }}
model.aibrix.ai/config: {{ $ms.aibrixConfig | quote }}
{{- else if eq .role "combined" }}
{{- /* AIBrix only treats a pod as combined when its own config says so. */}}
model.aibrix.ai/config: {{ `{"profiles":{"default":{"routingStrategy":"pd","routingConfig":{"combined":true}}}}` | quote }}
{{- end }}
{{- end -}}

{{/* The engine (or simulator) container. */}}
{{- define "pdgate.ms.engineContainer" -}}
{{- $r := .root -}}
{{- $ms := $r.Values.modelServers -}}
{{- $port := include "pdgate.ms.enginePort" . -}}
{{- $served := include "pdgate.ms.servedName" $r -}}
- name: engine
{{- if $ms.simulator.enabled }}
  image: {{ include "pdgate.image" (dict "image" $ms.simulator.image "root" $r) }}
  imagePullPolicy: {{ $ms.imagePullPolicy }}
  args:
    - --host=0.0.0.0
    - --port={{ $port }}
    - --advertise-host=$(POD_IP)
    - --dialect={{ $ms.engine }}
    - --role={{ .role }}
    - --model={{ $served }}
    {{- if and (eq $ms.engine "sglang") (eq .role "prefill") }}
    - --bootstrap-port={{ $ms.sglang.bootstrapPort }}
    {{- end }}
    {{- range $k, $v := $ms.simulator.flags }}
    - --{{ $k }}={{ $v }}
    {{- end }}
{{- else }}
{{- $img := index $ms.images $ms.engine }}
  image: {{ include "pdgate.image" (dict "image" $img "root" $r) }}
  imagePullPolicy: {{ $ms.imagePullPolicy }}
  {{- if eq $ms.engine "vllm" }}
  command: ["vllm", "serve"]
  args:
    - {{ $ms.model | quote }}
    - --host=0.0.0.0
    - --port={{ $port }}
    - --served-model-name={{ $served }}
    {{- with $ms.vllm.kvTransferConfig }}
    - --kv-transfer-config={{ . }}
    {{- end }}
  {{- else if eq $ms.engine "sglang" }}
  command: ["python3", "-m", "sglang.launch_server"]
  args:
    - --model-path={{ $ms.model }}
    - --host=0.0.0.0
    - --port={{ $port }}
    - --served-model-name={{ $served }}
    {{- if ne .role "combined" }}
    - --disaggregation-mode={{ .role }}
    - --disaggregation-transfer-backend={{ $ms.sglang.transferBackend }}
    {{- end }}
    {{- if eq .role "prefill" }}
    - --disaggregation-bootstrap-port={{ $ms.sglang.bootstrapPort }}
    {{- end }}
  {{- else }}
  command: ["trtllm-serve"]
  args:
    - {{ $ms.model | quote }}
    - --host=0.0.0.0
    - --port={{ $port }}
    - --backend=pytorch
    - --extra_llm_api_options=/etc/pdgate/trtllm/{{ if eq .role "prefill" }}context{{ else }}generation{{ end }}.yaml
  {{- end }}
  {{- range $ms.extraArgs }}
    - {{ . | quote }}
  {{- end }}
{{- end }}
  ports:
    - name: engine
      containerPort: {{ $port }}
    {{- if and (eq $ms.engine "sglang") (eq .role "prefill") }}
    - name: sglang-boot
      containerPort: {{ $ms.sglang.bootstrapPort }}
    {{- end }}
  env:
    - name: POD_IP
      valueFrom:
        fieldRef:
          fieldPath: status.podIP
    {{- if and (not $ms.simulator.enabled) (eq $ms.engine "vllm") }}
    # NIXL's side channel must advertise an address the peer pod can reach.
    - name: VLLM_NIXL_SIDE_CHANNEL_HOST
      valueFrom:
        fieldRef:
          fieldPath: status.podIP
    {{- end }}
    {{- with $ms.env }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  readinessProbe:
    httpGet:
      path: /health
      port: engine
    periodSeconds: 5
  startupProbe:
    httpGet:
      path: /health
      port: engine
    # Model loading takes minutes on real engines.
    periodSeconds: 10
    failureThreshold: 90
  {{- $res := $ms.resources }}
  {{- if $ms.simulator.enabled }}{{ $res = $ms.simulator.resources }}{{ end }}
  {{- with $res }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- if not $ms.simulator.enabled }}
  volumeMounts:
    {{- if eq $ms.engine "trtllm" }}
    - name: trtllm-config
      mountPath: /etc/pdgate/trtllm
      readOnly: true
    {{- else }}
    - name: dshm
      mountPath: /dev/shm
    {{- end }}
  {{- end }}
{{- end -}}
