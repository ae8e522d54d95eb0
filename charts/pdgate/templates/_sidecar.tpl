{{/*
The pdgate routing sidecar as a native sidecar (init container with restartPolicy Always): it
starts before the engine, stays up for the pod's life and stops after it. It serves the pool's
target port and forwards to the engine on localhost.
*/}}
{{- define "pdgate.ms.sidecarContainer" -}}
{{- $r := .root -}}
{{- $ms := $r.Values.modelServers -}}
{{- $sc := $r.Values.sidecar -}}
{{- $port := (first $r.Values.inferencePool.targetPorts).number | int -}}
- name: pdgate-sidecar
  image: {{ include "pdgate.image" (dict "image" $sc.image "root" $r) }}
  imagePullPolicy: {{ $sc.image.pullPolicy }}
  restartPolicy: Always
  args:
    - --listen=0.0.0.0:{{ $port }}
    - --engine-url=http://127.0.0.1:{{ $ms.decodeEnginePort | int }}
    - --engine={{ $ms.engine }}
    {{- with $ms.kvConnector }}
    - --kv-connector={{ . }}
    {{- end }}
    {{- if eq $ms.engine "trtllm" }}
    - --trt-schedule-style={{ $ms.trtllm.scheduleStyle }}
    # This StatefulSet's machine ids: the first, and how many; the pod adds its ordinal.
    - --trt-machine-id={{ .machineBase | int }}
    - --trt-machine-id-slots={{ .replicas | int }}
    {{- end }}
    {{- if eq $ms.engine "sglang" }}
    - --sglang-bootstrap-port={{ $ms.sglang.bootstrapPort | int }}
    {{- end }}
    # The allow-list: prefill and encode targets must be ready pods of this pool.
    - --inference-pool={{ $r.Release.Namespace }}/{{ include "pdgate.poolName" $r }}
    {{- range $k, $v := $sc.flags }}
    - --{{ $k }}={{ $v }}
    {{- end }}
  ports:
    - name: http
      containerPort: {{ $port }}
  env:
    - name: POD_IP
      valueFrom:
        fieldRef:
          fieldPath: status.podIP
    {{- if eq $ms.engine "trtllm" }}
    - name: POD_NAME
      valueFrom:
        fieldRef:
          fieldPath: metadata.name
    {{- end }}
    {{- with $sc.env }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  # Pod readiness waits for the sidecar too: the pool's port is the sidecar's.
  startupProbe:
    httpGet:
      path: /sidecar/healthz
      port: http
    periodSeconds: 2
    failureThreshold: 30
  readinessProbe:
    httpGet:
      path: /sidecar/healthz
      port: http
    periodSeconds: 5
  {{- with $sc.resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  securityContext:
    allowPrivilegeEscalation: false
    readOnlyRootFilesystem: true
    runAsNonRoot: true
    runAsUser: 65532
    capabilities:
      drop: ["ALL"]
  # Only the sidecar gets an API token (the engine container runs model code and needs none).
  volumeMounts:
    - name: sidecar-api-access
      mountPath: /var/run/secrets/kubernetes.io/serviceaccount
      readOnly: true
{{- end -}}

{{/* A projected ServiceAccount token, mounted into the sidecar only. */}}
{{- define "pdgate.ms.sidecarTokenVolume" -}}
- name: sidecar-api-access
  projected:
    sources:
      - serviceAccountToken:
          path: token
          expirationSeconds: 3607
      - configMap:
          name: kube-root-ca.crt
          items:
            - key: ca.crt
              path: ca.crt
      - downwardAPI:
          items:
            - path: namespace
              fieldRef:
                fieldPath: metadata.namespace
{{- end -}}
