{{/* Names, labels and the few derived values every template shares. */}}

{{- define "appliance.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The full name of the chart's objects: the release name, with the chart name appended unless it
is already in it (release "appliance" gives "appliance"). Truncated to a DNS label.
*/}}
{{- define "appliance.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "appliance.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Selector labels of the coordinator pod. component=coordinator keeps the Deployment from ever
selecting the replica pods the coordinator creates (they share app.kubernetes.io/name).
*/}}
{{- define "appliance.selectorLabels" -}}
app.kubernetes.io/name: {{ include "appliance.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: coordinator
{{- end }}

{{- define "appliance.labels" -}}
helm.sh/chart: {{ include "appliance.chart" . }}
{{ include "appliance.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: appliance
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "appliance.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "appliance.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The image of the coordinator and of the replica pods. */}}
{{- define "appliance.image" -}}
{{- printf "%s:%s" .Values.image.repository (toString .Values.image.tag) }}
{{- end }}

{{/* HOST:PORT the replica pods dial: the Service's cluster DNS name and gRPC port. */}}
{{- define "appliance.coordinatorAddress" -}}
{{- printf "%s.%s.svc:%d" (include "appliance.fullname" .) .Release.Namespace (int .Values.service.grpcPort) }}
{{- end }}

{{/* SQLite on a volume unless a PostgreSQL URL comes from a Secret. */}}
{{- define "appliance.usesSqlite" -}}
{{- if not .Values.database.existingSecret }}true{{ end }}
{{- end }}

{{/* The PVC of the data dir, or "" when the data dir is an emptyDir. */}}
{{- define "appliance.claimName" -}}
{{- if and (include "appliance.usesSqlite" .) .Values.persistence.enabled }}
{{- default (printf "%s-data" (include "appliance.fullname" .)) .Values.persistence.existingClaim }}
{{- end }}
{{- end }}

{{/*
The model dirs' claim: the existing one named, or <fullname>-model-dirs; empty when off.
*/}}
{{- define "appliance.modelDirsClaim" -}}
{{- with .Values.modelDirs.persistence }}
{{- if .enabled }}
{{- default (printf "%s-model-dirs" (include "appliance.fullname" $)) .existingClaim }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Node names of one pool group: the names given, or <prefix>-01.. for a count.
Call with (list "cs2" .Values.pool.systems); returns a YAML list.
*/}}
{{- define "appliance.poolNames" -}}
{{- $prefix := index . 0 }}
{{- $value := index . 1 }}
{{- $names := list }}
{{- if kindIs "slice" $value }}
{{- $names = $value }}
{{- else }}
{{- range $i := until (int $value) }}
{{- $names = append $names (printf "%s-%02d" $prefix (add1 $i)) }}
{{- end }}
{{- end }}
{{- toYaml $names }}
{{- end }}

{{/*
The inventory file the coordinator reads (appliance.config.read_inventory): systems, memoryx,
swarmx and workers lists of names. A name used twice anywhere fails the install here rather than the
coordinator at start-up.
*/}}
{{- define "appliance.inventory" -}}
{{- $systems := include "appliance.poolNames" (list "cs2" .Values.pool.systems) | fromYamlArray }}
{{- $memoryx := include "appliance.poolNames" (list "memx" .Values.pool.memoryx) | fromYamlArray }}
{{- $swarmx := include "appliance.poolNames" (list "swarmx" .Values.pool.swarmx) | fromYamlArray }}
{{- $workers := include "appliance.poolNames" (list "worker" (.Values.pool.workers | default 0)) | fromYamlArray }}
{{- $all := concat $systems $memoryx $swarmx $workers }}
{{- $seen := dict }}
{{- range $all }}
{{- if hasKey $seen . }}
{{- fail (printf "pool: the node name %q is used twice; every CS-2, MemoryX, SwarmX and worker name must be unique" .) }}
{{- end }}
{{- $_ := set $seen . true }}
{{- end }}
{{- printf "systems:\n%s\nmemoryx:\n%s\nswarmx:\n%s" (toYaml $systems) (toYaml $memoryx) (toYaml $swarmx) }}
{{- if $workers }}
{{- printf "\nworkers:\n%s" (toYaml $workers) }}
{{- else }}
{{- printf "\nworkers: []" }}
{{- end }}
{{- end }}

{{/* The Secret holding the tokens file: the one named, or the one the chart makes. */}}
{{- define "appliance.authSecret" -}}
{{- default (printf "%s-auth" (include "appliance.fullname" .)) .Values.auth.existingSecret }}
{{- end }}

{{- define "appliance.tlsSecret" -}}
{{- default (printf "%s-tls-ca" (include "appliance.fullname" .)) .Values.tls.existingSecret }}
{{- end }}

{{/* The names the coordinator's serving certificate is for: the Service's, however dialled. */}}
{{- define "appliance.tlsNames" -}}
{{- $svc := include "appliance.fullname" . }}
{{- printf "%s,%s.%s,%s.%s.svc,%s.%s.svc.cluster.local" $svc $svc .Release.Namespace $svc .Release.Namespace $svc .Release.Namespace }}
{{- end }}

{{- define "appliance.authSecretKey" -}}
{{- if .Values.auth.existingSecret }}{{ .Values.auth.secretKey }}{{ else }}tokens.yaml{{ end }}
{{- end }}

{{/*
A random value kept across upgrades: read back from the Secret it was stored in (lookup sees
the cluster at install/upgrade time; `helm template` makes a new one each time).
Call with (dict "namespace" NS "name" SECRET "key" KEY "length" N).
*/}}
{{- define "appliance.keptRandom" -}}
{{- $value := randAlphaNum .length }}
{{- with lookup "v1" "Secret" .namespace .name }}
{{- with .data }}
{{- with (index . $.key) }}
{{- $value = b64dec . }}
{{- end }}
{{- end }}
{{- end }}
{{- $value }}
{{- end }}

{{/*
Switches added after the first release read with their defaults, so `helm upgrade
--reuse-values` of an older release (whose values lack them) still renders: "true" or "".
*/}}
{{- define "appliance.authEnabled" -}}
{{- if dig "auth" "enabled" true .Values.AsMap }}true{{ end }}
{{- end }}

{{- define "appliance.networkPolicyEnabled" -}}
{{- if dig "networkPolicy" "enabled" true .Values.AsMap }}true{{ end }}
{{- end }}
