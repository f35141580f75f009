{{/*
kolla-agent in place of kubernetes-entrypoint: helm-toolkit's
kubernetes_entrypoint_init_container with the same arguments and the same
DEPENDENCY_* variables, run as `kolla-agent init`. Use it where the chart
includes helm-toolkit's snippet, e.g. keystone's templates/deployment-api.yaml:

      initContainers:
{{ tuple $envAll "api" $mounts_keystone_api_init | include "kolla-agent.snippets.init_container" | indent 8 }}

kolla-agent reads NAMESPACE, POD_NAME and DEPENDENCY_SERVICE, _JOBS,
_JOBS_JSON, _DAEMONSET, _CONTAINER, _POD_JSON, _CUSTOM_RESOURCE, _SOCKET
(agent/entrypoint); an empty variable is no dependency. INTERFACE_NAME and
PATH are kubernetes-entrypoint's and are not needed. COMMAND is left out:
the agent image has no shell, and without it `init` exits 0 once ready.
*/}}

{{- define "kolla-agent.snippets.init_container" -}}
{{- $envAll := index . 0 -}}
{{- $component := index . 1 -}}
{{- $mounts := index . 2 -}}
{{- $deps := index $envAll.Values.dependencies.static $component -}}
- name: init
{{ tuple $envAll "dep_check" | include "helm-toolkit.snippets.image" | indent 2 }}
{{- dict "envAll" $envAll "application" "kubernetes_entrypoint" "container" "kubernetes_entrypoint" | include "helm-toolkit.snippets.kubernetes_container_security_context" | indent 2 }}
  command: [kolla-agent, init]
  env:
    - name: POD_NAME
      valueFrom:
        fieldRef:
          apiVersion: v1
          fieldPath: metadata.name
    - name: NAMESPACE
      valueFrom:
        fieldRef:
          apiVersion: v1
          fieldPath: metadata.namespace
    - name: DEPENDENCY_SERVICE
      value: "{{ tuple $deps.services $envAll | include "helm-toolkit.utils.comma_joined_service_list" }}"
{{- if $deps.jobs -}}
  {{- if kindIs "string" (index $deps.jobs 0) }}
    - name: DEPENDENCY_JOBS
      value: "{{ include "helm-toolkit.utils.joinListWithComma" $deps.jobs }}"
  {{- else }}
    - name: DEPENDENCY_JOBS_JSON
      value: {{- toJson $deps.jobs | quote -}}
  {{- end -}}
{{- end }}
    - name: DEPENDENCY_DAEMONSET
      value: "{{ include "helm-toolkit.utils.joinListWithComma" $deps.daemonset }}"
    - name: DEPENDENCY_CONTAINER
      value: "{{ include "helm-toolkit.utils.joinListWithComma" $deps.container }}"
    - name: DEPENDENCY_POD_JSON
      value: {{ if $deps.pod }}{{ toJson $deps.pod | quote }}{{ else }}""{{ end }}
    - name: DEPENDENCY_CUSTOM_RESOURCE
      value: {{ if $deps.custom_resources }}{{ toJson $deps.custom_resources | quote }}{{ else }}""{{ end }}
  volumeMounts:
{{ toYaml $mounts | indent 4 }}
{{- end -}}
