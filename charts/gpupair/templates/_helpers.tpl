{{/*
The chart's names and labels. Every object carries the labels deploy/ gives it
(app.kubernetes.io/name, component, part-of: gpupair) and Helm's own (managed-by, instance,
helm.sh/chart, version); selectors carry only app.kubernetes.io/name, as in deploy/, so a
kustomize install and a Helm one select the same pods.
*/}}

{{/* Every namespaced object goes into the release's namespace (helm install -n NAME), as in any
chart. */}}
{{- define "gpupair.namespace" -}}
{{ .Release.Namespace }}
{{- end }}

{{/* How to give the namespace the Pod Security labels deploy/base/namespace.yaml gives it: the
reporter needs the privileged level (reporter/daemonset.yaml); every other pod meets restricted,
and the audit log records any pod that does not. */}}
{{- define "gpupair.podSecurityCommand" -}}
kubectl label namespace {{ include "gpupair.namespace" . }} pod-security.kubernetes.io/enforce=privileged pod-security.kubernetes.io/audit=restricted --overwrite
{{- end }}

{{- define "gpupair.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* The reporter's ServiceAccount as the apiserver names its user (the admission policies'). */}}
{{- define "gpupair.reporterUser" -}}
system:serviceaccount:{{ include "gpupair.namespace" . }}:gpupair-reporter
{{- end }}

{{/* Helm's labels, on object metadata. */}}
{{- define "gpupair.helmLabels" -}}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{/* metadata.labels: (dict "ctx" $ "name" "gpupair-x" "component" "x"). */}}
{{- define "gpupair.labels" -}}
app.kubernetes.io/name: {{ .name }}
app.kubernetes.io/component: {{ .component }}
app.kubernetes.io/part-of: gpupair
{{ include "gpupair.helmLabels" .ctx }}
{{- end }}

{{/* A pod template's labels: deploy/'s, and the release (no chart version: no rollout for it). */}}
{{- define "gpupair.podLabels" -}}
app.kubernetes.io/name: {{ .name }}
app.kubernetes.io/component: {{ .component }}
app.kubernetes.io/part-of: gpupair
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
{{- end }}

{{/* The settings every pod can take: (dict "values" .Values.extender). */}}
{{- define "gpupair.podPlacement" -}}
{{- with .values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* The pull secrets of every gpupair pod (imagePullSecrets), in the release's namespace. */}}
{{- define "gpupair.imagePullSecrets" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{- define "gpupair.imagePullPolicy" -}}
{{- with .Values.image.pullPolicy }}
imagePullPolicy: {{ . }}
{{- end }}
{{- end }}

{{/* The locked-down securityContext of every non-root container (uid 65532). */}}
{{- define "gpupair.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{- define "gpupair.containerSecurityContext" -}}
runAsNonRoot: true
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{- define "gpupair.tmpVolume" -}}
- name: tmp
  emptyDir:
    medium: Memory
    sizeLimit: 16Mi
{{- end }}

{{/* Each webhook entry's namespace selection: opted-in namespaces but gpupair's and kube-system,
by their placement default ("" = those without one). */}}
{{- define "gpupair.webhookNamespaces" -}}
matchExpressions:
  - key: gpupair.io/inject
    operator: In
    values: ["enabled"]
  - key: kubernetes.io/metadata.name
    operator: NotIn
    values: [{{ include "gpupair.namespace" .ctx | quote }}, "kube-system"]
  - key: gpupair.io/placement
    {{- if .placement }}
    operator: In
    values: [{{ .placement | quote }}]
    {{- else }}
    operator: NotIn
    values: ["required", "preferred", "none"]
    {{- end }}
{{- end }}

{{/* The objects of a deploy/ file copied under files/, each with the chart's labels added and the
reporter's username in its namespace: (dict "ctx" $ "file" "files/x.yaml"). */}}
{{- define "gpupair.copiedObjects" -}}
{{- $ctx := .ctx }}
{{- $text := $ctx.Files.Get .file | replace "system:serviceaccount:gpupair-system:gpupair-reporter" (include "gpupair.reporterUser" $ctx) }}
{{- range $doc := regexSplit "(?m)^---$" $text -1 }}
{{- $obj := fromYaml $doc }}
{{- if $obj }}
{{- $labels := merge (fromYaml (include "gpupair.helmLabels" $ctx)) ($obj.metadata.labels | default dict) }}
{{- $_ := set $obj.metadata "labels" (merge $labels (dict "app.kubernetes.io/part-of" "gpupair")) }}
---
{{ toYaml $obj }}
{{- end }}
{{- end }}
{{- end }}

{{/* gpupair-scheduler's image: scheduler.image, or upstream kube-scheduler at the cluster's
version (major.minor.patch of .Capabilities.KubeVersion, without a provider's suffix such as
-eks-...), so the second scheduler follows its control plane through upgrades. */}}
{{- define "gpupair.schedulerImage" -}}
{{- if .Values.scheduler.image }}
{{- .Values.scheduler.image }}
{{- else }}
{{- $v := semver .Capabilities.KubeVersion.Version }}
{{- printf "registry.k8s.io/kube-scheduler:v%d.%d.%d" $v.Major $v.Minor $v.Patch }}
{{- end }}
{{- end }}

{{/* The scheduler entries as the values shape them, from a configuration's extenders list:
(dict "extenders" LIST "values" .Values). scheduler.gpuEntry.ignorable: the GPU entry is
ignorable (the emergency bypass). scheduler.everyPodEntry.enabled false: the every-pod entry goes,
and the GPU entry scores GPU pods itself, with the every-pod entry's weight. */}}
{{- define "gpupair.shapedEntries" -}}
{{- $gpu := deepCopy (first .extenders) }}
{{- $every := deepCopy (last .extenders) }}
{{- if .values.scheduler.gpuEntry.ignorable }}
{{- $_ := set $gpu "ignorable" true }}
{{- end }}
{{- if .values.scheduler.everyPodEntry.enabled }}
{{- toYaml (list $gpu $every) }}
{{- else }}
{{- $_ := set $gpu "prioritizeVerb" "prioritize" }}
{{- $_ := set $gpu "weight" $every.weight }}
{{- toYaml (list $gpu) }}
{{- end }}
{{- end }}

{{/* gpupair-scheduler's KubeSchedulerConfiguration: deploy/'s file, in this namespace, for this
resource name; with the entries reshaped where scheduler.gpuEntry or scheduler.everyPodEntry
differ from deploy/'s (then without the file's comments). */}}
{{- define "gpupair.secondSchedulerConfig" -}}
{{- $text := .Files.Get "files/second-scheduler-config.yaml"
    | replace "gpupair-extender.gpupair-system.svc" (printf "gpupair-extender.%s.svc" (include "gpupair.namespace" .))
    | replace "resourceNamespace: gpupair-system" (printf "resourceNamespace: %s" (include "gpupair.namespace" .))
    | replace "- name: nvidia.com/gpu" (printf "- name: %s" .Values.resourceName) }}
{{- if or .Values.scheduler.gpuEntry.ignorable (not .Values.scheduler.everyPodEntry.enabled) }}
{{- $config := fromYaml $text }}
{{- $_ := set $config "extenders" (fromYamlArray (include "gpupair.shapedEntries" (dict "extenders" $config.extenders "values" .Values))) }}
{{- toYaml $config }}
{{- else }}
{{- $text }}
{{- end }}
{{- end }}
