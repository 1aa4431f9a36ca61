{{/* Names, labels and the pieces every role's pod shares. */}}

{{- define "sluice.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* <release>-sluice, or the release name when it already says sluice. */}}
{{- define "sluice.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "sluice.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "sluice.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Selects every pod of the release (the client-facing Service). */}}
{{- define "sluice.selectorLabels" -}}
app.kubernetes.io/name: {{ include "sluice.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Selects one role's pods: call with (dict "root" $ "component" "storage"). */}}
{{- define "sluice.componentSelector" -}}
{{ include "sluice.selectorLabels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "sluice.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/* Headless Service of a StatefulSet: <fullname>-<component>. */}}
{{- define "sluice.headless" -}}
{{- printf "%s-%s" (include "sluice.fullname" .root) .component -}}
{{- end -}}

{{/* DNS suffix of the pods of a headless Service, after the pod name. */}}
{{- define "sluice.podDomain" -}}
{{- printf "%s.%s.svc.%s" (include "sluice.headless" .) .root.Release.Namespace .root.Values.clusterDomain -}}
{{- end -}}

{{/* --controllers: every controller pod's gRPC address. */}}
{{- define "sluice.controllers" -}}
{{- $root := . -}}
{{- $domain := include "sluice.podDomain" (dict "root" $root "component" "controller") -}}
{{- $addrs := list -}}
{{- range $i := until (int .Values.controller.replicas) -}}
{{- $addrs = append $addrs (printf "%s-controller-%d.%s:9090" (include "sluice.fullname" $root) $i $domain) -}}
{{- end -}}
{{- join "," $addrs -}}
{{- end -}}

{{/* --controller.etcd.initial-cluster: name=peer URL of every member; the
member name is the pod name, the URL its DNS name (https with TLS). */}}
{{- define "sluice.etcdInitialCluster" -}}
{{- $root := . -}}
{{- $domain := include "sluice.podDomain" (dict "root" $root "component" "controller") -}}
{{- $scheme := ternary "https" "http" .Values.tls.enabled -}}
{{- $members := list -}}
{{- range $i := until (int .Values.controller.replicas) -}}
{{- $pod := printf "%s-controller-%d" (include "sluice.fullname" $root) $i -}}
{{- $members = append $members (printf "%s=%s://%s.%s:9094" $pod $scheme $pod $domain) -}}
{{- end -}}
{{- join "," $members -}}
{{- end -}}

{{/* The TLS secret of a role: its own, else with tls.certManager.issuer the
one its Certificate writes (<fullname>-<component>-tls), else the chart's.
Call with (dict "root" $ "role" .Values.storage "component" "storage"). */}}
{{- define "sluice.tlsSecret" -}}
{{- $own := "" -}}
{{- if .role.tls -}}{{- $own = .role.tls.secretName | default "" -}}{{- end -}}
{{- if and (not $own) (include "sluice.certManager" .root) -}}
{{- $own = printf "%s-%s-tls" (include "sluice.fullname" .root) .component -}}
{{- end -}}
{{- $own | default .root.Values.tls.secretName -}}
{{- end -}}

{{/* "true" when the chart renders cert-manager Certificates: TLS on and an issuer named. */}}
{{- define "sluice.certManager" -}}
{{- $cm := .Values.tls.certManager | default dict -}}
{{- if and .Values.tls.enabled $cm.issuer -}}true{{- end -}}
{{- end -}}

{{/* The roles: component (the suffix of object names), the key of its
values, the role name sluiced knows (the URI SAN sluice://role/<role>), and
whether its pods are a StatefulSet with DNS names under a headless Service. */}}
{{- define "sluice.roles" -}}
- {component: controller, values: controller, role: controller, stateful: true}
- {component: storage, values: storage, role: storage-node, stateful: true}
- {component: replication, values: replication, role: replication, stateful: true}
- {component: group-coordinator, values: groupCoordinator, role: group-coordinator, stateful: false}
- {component: transaction-coordinator, values: transactionCoordinator, role: transaction-coordinator, stateful: false}
{{- end -}}

{{/* DNS SANs of a role's certificate: the role's name for software that
checks names only (etcd requires controller.role.sluice.invalid), the pods'
DNS names under the headless Service (StatefulSets), and the client
Service, which is in front of every pod. Call with (dict "root" $ "r" <entry of sluice.roles>). */}}
{{- define "sluice.certDNSNames" -}}
{{- $root := .root -}}
{{- $full := include "sluice.fullname" $root -}}
{{- $ns := $root.Release.Namespace -}}
- {{ printf "%s.role.sluice.invalid" .r.role }}
{{- if .r.stateful }}
- {{ printf "*.%s" (include "sluice.podDomain" (dict "root" $root "component" .r.component)) | quote }}
{{- end }}
- {{ $full }}
- {{ printf "%s.%s" $full $ns }}
- {{ printf "%s.%s.svc" $full $ns }}
- {{ printf "%s.%s.svc.%s" $full $ns $root.Values.clusterDomain }}
{{- end -}}

{{- define "sluice.tlsArgs" -}}
{{- if .Values.tls.enabled }}
- --tls.cert=/etc/sluice/tls/tls.crt
- --tls.key=/etc/sluice/tls/tls.key
- --tls.ca=/etc/sluice/tls/ca.crt
{{- with .Values.tls.clientAuth }}
- --tls.client-auth={{ . }}
{{- end }}
{{- end }}
{{- end -}}

{{/* Environment every container gets: its pod name and namespace, which the
args use as $(POD_NAME) and $(POD_NAMESPACE). */}}
{{- define "sluice.env" -}}
- name: POD_NAME
  valueFrom:
    fieldRef: {fieldPath: metadata.name}
- name: POD_NAMESPACE
  valueFrom:
    fieldRef: {fieldPath: metadata.namespace}
{{- end -}}

{{/* One probe on gRPC health of the whole process. */}}
{{- define "sluice.probeAction" -}}
{{- if .Values.tls.enabled -}}
exec:
  command: ["/sluice", "health", "--timeout=4s", "--tls-ca=/etc/sluice/tls/ca.crt", "--tls-cert=/etc/sluice/tls/tls.crt", "--tls-key=/etc/sluice/tls/tls.key", "127.0.0.1:9090"]
{{- else -}}
grpc:
  port: 9090
{{- end -}}
{{- end -}}

{{- define "sluice.probes" -}}
startupProbe:
  {{- include "sluice.probeAction" . | nindent 2 }}
  periodSeconds: {{ .Values.probes.startup.periodSeconds }}
  failureThreshold: {{ .Values.probes.startup.failureThreshold }}
  timeoutSeconds: {{ .Values.probes.timeoutSeconds }}
readinessProbe:
  {{- include "sluice.probeAction" . | nindent 2 }}
  periodSeconds: {{ .Values.probes.readiness.periodSeconds }}
  failureThreshold: {{ .Values.probes.readiness.failureThreshold }}
  timeoutSeconds: {{ .Values.probes.timeoutSeconds }}
livenessProbe:
  {{- include "sluice.probeAction" . | nindent 2 }}
  periodSeconds: {{ .Values.probes.liveness.periodSeconds }}
  failureThreshold: {{ .Values.probes.liveness.failureThreshold }}
  timeoutSeconds: {{ .Values.probes.timeoutSeconds }}
{{- end -}}

{{- define "sluice.ports" -}}
- {name: grpc, containerPort: 9090}
- {name: http-metrics, containerPort: 9091}
- {name: kafka, containerPort: 9092}
{{- end -}}

{{/* Volume mounts: /data (a PVC for stateful roles, else an emptyDir) and
the TLS secret. */}}
{{- define "sluice.volumeMounts" -}}
- {name: data, mountPath: /data}
{{- if .Values.tls.enabled }}
- {name: tls, mountPath: /etc/sluice/tls, readOnly: true}
{{- end }}
{{- end -}}

{{- define "sluice.tlsVolume" -}}
{{- if .root.Values.tls.enabled }}
- name: tls
  secret:
    secretName: {{ required "tls.enabled needs tls.secretName, tls.certManager.issuer or the role's tls.secretName" (include "sluice.tlsSecret" .) }}
{{- end }}
{{- end -}}

{{/* Pod spec fields every role shares: call with (dict "root" $ "role" .Values.storage). */}}
{{- define "sluice.podCommon" -}}
securityContext:
  {{- toYaml .root.Values.podSecurityContext | nindent 2 }}
terminationGracePeriodSeconds: {{ .role.terminationGracePeriodSeconds }}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .role.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .role.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .role.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .role.topologySpreadConstraints }}
topologySpreadConstraints:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* The container's fields after its ports: call with (dict "root" $ "role" .Values.storage),
and "podIndex" true for $(POD_INDEX). */}}
{{- define "sluice.containerCommon" -}}
image: {{ include "sluice.image" .root }}
imagePullPolicy: {{ .root.Values.image.pullPolicy }}
env:
  {{- include "sluice.env" .root | nindent 2 }}
  {{- if .podIndex }}
  # The pod's ordinal, which the StatefulSet controller puts in this label
  # (Kubernetes 1.28+).
  - name: POD_INDEX
    valueFrom:
      fieldRef: {fieldPath: "metadata.labels['apps.kubernetes.io/pod-index']"}
  {{- end }}
{{ include "sluice.probes" .root }}
resources:
  {{- toYaml .role.resources | nindent 2 }}
securityContext:
  {{- toYaml .root.Values.securityContext | nindent 2 }}
volumeMounts:
  {{- include "sluice.volumeMounts" .root | nindent 2 }}
{{- end -}}

{{/* Chart-wide and role flags, after the chart's own (a later flag wins). */}}
{{- define "sluice.extraArgs" -}}
{{- range .root.Values.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- range .role.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end -}}
