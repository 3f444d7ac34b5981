{{/* The certs pod, for the Job and the CronJob alike. */}}
{{- define "gpupair.certsPod" -}}
metadata:
  labels:
    {{- include "gpupair.podLabels" (dict "ctx" . "name" "gpupair-certs" "component" "certs") | nindent 4 }}
spec:
  serviceAccountName: gpupair-certs
  {{- include "gpupair.imagePullSecrets" . | nindent 2 }}
  restartPolicy: OnFailure
  securityContext:
    {{- include "gpupair.podSecurityContext" . | nindent 4 }}
  containers:
    - name: certs
      image: {{ include "gpupair.image" . }}
      {{- include "gpupair.imagePullPolicy" . | nindent 6 }}
      args: ["certs"]
      env:
        - name: GPUPAIR_CERTS_NAMESPACE
          value: {{ include "gpupair.namespace" . }}
        - name: GPUPAIR_CERTS_SERVICE
          value: gpupair-webhook
        - name: GPUPAIR_CERTS_SECRET
          value: gpupair-webhook-tls
        - name: GPUPAIR_CERTS_WEBHOOK_CONFIG
          value: gpupair-webhook
        - name: GPUPAIR_CERTS_DAYS
          value: {{ .Values.certificates.days | quote }}
        - name: GPUPAIR_LOG_LEVEL
          value: {{ .Values.logLevel }}
      resources:
        {{- toYaml .Values.certificates.resources | nindent 8 }}
      securityContext:
        {{- include "gpupair.containerSecurityContext" . | nindent 8 }}
{{- end }}
