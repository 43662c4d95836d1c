{{/*
Names, labels and the values derived from the localdns config that the
Kubernetes objects need (ports, probe address, control socket directory).
*/}}

{{/* The chart name, or nameOverride; 63 characters at most (a label value). */}}
{{- define "localdns.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
The name of every object: fullnameOverride, else the release name when it
already holds the chart name ("localdns"), else "<release>-<chart>".
*/}}
{{- define "localdns.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "localdns.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "localdns.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* What the DaemonSet selects its pods by; never changes across upgrades. */}}
{{- define "localdns.selectorLabels" -}}
app.kubernetes.io/name: {{ include "localdns.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "localdns.labels" -}}
helm.sh/chart: {{ include "localdns.chart" . }}
{{ include "localdns.selectorLabels" . }}
app.kubernetes.io/version: {{ include "localdns.imageTag" . | trunc 63 | trimSuffix "-" | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "localdns.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "localdns.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "localdns.imageTag" -}}
{{- default .Chart.AppVersion .Values.image.tag -}}
{{- end -}}

{{- define "localdns.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (include "localdns.imageTag" .) -}}
{{- end -}}
{{- end -}}

{{/*
The config as the daemon reads it: .Values.config plus what the chart
derives (the kube-dns-upstream address among the fallback servers, the
version answered to version.bind). A copy: templates must not change
.Values.
*/}}
{{- define "localdns.config" -}}
{{- $config := deepCopy .Values.config -}}
{{- if .Values.kubeDnsUpstream.enabled -}}
{{- $ip := required "kubeDnsUpstream.clusterIP is required when kubeDnsUpstream.enabled: a free address in the Service CIDR, which becomes one of config.cluster.fallback_servers" .Values.kubeDnsUpstream.clusterIP -}}
{{- $_ := set $config.cluster "fallback_servers" (append (default (list) $config.cluster.fallback_servers) $ip | uniq) -}}
{{- end -}}
{{- if not $config.chaos.version -}}
{{- $_ := set $config.chaos "version" (printf "localdns %s" (include "localdns.imageTag" .)) -}}
{{- end -}}
{{- if include "localdns.keeper" . -}}
{{- $_ := set $config.keeper "socket" (include "localdns.keeperSocket" .) -}}
{{- end -}}
{{- toYaml $config -}}
{{- end -}}

{{/* "true" when the pod has the keeper container: keeper.enabled, with the nftables table it works on. */}}
{{- define "localdns.keeper" -}}
{{- if and .Values.keeper.enabled .Values.config.nftables.enabled -}}true{{- end -}}
{{- end -}}

{{/* keeper.socket in the pod's own in-memory emptyDir, which both containers mount. */}}
{{- define "localdns.keeperSocket" -}}
/run/localdns-keeper/keeper.sock
{{- end -}}

{{/*
The port of an "ip:port" or "[ipv6]:port" listen value; the address follows.
*/}}
{{- define "localdns.listenPort" -}}
{{- regexReplaceAll "^.*:([0-9]+)$" . "${1}" -}}
{{- end -}}

{{- define "localdns.listenIP" -}}
{{- regexReplaceAll "^\\[?(.*?)\\]?:[0-9]+$" . "${1}" -}}
{{- end -}}

{{/*
Where the kubelet sends its probes: the health listen address, which is on
the node since the pod has the host's network; a wildcard is reached on
loopback; "${POD_IP}" is the kubelet's own default, the pod's IP (empty: no
host). Any other variable is the daemon's environment only, which the
kubelet cannot read.
*/}}
{{- define "localdns.probeHost" -}}
{{- $ip := include "localdns.listenIP" .Values.config.health.listen -}}
{{- if eq $ip "0.0.0.0" -}}127.0.0.1
{{- else if eq $ip "::" -}}::1
{{- else if eq $ip "${POD_IP}" -}}
{{- else if hasPrefix "${" $ip -}}
{{- fail (printf "config.health.listen: the kubelet cannot probe %s; use an address, or ${POD_IP}" $ip) -}}
{{- else -}}{{ $ip }}
{{- end -}}
{{- end -}}

{{/* The ServiceMonitor's selector: the metrics Service and nothing else. */}}
{{- define "localdns.metricsSelectorLabels" -}}
{{ include "localdns.selectorLabels" . }}
app.kubernetes.io/component: metrics
{{- end -}}

{{/*
The environment the config may name, for both containers (they read the
same file): NODE_NAME (kubernetes.node_name ""), POD_IP ("${POD_IP}:port" in
a listen key: the node's address on the host network).
*/}}
{{- define "localdns.env" -}}
- name: NODE_NAME
  valueFrom:
    fieldRef:
      fieldPath: spec.nodeName
- name: POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
{{- end -}}
