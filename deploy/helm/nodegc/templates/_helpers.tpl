{{/*
The prefix of every object name: fullnameOverride, else the release name if it holds the chart's name
(nameOverride), else "<release>-<name>". Release "nodegc" gives nodegc-node, nodegc-owner, nodegc-config.
*/}}
{{- define "nodegc.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "nodegc.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- $name := include "nodegc.name" . }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Metadata labels: app.kubernetes.io/name always, Helm's standard labels when helmLabels (not in the
generated deploy/daemonset.yaml). The workloads' selectors use nodegc.selectorLabels only;
the scrape objects select nodegc.podLabels.
*/}}
{{- define "nodegc.labels" -}}
app.kubernetes.io/name: {{ include "nodegc.name" . }}
{{- if .Values.helmLabels }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{/* Selector labels of a workload: include "nodegc.selectorLabels" (list . "node") */}}
{{- define "nodegc.selectorLabels" -}}
app.kubernetes.io/name: {{ include "nodegc.name" (index . 0) }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end }}

{{/*
The labels of a workload's pods: include "nodegc.podLabels" (list . "node"). The selector labels, and
app.kubernetes.io/instance with helmLabels, by which the PodMonitor's and the ServiceMonitor's
relabelings keep this release's pods, so that a second release in the namespace (a canary) is not
scraped by this one's too (every target twice, under two jobs). Not in the workloads' selectors: a
selector is immutable, and a helm upgrade that changed it would fail.
*/}}
{{- define "nodegc.podLabels" -}}
{{ include "nodegc.selectorLabels" . }}
{{- if (index . 0).Values.helmLabels }}
app.kubernetes.io/instance: {{ (index . 0).Release.Name }}
{{- end }}
{{- end }}

{{/* config.leaderElection.leaderElect: "true" unless set false (the agent's default is true). */}}
{{- define "nodegc.leaderElect" -}}
{{- ne (toString (dig "leaderElection" "leaderElect" true (.Values.config | default dict))) "false" }}
{{- end }}

{{/* config.ownerGC.enableGarbageCollector: "true" unless set false (the agent's default is true). */}}
{{- define "nodegc.ownerGCEnabled" -}}
{{- ne (toString (dig "ownerGC" "enableGarbageCollector" true (.Values.config | default dict))) "false" }}
{{- end }}

{{/*
ownerGC.mode, validated: deployment, auto or off. auto needs leader election, as the agent does (it
refuses --owner-gc=auto without it while the owner GC is enabled): refused here rather than in a crash
loop on every node. deployment with the owner GC disabled in the configuration is refused too: the owner
collectors would run and collect nothing, and NodegcOwnerGCNoSyncedLeader, which expects an owner GC
where owner collectors are scraped, would fire for as long as they run; so is auto, whose node agents
would hold the owner GC's rights unused. ownerGC.mode off is the chart's way to turn the owner GC off.
*/}}
{{- define "nodegc.ownerGCMode" -}}
{{- $mode := toString .Values.ownerGC.mode }}
{{- if not (has $mode (list "deployment" "auto" "off")) }}
{{- fail (printf "ownerGC.mode %q is not one of deployment, auto, off" $mode) }}
{{- end }}
{{- if and (eq $mode "auto") (eq (include "nodegc.leaderElect" .) "false") (eq (include "nodegc.ownerGCEnabled" .) "true") }}
{{- fail "ownerGC.mode auto with config.leaderElection.leaderElect false: every node agent would run the owner GC on its own, so each refuses to start (a crash loop on every node). Either set config.leaderElection.leaderElect true, or run the owner GC in one instance: ownerGC.mode deployment (with ownerGC.replicas 1 without leader election), or ownerGC.mode off" }}
{{- end }}
{{- if and (eq $mode "deployment") (eq (include "nodegc.ownerGCEnabled" .) "false") }}
{{- fail "config.ownerGC.enableGarbageCollector false with ownerGC.mode deployment: the owner collector's Deployment would run with its owner GC off, collecting nothing, and the alert NodegcOwnerGCNoSyncedLeader would fire for as long as it runs. To turn the owner GC off, set ownerGC.mode off (no owner collector, and no rights for it)" }}
{{- end }}
{{- if and (eq $mode "auto") (eq (include "nodegc.ownerGCEnabled" .) "false") }}
{{- fail "config.ownerGC.enableGarbageCollector false with ownerGC.mode auto: every node agent would hold the owner GC's cluster-wide rights (get, list, watch, delete and patch of every resource) and never use them. To turn the owner GC off, set ownerGC.mode off (no rights for it)" }}
{{- end }}
{{- $mode }}
{{- end }}

{{/* The ServiceAccount the owner GC runs as: the owner collector's, or the node agent's in mode auto. */}}
{{- define "nodegc.ownerServiceAccount" -}}
{{- if eq (include "nodegc.ownerGCMode" .) "auto" }}
{{- include "nodegc.fullname" . }}-node
{{- else }}
{{- include "nodegc.fullname" . }}-owner
{{- end }}
{{- end }}

{{/*
The image reference of both workloads: <repository>@<digest> when image.digest is set (it pins the
image; the tag is not used), else <repository>:<tag>. Each is checked as the kubelet's reference parser
(distribution/reference) reads it, as values.schema.json's patterns do: a digest is sha256, sha384 or
sha512 and exactly 64, 96 or 128 lower-case hex digits; a repository holds no tag (":" after its last
"/") and no digest ("@"); a tag is [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}. Refused here rather than in
InvalidImageName on every node.
*/}}
{{- define "nodegc.image" -}}
{{- $digest := toString (.Values.image.digest | default "") }}
{{- $repo := toString .Values.image.repository }}
{{- $tag := toString .Values.image.tag }}
{{- if or (contains "@" $repo) (contains ":" (last (splitList "/" $repo))) }}
{{- fail (printf "image.repository %q holds a tag or a digest: give the repository alone, and the tag in image.tag or the digest in image.digest" $repo) }}
{{- end }}
{{- if and $tag (not (regexMatch "^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$" $tag)) }}
{{- fail (printf "image.tag %q is not a tag: letters, digits, '_', '.' and '-', starting with a letter, digit or '_', at most 128 (a digest goes in image.digest)" $tag) }}
{{- end }}
{{- if $digest }}
{{- if not (regexMatch "^(sha256:[a-f0-9]{64}|sha384:[a-f0-9]{96}|sha512:[a-f0-9]{128})$" $digest) }}
{{- fail (printf "image.digest %q is not a digest the kubelet accepts: want sha256:<64 lower-case hex digits> (or sha384:<96>, sha512:<128>), such as sha256:%s" $digest (repeat 64 "0")) }}
{{- end }}
{{- printf "%s@%s" $repo $digest }}
{{- else }}
{{- if not $tag }}
{{- fail "image.tag is empty, and image.digest too: give a tag (or a digest)" }}
{{- end }}
{{- printf "%s:%s" $repo $tag }}
{{- end }}
{{- end }}

{{/*
node.extraArgs or owner.extraArgs, checked: include "nodegc.checkExtraArgs" (list . "node"). A flag the
chart sets itself (--config/-c, --owner-gc, --metrics-bind-address, --healthz-bind-address), with "=" or
as a separate argument, is refused, naming the chart value to set instead: the agent takes the last
occurrence of a flag, so an extra one would override the chart's without a word (the agent listening on
a port the pod does not declare and nothing scrapes, probes on a port nothing serves, the owner GC's
election in every node agent). --kubeconfig too: the pods use their ServiceAccount token, and no file of
the node's is mounted, so every pod would exit at start.
*/}}
{{- define "nodegc.checkExtraArgs" -}}
{{- $root := index . 0 }}
{{- $workload := index . 1 }}
{{- $flags := list
  (list "--config" "the chart's ConfigMap, from the chart value config: set the configuration there")
  (list "--owner-gc" "the chart value ownerGC.mode (deployment, auto, off): set that instead")
  (list "--metrics-bind-address" "the chart value ports.metrics (the port; the agent listens on every address): set that instead")
  (list "--healthz-bind-address" "the chart value ports.healthz (the port; the agent listens on every address): set that instead")
  (list "--kubeconfig" "no flag: the chart's pods use their ServiceAccount token, and no file of the node's is mounted, so every pod would exit at start: not supported by this chart") }}
{{- range $i, $a := (get (get $root.Values $workload) "extraArgs" | default list) }}
{{- $arg := toString $a }}
{{- range $f := $flags }}
{{- $name := index $f 0 }}
{{- if or (eq $arg $name) (hasPrefix (printf "%s=" $name) $arg) (and (eq $name "--config") (hasPrefix "-c" $arg)) }}
{{- fail (printf "%s.extraArgs[%d] %q: the chart sets %s itself, from %s (the agent takes a flag's last occurrence, so this one would override the chart's)" $workload $i $arg (eq $name "--config" | ternary "--config (-c)" $name) (index $f 1)) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The socket's directory, which the node agent mounts (never the socket file). A socket in / would mount
the whole host: refused.
*/}}
{{- define "nodegc.socketDir" -}}
{{- $s := .Values.runtime.socket }}
{{- if not (isAbs $s) }}
{{- fail (printf "runtime.socket %q is not an absolute path" $s) }}
{{- end }}
{{- $d := dir $s }}
{{- if eq $d "/" }}
{{- fail (printf "runtime.socket %q: its directory is mounted, and a socket in / would mount the whole host" $s) }}
{{- end }}
{{- $d }}
{{- end }}

{{/*
The node agent's mount paths, each the value it comes from. Each must be absolute (the agent refuses a
relative stateDirectory or log directory, in a crash loop on every node) and not / (the whole host),
and two that coincide are refused (compared cleaned: /var/log/pods/ is /var/log/pods): the API server
refuses a pod with two volume mounts at one path. Nested paths are distinct mounts, which the API server
takes, but of stateDirectory, podLogsDirectory and containerLogsDirectory none may lie in another, as the
agent refuses (its state would go with what the container GC removes in a log directory).
*/}}
{{- define "nodegc.checkMountPaths" -}}
{{- $mounts := list
  (list "runtime.socket's directory (the agent mounts the socket's directory)" (include "nodegc.socketDir" .))
  (list "runtime.containerdRoot" .Values.runtime.containerdRoot)
  (list "stateDirectory" .Values.stateDirectory)
  (list "podLogsDirectory" .Values.podLogsDirectory)
  (list "containerLogsDirectory" .Values.containerLogsDirectory)
  (list "the configuration's own mount" "/etc/nodegc") }}
{{- $seen := dict }}
{{- range $m := $mounts }}
{{- $raw := toString (index $m 1) }}
{{- if not (isAbs $raw) }}
{{- fail (printf "%s %q is not an absolute path: every node path is the host path, the agent's mount path and the configuration's value at once" (index $m 0) $raw) }}
{{- end }}
{{- $path := clean $raw }}
{{- if eq $path "/" }}
{{- fail (printf "%s %q would mount the whole host into the node agent: give the directory itself" (index $m 0) $raw) }}
{{- end }}
{{- with get $seen $path }}
{{- $hint := "Give each its own path" }}
{{- if hasPrefix "runtime.socket" . }}
{{- $hint = "Give each its own path: a runtime socket in a directory of its own (e.g. <containerdRoot>/run/containerd.sock, not in containerdRoot itself)" }}
{{- end }}
{{- fail (printf "%s and %s are both %s: the node agent would mount two volumes at one path, which the API server refuses. %s" . (index $m 0) $path $hint) }}
{{- end }}
{{- $_ := set $seen $path (index $m 0) }}
{{- end }}
{{- $dirs := list (list "stateDirectory" .Values.stateDirectory) (list "podLogsDirectory" .Values.podLogsDirectory) (list "containerLogsDirectory" .Values.containerLogsDirectory) }}
{{- range $a := $dirs }}
{{- range $b := $dirs }}
{{- if hasPrefix (printf "%s/" (clean (toString (index $b 1)))) (clean (toString (index $a 1))) }}
{{- fail (printf "%s %q lies in %s %q: the agent refuses it (its state would go with what the container GC removes in a log directory). Give each its own directory, apart" (index $a 0) (toString (index $a 1)) (index $b 0) (toString (index $b 1))) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/*
ports.healthz and ports.metrics: each a port number, 1 to 65535, and not the same. The configuration's "0"
(that server off) is refused rather than rendered: the probes use the healthz port and the scrape objects the
metrics port, and the API server refuses a containerPort 0. One port for both (which the agent itself takes,
serving both on one listener) is refused too, as hack/render-deploy.sh refuses it: on the host network each
container port is also a host port, and the API server refuses a pod with one host port twice, so the
DaemonSet would be created and never make a pod.
*/}}
{{- define "nodegc.checkPorts" -}}
{{- range $name := list "healthz" "metrics" }}
{{- $p := get $.Values.ports $name }}
{{- $n := $p | int }}
{{- $number := or (kindIs "float64" $p) (kindIs "int" $p) (kindIs "int64" $p) }}
{{- if eq (toString $p) "" }}
{{- fail (printf "ports.%s is empty: give a port number (1 to 65535)" $name) }}
{{- end }}
{{- if or (not $number) (ne (toString $n) (toString $p)) }}
{{- fail (printf "ports.%s %s is not a port number (1 to 65535)" $name (kindIs "string" $p | ternary (printf "%q (a string)" (toString $p)) (toString $p))) }}
{{- end }}
{{- if eq $n 0 }}
{{- fail (printf "ports.%s 0: the chart cannot turn the %s server off (the configuration's \"0\"): %s. Give it a port free on every node (1 to 65535)" $name $name (eq $name "healthz" | ternary "the liveness and readiness probes ask /healthz and /readyz on it" "the PodMonitor and ServiceMonitor scrape /metrics on it, and the alerts need it")) }}
{{- end }}
{{- if or (lt $n 0) (gt $n 65535) }}
{{- fail (printf "ports.%s %d is not a port number (1 to 65535)" $name $n) }}
{{- end }}
{{- end }}
{{- if eq (.Values.ports.healthz | int) (.Values.ports.metrics | int) }}
{{- fail (printf "ports.healthz and ports.metrics are both %d: the node agent runs on the host network, where each container port is also a host port, and the API server refuses a pod with one host port twice, so the DaemonSet would create no node agent on any node (while helm install reports success). Give each its own port, free on every node" (.Values.ports.healthz | int)) }}
{{- end }}
{{- end }}

{{/*
node.updateStrategy of type RollingUpdate (with another type, rollingUpdate is left out). maxSurge other
than 0 is refused: the node agent holds host ports (host network, ports.healthz and ports.metrics), so a
surge pod, which the DaemonSet controller starts beside the old one on its node and waits for, is never
scheduled there (the scheduler's NodePorts filter: the old one holds the ports), and the rollout stalls on
every node (KEP-1591 names host ports as the case surge cannot serve). maxUnavailable must then let one
go: 0 (or 0%) is what the API server refuses without a surge, and more than 100% is refused too; unset, the
API server's default is 1. Refused here, naming the value, rather than at the install or in a rollout.
*/}}
{{- define "nodegc.checkUpdateStrategy" -}}
{{- $s := .Values.node.updateStrategy | default dict }}
{{- if eq (toString (get $s "type")) "RollingUpdate" }}
{{- $ru := get $s "rollingUpdate" | default dict }}
{{- range $field := list "maxSurge" "maxUnavailable" }}
{{- $v := index $ru $field }}
{{- if and (hasKey $ru $field) (not (kindIs "invalid" $v)) }}
{{- $text := toString $v }}
{{- $n := 0 }}
{{- $percent := false }}
{{- if kindIs "string" $v }}
{{- if not (regexMatch "^[0-9]+%$" $text) }}
{{- fail (printf "node.updateStrategy.rollingUpdate.%s %q is neither a number nor a percentage (10%%)" $field $text) }}
{{- end }}
{{- $n = trimSuffix "%" $text | atoi }}
{{- $percent = true }}
{{- else }}
{{- $n = $v | int }}
{{- end }}
{{- if and (eq $field "maxSurge") (ne $n 0) }}
{{- fail (printf "node.updateStrategy.rollingUpdate.maxSurge %s: the node agent holds host ports (it runs on the host network: ports.healthz, ports.metrics), so a surge pod, started beside the old one on its node before that one stops, is never scheduled there (the old one holds the ports), and the rollout would stall on every node. Leave maxSurge unset (0); maxUnavailable sets the pace of a rollout" $text) }}
{{- end }}
{{- if and (eq $field "maxUnavailable") (le $n 0) }}
{{- fail (printf "node.updateStrategy.rollingUpdate.maxUnavailable %s: a rollout must replace at least one node agent at a time (the API server refuses maxUnavailable 0 without a maxSurge, and maxSurge cannot work with the node agent's host ports). Give at least 1, or a percentage of at least 1%%" $text) }}
{{- end }}
{{- if and (eq $field "maxUnavailable") $percent (gt $n 100) }}
{{- fail (printf "node.updateStrategy.rollingUpdate.maxUnavailable %s: more than 100%%, which the API server refuses" $text) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/*
GOMAXPROCS from the container's CPU limit, rounded up (500m and 1 give 1). Go's own default never goes
below 2 Ps, which under a limit of one CPU or less share that one CPU: the second P only adds thread
wake-ups (with 2 Ps the owner GC spent 1.10-1.28x the CPU per collected object it spent with 1, at the
same rate, in four runs of its benchmark; README, Owner GC at scale).
Without a limit, Kubernetes gives the node's allocatable CPUs, as Go would.
*/}}
{{- define "nodegc.gomaxprocs" -}}
- name: GOMAXPROCS
  valueFrom:
    resourceFieldRef:
      resource: limits.cpu
      divisor: "1"
{{- end }}

{{/*
GOMEMLIMIT from the container's memory limit, in bytes: Go collects harder as its memory nears the limit
rather than growing into the cgroup's OOM kill. A resourceFieldRef gives the whole limit (a divisor only
rounds), so nodegc run lowers a GOMEMLIMIT at the cgroup's memory limit to 90% of it at start
(internal/memlimit), leaving room for the memory Go does not count. The owner GC's peak is the start-up
lists (README, Owner GC at scale); in ownerGC.mode auto the elected node agent holds them under the node
agent's limit. A soft limit: a live heap above it still grows, and is then OOM-killed. Without a limit,
the node's allocatable memory (and nodegc leaves it).
*/}}
{{- define "nodegc.gomemlimit" -}}
- name: GOMEMLIMIT
  valueFrom:
    resourceFieldRef:
      resource: limits.memory
      divisor: "1"
{{- end }}

{{/*
The pod annotations of a workload: podAnnotations, and checksum/config, a digest of the rendered
configuration. The agent reads its configuration once, at start: a helm upgrade (or an apply of the
regenerated manifest) that changes what it reads changes the digest, and so rolls the pods.
include "nodegc.podAnnotations" (list . "node"): the DaemonSet's, the digest of the whole ConfigMap.
include "nodegc.podAnnotations" (list . "owner"): the owner collector's (--owner-gc=only), the digest of
the sections it reads only (internal/agent: ownerGC, leaderElection, clientConnection, the bind addresses,
enableProfilingHandler), so that a node-only change (an image exclusion, a container GC setting) does not
roll the owner pods: a Lease handover, and the new leader's relist of every resource of the cluster, for
nothing the owner GC reads. Its nodegc_config_info then keeps the digest it started with, which
NodegcConfigMixed (node agents only) does not count.
*/}}
{{- define "nodegc.podAnnotations" -}}
{{- $root := index . 0 }}
{{- $rendered := include (print $root.Template.BasePath "/configmap.yaml") $root }}
{{- $checksum := $rendered | sha256sum }}
{{- if eq (index . 1) "owner" }}
{{- $cfg := get (get ($rendered | fromYaml) "data") "config.yaml" | fromYaml }}
{{- $checksum = pick $cfg "apiVersion" "kind" "ownerGC" "leaderElection" "clientConnection" "metricsBindAddress" "healthzBindAddress" "enableProfilingHandler" | toYaml | sha256sum }}
{{- end }}
{{- toYaml (merge (dict "checksum/config" $checksum) (deepCopy ($root.Values.podAnnotations | default dict))) }}
{{- end }}

{{/*
A workload's nodeSelector: kubernetes.io/os: linux and kubernetes.io/arch: amd64 beside the values'
(include "nodegc.nodeSelector" .Values.node.nodeSelector). nodegc is a Linux program, and make image
builds it for amd64 only; the node agent tolerates every taint: without them, it would land on Windows
and arm64 nodes, where it never runs (exec format error; helm install --wait never ends). Virtual nodes
that report linux are not left out by it (values.yaml, node.nodeSelector). The values' own
kubernetes.io/arch wins (an image built for another architecture); "" leaves the architecture out (a
multi-architecture image).
*/}}
{{- define "nodegc.nodeSelector" -}}
{{- $sel := deepCopy (. | default dict) }}
{{- $base := dict "kubernetes.io/os" "linux" "kubernetes.io/arch" "amd64" }}
{{- if and (hasKey $sel "kubernetes.io/arch") (eq (toString (get $sel "kubernetes.io/arch")) "") }}
{{- $_ := unset $sel "kubernetes.io/arch" }}
{{- $_ := unset $base "kubernetes.io/arch" }}
{{- end }}
{{- toYaml (merge $sel $base) }}
{{- end }}

{{/*
The release's namespace, as the API server has it (lookup: helm install and upgrade; helm template and
--dry-run=client see none): a pod-security.kubernetes.io/enforce label other than privileged fails the
install, since Pod Security Admission would refuse every node agent pod (hostNetwork, hostPath, root)
while helm install reports success. A namespace without the label takes the cluster's default level,
which the chart cannot read: NOTES.txt says what to check.
*/}}
{{- define "nodegc.checkNamespace" -}}
{{- if not .Values.namespace.create }}
{{- $ns := lookup "v1" "Namespace" "" .Release.Namespace }}
{{- $level := dig "metadata" "labels" "pod-security.kubernetes.io/enforce" "" ($ns | default dict) }}
{{- if and $level (ne $level "privileged") }}
{{- fail (printf "namespace %s enforces Pod Security level %q (its label pod-security.kubernetes.io/enforce), which refuses the node agent's pods (host network, hostPath volumes, root): every node would be left without one. Label it privileged: kubectl label namespace %s pod-security.kubernetes.io/enforce=privileged --overwrite, or install into a namespace of nodegc's own (README, Install with Helm)" .Release.Namespace $level .Release.Namespace) }}
{{- end }}
{{- end }}
{{- end }}

{{/*
A duration of the configuration in nanoseconds, as a float: include "nodegc.durationNs" (list PATH TEXT).
TEXT is a Go duration (90s, 12h45m, 1.5h, -1s; 0 alone is zero), each unit's fraction truncated to whole
nanoseconds as time.ParseDuration truncates it; anything else, or beyond time.Duration's range (about
2562047h), fails the render, naming config.PATH (the values' schema refuses a malformed one first, unless
skipped).
*/}}
{{- define "nodegc.durationNs" -}}
{{- $path := index . 0 }}
{{- $text := toString (index . 1) }}
{{- if not (regexMatch "^[-+]?(0|(([0-9]+(\\.[0-9]*)?|\\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$" $text) }}
{{- fail (printf "config.%s %q is not a duration: a number with a unit (90s, 2m, 12h45m; 0 alone is zero)" $path $text) }}
{{- end }}
{{- $units := dict "ns" 1.0 "us" 1000.0 "µs" 1000.0 "μs" 1000.0 "ms" 1000000.0 "s" 1000000000.0 "m" 60000000000.0 "h" 3600000000000.0 }}
{{- $total := 0.0 }}
{{- range $part := regexFindAll "([0-9]+(\\.[0-9]*)?|\\.[0-9]+)(ns|us|µs|μs|ms|s|m|h)" $text -1 }}
{{- $unit := regexFind "(ns|us|µs|μs|ms|s|m|h)$" $part }}
{{- $total = addf $total (floor (mulf (float64 (trimSuffix $unit $part)) (get $units $unit))) }}
{{- end }}
{{- if gt $total 9223372036854775807.0 }}
{{- fail (printf "config.%s %q is out of range: a duration is at most 2562047h47m16.854775807s (%s)" $path $text "every node agent would refuse this configuration at start") }}
{{- end }}
{{- if hasPrefix "-" $text }}
{{- $total = mulf $total -1.0 }}
{{- end }}
{{- $total }}
{{- end }}

{{/*
The rules of nodegc's configuration validation (pkg/config, Validate) that a value of config alone can
break, and its rules between durations, each with the agent's own bound and message: refused here, naming
the value, rather than by every node agent at its next start (a crash loop on every node: the ConfigMap is
shared, and an agent restarted for any reason reads it). An unset or null value is the agent's default
(below, as pkg/config has them), which it accepts; a zero duration the agent defaults (the non-pointer
ones: runtimeRequestTimeout, the periods, the election's durations) is its default too. The values' schema
holds the types, enumerations and integer ranges; deploy's TestChartConfigAgreesWithAgent checks the two
against the agent's validation, value by value. Of the glob syntax of imageGC.exclude's patterns,
only a [ left open in a path component is checked here; of the agent's reading of a pattern, what
nodegc.checkExclude says (nodegc config validate checks the rest: README, Install with Helm).
include "nodegc.checkConfig" (dict "root" $ "cfg" $cfg)
*/}}
{{- define "nodegc.checkConfig" -}}
{{- $cfg := .cfg }}
{{- $root := .root }}
{{- $refused := "every node agent would refuse this configuration at start" }}
{{- $le := eq (include "nodegc.leaderElect" $root) "true" }}
{{- /* path, positive (0 is the default) or nonnegative, the agent's default, floor, ceiling */}}
{{- $rules := list
  (list "runtimeRequestTimeout" "positive" "2m" "1s" "24h")
  (list "imageGC.minimumGCAge" "nonnegative" "2m" "" "")
  (list "imageGC.maximumGCAge" "nonnegative" "0" "" "")
  (list "imageGC.period" "positive" "5m" "1s" "")
  (list "imageGC.diskCheckInterval" "positive" "1s" "100ms" "")
  (list "imageGC.fillRateHorizon" "nonnegative" "30s" "" "5m")
  (list "containerGC.minAge" "nonnegative" "0" "" "")
  (list "containerGC.maxAge" "nonnegative" "0" "" "")
  (list "containerGC.period" "positive" "1m" "1s" "")
  (list "ownerGC.discoveryResyncPeriod" "positive" "30s" "1s" "")
  (list "ownerGC.unsyncedResourceHold" "nonnegative" "10m" "" "")
  (list "ownerGC.stuckDeletionThreshold" "nonnegative" "15m" "" "")
  (list "leaderElection.leaseDuration" "positive" "15s" "" "")
  (list "leaderElection.renewDeadline" "positive" "10s" "" "")
  (list "leaderElection.retryPeriod" "positive" "2s" "" "") }}
{{- $ns := dict }}
{{- $text := dict }}
{{- range $r := $rules }}
{{- $path := index $r 0 }}
{{- $mode := index $r 1 }}
{{- $_ := set $text $path (index $r 2) }}
{{- $_ := set $ns $path (include "nodegc.durationNs" (list $path (index $r 2)) | float64) }}
{{- $keys := splitList "." $path }}
{{- $section := $cfg }}
{{- if eq (len $keys) 2 }}
{{- $section = get $cfg (index $keys 0) }}
{{- end }}
{{- $key := last $keys }}
{{- if and (kindIs "map" $section) (hasKey $section $key) (not (kindIs "invalid" (index $section $key))) (or $le (not (hasPrefix "leaderElection." $path))) }}
{{- $v := toString (index $section $key) }}
{{- $d := include "nodegc.durationNs" (list $path $v) | float64 }}
{{- if lt $d 0.0 }}
{{- fail (printf "config.%s %q: must be greater than %s0: %s" $path $v (eq $mode "positive" | ternary "" "or equal to ") $refused) }}
{{- end }}
{{- if and (gt $d 0.0) (index $r 3) (lt $d (include "nodegc.durationNs" (list $path (index $r 3)) | float64)) }}
{{- fail (printf "config.%s %q: must be at least %s: %s" $path $v (index $r 3) $refused) }}
{{- end }}
{{- if and (index $r 4) (gt $d (include "nodegc.durationNs" (list $path (index $r 4)) | float64)) }}
{{- fail (printf "config.%s %q: must be at most %s: %s" $path $v (index $r 4) $refused) }}
{{- end }}
{{- if or (gt $d 0.0) (eq $mode "nonnegative") }}
{{- $_ := set $ns $path $d }}
{{- $_ := set $text $path $v }}
{{- end }}
{{- end }}
{{- end }}
{{- /* Between durations (each the agent's default where unset). */}}
{{- range $pair := list (list "imageGC.maximumGCAge" "imageGC.minimumGCAge" "minimumGCAge") (list "containerGC.maxAge" "containerGC.minAge" "minAge") }}
{{- $max := get $ns (index $pair 0) }}
{{- if and (gt $max 0.0) (le $max (get $ns (index $pair 1))) }}
{{- fail (printf "config.%s %q: must be greater than %s (%s), or 0 for no maximum: %s" (index $pair 0) (get $text (index $pair 0)) (index $pair 2) (get $text (index $pair 1)) $refused) }}
{{- end }}
{{- end }}
{{- if $le }}
{{- $lease := get $ns "leaderElection.leaseDuration" }}
{{- $renew := get $ns "leaderElection.renewDeadline" }}
{{- $retry := get $ns "leaderElection.retryPeriod" }}
{{- if le (mulf (floor (divf $lease 1e9)) 1e9) $renew }}
{{- fail (printf "config.leaderElection.leaseDuration %q: must be greater than renewDeadline (%s), in whole seconds (the Lease holds leaseDurationSeconds): %s" (get $text "leaderElection.leaseDuration") (get $text "leaderElection.renewDeadline") $refused) }}
{{- end }}
{{- if le $renew (floor (mulf 1.2 $retry)) }}
{{- fail (printf "config.leaderElection.renewDeadline %q: must be greater than 1.2 x retryPeriod (%s), as client-go retries a renewal up to 1.2 x retryPeriod apart: %s" (get $text "leaderElection.renewDeadline") (get $text "leaderElection.retryPeriod") $refused) }}
{{- end }}
{{- $name := toString (dig "leaderElection" "resourceName" "" $cfg) }}
{{- if and $name (or (gt (len $name) 253) (not (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$" $name))) }}
{{- fail (printf "config.leaderElection.resourceName %q: the Lease's name must be a DNS-1123 subdomain (at most 253 lower case letters, digits, '-' and '.', starting and ending with a letter or digit): %s" $name $refused) }}
{{- end }}
{{- end }}
{{- /* Integers the schema's ranges cannot say. */}}
{{- $cg := get $cfg "containerGC" }}
{{- if and (kindIs "map" $cg) (hasKey $cg "maxPerPodContainer") (eq (toString (index $cg "maxPerPodContainer")) "0") }}
{{- fail (printf "config.containerGC.maxPerPodContainer 0: must be at least 1, or negative for no limit (nodegc always keeps the newest dead container of a live pod's container, which kubectl logs --previous reads): %s" $refused) }}
{{- end }}
{{- /*
clientConnection.kubeconfig: refused. Neither workload mounts a kubeconfig (the ConfigMap is all of
/etc/nodegc), and the agent stops at start on one it cannot read, so every node agent and every owner
collector (the ConfigMap is both's) would exit in a crash loop: the pods use their ServiceAccount token.
*/}}
{{- $cc := get $cfg "clientConnection" }}
{{- if kindIs "map" $cc }}
{{- with toString (get $cc "kubeconfig" | default "") }}
{{- fail (printf "config.clientConnection.kubeconfig %q: the chart's pods use their ServiceAccount token, and neither the node agents nor the owner collectors mount a file of the node's, so every one of them would exit at start: not supported by this chart. Leave config.clientConnection.kubeconfig unset" .) }}
{{- end }}
{{- end }}
{{- /* imageServiceEndpoint: a unix socket, in runtime.socket's directory, the one the node agent mounts. */}}
{{- with toString (get $cfg "imageServiceEndpoint" | default "") }}
{{- $path := trimPrefix "unix://" . }}
{{- if not (isAbs $path) }}
{{- fail (printf "config.imageServiceEndpoint %q: must be a unix:// URL of an absolute socket path, such as unix:///run/containerd/containerd.sock: %s" . $refused) }}
{{- end }}
{{- $dir := include "nodegc.socketDir" $root }}
{{- if ne (dir (clean $path)) (clean $dir) }}
{{- fail (printf "config.imageServiceEndpoint %q: the node agent mounts only runtime.socket's directory, %s, and this socket is not in it: not supported by this chart" . $dir) }}
{{- end }}
{{- end }}
{{- $ig := get $cfg "imageGC" }}
{{- if kindIs "map" $ig }}
{{- range $i, $p := (get $ig "exclude" | default list) }}
{{- if eq (trim (toString $p)) "" }}
{{- fail (printf "config.imageGC.exclude[%d] %q: must not be empty: %s" $i (toString $p) $refused) }}
{{- end }}
{{- range $part := splitList "/" (toString $p) }}
{{- if regexMatch "(^|[^\\\\])\\[[^\\]]*$" $part }}
{{- fail (printf "config.imageGC.exclude[%d] %q: a [ without its ] in %q (glob syntax): close the character class, or write \\[ for a [ itself: %s" $i (toString $p) $part $refused) }}
{{- end }}
{{- end }}
{{- include "nodegc.checkExclude" (dict "i" $i "p" (toString $p) "refused" $refused) }}
{{- end }}
{{- $signals := list "allocatableMemory.available" "containerfs.available" "containerfs.inodesFree" "imagefs.available" "imagefs.inodesFree" "memory.available" "nodefs.available" "nodefs.inodesFree" "pid.available" }}
{{- range $field := list "evictionHard" "evictionSoft" }}
{{- range $signal, $raw := (get $ig $field | default dict) }}
{{- if not (has $signal $signals) }}
{{- fail (printf "config.imageGC.%s[%s]: not an eviction signal of the kubelet (%s): %s" $field $signal (join ", " $signals) $refused) }}
{{- end }}
{{- if and (has $signal (list "imagefs.available" "nodefs.available")) (not (kindIs "invalid" $raw)) }}
{{- $v := trim (toString $raw) }}
{{- if hasSuffix "%" $v }}
{{- if or (not (regexMatch "^([0-9]+(\\.[0-9]*)?|\\.[0-9]+)%$" $v)) (gt (trimSuffix "%" $v | float64) 100.0) }}
{{- fail (printf "config.imageGC.%s[%s] %q: a percentage must be between 0%% and 100%%: %s" $field $signal (toString $raw) $refused) }}
{{- end }}
{{- else if not (regexMatch "^\\+?([0-9]+(\\.[0-9]*)?|\\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?$" $v) }}
{{- fail (printf "config.imageGC.%s[%s] %q: must be a percentage (\"15%%\") or a quantity that is not negative (\"2Gi\"): %s" $field $signal (toString $raw) $refused) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- $og := get $cfg "ownerGC" }}
{{- if kindIs "map" $og }}
{{- $seen := dict }}
{{- range $i, $gr := (get $og "gcIgnoredResources" | default list) }}
{{- $res := toString (get ($gr | default dict) "resource") }}
{{- if not $res }}
{{- fail (printf "config.ownerGC.gcIgnoredResources[%d]: resource is required, a plural resource name such as events: %s" $i $refused) }}
{{- end }}
{{- $group := toString (get ($gr | default dict) "group") }}
{{- if or (eq $group "core") (eq $group "v1") }}
{{- fail (printf "config.ownerGC.gcIgnoredResources[%d].group: %q: the core group is \"\" here, as discovery names it: write group: \"\": %s" $i $group $refused) }}
{{- end }}
{{- if contains "/" $group }}
{{- fail (printf "config.ownerGC.gcIgnoredResources[%d].group: %q: a group/version: write the group alone (an entry holds every version of its resource): %s" $i $group $refused) }}
{{- end }}
{{- /* Entries are compared exactly: a group that is no lower-case DNS subdomain, a resource that is no DNS label, match nothing. */}}
{{- $wildcard := "no wildcards: an entry names one group and one resource; list each as its own entry" }}
{{- if contains "*" $group }}
{{- fail (printf "config.ownerGC.gcIgnoredResources[%d].group: %q: %s: %s" $i $group $wildcard $refused) }}
{{- end }}
{{- if and $group (or (gt (len $group) 253) (not (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$" $group))) }}
{{- fail (printf "config.ownerGC.gcIgnoredResources[%d].group: %q: an API group is a lower-case DNS subdomain as discovery names it (lower case letters, digits, '-' and '.', no white space): %s" $i $group $refused) }}
{{- end }}
{{- if ne (lower $res) $res }}
{{- fail (printf "config.ownerGC.gcIgnoredResources[%d].resource: %q: a Kind, not a resource: write the plural, lower-case resource name as kubectl api-resources shows it: %s" $i $res $refused) }}
{{- end }}
{{- if contains "." $res }}
{{- fail (printf "config.ownerGC.gcIgnoredResources[%d].resource: %q: a CustomResourceDefinition's full name: give its group in group and its plural in resource: %s" $i $res $refused) }}
{{- end }}
{{- if contains "/" $res }}
{{- fail (printf "config.ownerGC.gcIgnoredResources[%d].resource: %q: a subresource: the owner GC watches resources, and an entry holds its subresources: write resource: %q: %s" $i $res (index (splitList "/" $res) 0) $refused) }}
{{- end }}
{{- if contains "*" $res }}
{{- fail (printf "config.ownerGC.gcIgnoredResources[%d].resource: %q: %s: %s" $i $res $wildcard $refused) }}
{{- end }}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" $res) }}
{{- fail (printf "config.ownerGC.gcIgnoredResources[%d].resource: %q: a resource name is lower-case letters, digits and '-', starting and ending with a letter or digit, as kubectl api-resources shows it (no white space): %s" $i $res $refused) }}
{{- end }}
{{- $key := printf "%s/%s" $group $res }}
{{- if hasKey $seen $key }}
{{- fail (printf "config.ownerGC.gcIgnoredResources[%d]: group %q resource %q is listed twice (also at [%d]): %s" $i (toString (get $gr "group")) $res (get $seen $key) $refused) }}
{{- end }}
{{- $_ := set $seen $key $i }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The agent's refusals of an imageGC.exclude pattern that compiles but can never match an image
reference, or reads as another image than it names (internal/imageref NeverMatches and Misread,
pkg/config Validate), where a regular expression says them exactly: a pattern with a character
class or an escape ([, \\) is left to the agent but for the checks that hold whatever they are.
Each refusal here is one the agent makes (deploy's TestChartConfigAgreesWithAgent).
include "nodegc.checkExclude" (dict "i" INDEX "p" PATTERN "refused" REASON)
*/}}
{{- define "nodegc.checkExclude" -}}
{{- $i := .i }}
{{- $p := .p }}
{{- $t := trim $p }}
{{- $refused := .refused }}
{{- $simple := not (regexMatch "[\\[\\\\]" $t) }}
{{- $lengths := dict "sha256" 64 "sha384" 96 "sha512" 128 }}
{{- $digestRule := "a digest is an algorithm and lowercase hexadecimal digits, such as sha256:<64 hex digits>, or a prefix of them and *" }}
{{- if regexMatch "^sha(256|384|512):[^/@]*$" $t }}
{{- /* An image ID pattern. */}}
{{- $algo := index (splitList ":" $t) 0 }}
{{- $hex := trimPrefix (printf "%s:" $algo) $t }}
{{- if and $simple (not (contains "?" $hex)) }}
{{- $want := get $lengths $algo }}
{{- $lit := replace "*" "" $hex }}
{{- if or (not (regexMatch "^[0-9a-f]*$" $lit)) (gt (len $lit) (int $want)) (and (not (contains "*" $hex)) (ne (len $lit) (int $want))) }}
{{- fail (printf "config.imageGC.exclude[%d] %q: can never match an image reference: %s (an image ID is %d of them: for the images whose ID starts with the digits crictl images shows, write sha256:DIGITS*): %s" $i $p $digestRule (int $want) $refused) }}
{{- end }}
{{- end }}
{{- else }}
{{- $rest := regexReplaceAll "@.*$" $t "" }}
{{- $hasDigest := contains "@" $t }}
{{- $digest := regexReplaceAll "^[^@]*@" $t "" }}
{{- $hasTag := regexMatch "^(.*):([^:/]*)$" $rest }}
{{- $name := $rest }}
{{- $tag := "" }}
{{- if $hasTag }}
{{- $name = regexReplaceAll "^(.*):([^:/]*)$" $rest "${1}" }}
{{- $tag = regexReplaceAll "^(.*):([^:/]*)$" $rest "${2}" }}
{{- end }}
{{- $comps := splitList "/" $name }}
{{- $one := eq (len $comps) 1 }}
{{- $first := index $comps 0 }}
{{- if contains "://" $t }}
{{- fail (printf "config.imageGC.exclude[%d] %q: can never match an image reference: a reference has no scheme (remove it): %s" $i $p $refused) }}
{{- end }}
{{- if eq $name "" }}
{{- fail (printf "config.imageGC.exclude[%d] %q: can never match an image reference: no repository name: write **%s for any repository: %s" $i $p $t $refused) }}
{{- end }}
{{- $tail := ($one | ternary $name (join "/" (rest $comps))) }}
{{- if regexMatch "(^|[^\\\\])\\.\\*" (regexReplaceAll "\\[[^\\]]*\\]" $tail "") }}
{{- $head := ($one | ternary "" (printf "%s/" $first)) }}
{{- $suffix := trimPrefix $name $t }}
{{- $anyChars := printf "%s%s%s" $head (regexReplaceAll "(^|[^\\\\])\\.\\*" $tail "${1}*") $suffix }}
{{- $dot := printf "%s%s%s" $head (regexReplaceAll "(^|[^\\\\])\\.\\*" $tail "${1}[.]*") $suffix }}
{{- fail (printf "config.imageGC.exclude[%d] %q: has \".*\", which in a regular expression is any characters; in a pattern \".\" is a dot and \"*\" alone is any characters, so it matches only names with a dot there: write %s for any characters, or %s to mean the dot: %s" $i $p $anyChars $dot $refused) }}
{{- end }}
{{- if and $one (not $hasDigest) (regexMatch "^[^\\[\\\\]*$" $first) (or (contains "." $first) (and (eq (lower $first) "localhost") (or (not $hasTag) (regexMatch "^[0-9]+$" $tag)))) }}
{{- $host := printf "%s/**" $first }}
{{- if regexMatch "^[0-9]+$" $tag }}
{{- $host = printf "%s:%s/**" $first $tag }}
{{- else if $hasTag }}
{{- $host = printf "%s/**:%s" $first $tag }}
{{- end }}
{{- fail (printf "config.imageGC.exclude[%d] %q: is a registry host alone, which a reference reads as the Docker Hub image docker.io/library/%s: write %s for every image of that registry: %s" $i $p $t $host $refused) }}
{{- end }}
{{- if has "" $comps }}
{{- fail (printf "config.imageGC.exclude[%d] %q: can never match an image reference: empty path component (a leading, trailing or double \"/\"): %s" $i $p $refused) }}
{{- end }}
{{- if and $one (regexMatch "^[0-9a-f]{64}$" $first) }}
{{- fail (printf "config.imageGC.exclude[%d] %q: can never match an image reference: a name of 64 hexadecimal digits is an image ID: write sha256:%s: %s" $i $p $first $refused) }}
{{- end }}
{{- if ne $first "**" }}
{{- range $c := ($one | ternary $comps (rest $comps)) }}
{{- if and (not (contains "\\" $c)) (regexMatch "[A-Z]" (regexReplaceAll "\\[[^\\]]*\\]" $c "")) }}
{{- fail (printf "config.imageGC.exclude[%d] %q: can never match an image reference: upper case in the repository path (references are lowercase): write the path in lower case: %s" $i $p $refused) }}
{{- end }}
{{- end }}
{{- end }}
{{- if and $simple (not $hasDigest) (regexMatch "[,{}()|+^$\\s]|(^|/)\\." $rest) }}
{{- fail (printf "config.imageGC.exclude[%d] %q: can never match an image reference: characters a reference cannot hold: one pattern per list item (no commas, spaces or braces), and a glob, not a regular expression (* within a path component, ** for any number of components): %s" $i $p $refused) }}
{{- end }}
{{- if and $hasDigest (not (regexMatch "[?\\[\\\\]" $digest)) }}
{{- $algo := index (splitList ":" $digest) 0 }}
{{- if not (contains "*" $digest) }}
{{- if not (regexMatch "^(sha256:[0-9a-f]{64}|sha384:[0-9a-f]{96}|sha512:[0-9a-f]{128})$" $digest) }}
{{- fail (printf "config.imageGC.exclude[%d] %q: can never match an image reference: %s: %s" $i $p $digestRule $refused) }}
{{- end }}
{{- else if and (contains ":" $digest) (not (contains "*" $algo)) }}
{{- $lit := replace "*" "" (trimPrefix (printf "%s:" $algo) $digest) }}
{{- if or (not (hasKey $lengths $algo)) (not (regexMatch "^[0-9a-f]*$" $lit)) (gt (len $lit) (int (get $lengths $algo | default 0))) }}
{{- fail (printf "config.imageGC.exclude[%d] %q: can never match an image reference: %s: %s" $i $p $digestRule $refused) }}
{{- end }}
{{- end }}
{{- end }}
{{- if and $one (regexMatch "^([0-9a-f]{12,63}|[0-9a-f]{8,63}\\*+)$" $first) }}
{{- fail (printf "config.imageGC.exclude[%d] %q: is a Docker Hub name of hexadecimal digits (docker.io/library/%s), which looks like a short image ID as crictl images shows it: an image ID pattern is sha256:%s*: %s" $i $p $first (trimAll "*" $first) $refused) }}
{{- end }}
{{- if and $one (ne $first "**") (regexMatch "^[*?\\[]" $first) (not (regexMatch "\\[\\^?\\]" $first)) }}
{{- $any := printf "**/%s" $t }}
{{- if regexMatch "^\\*+$" $first }}
{{- $any = printf "**%s" (trimPrefix $first $t) }}
{{- end }}
{{- fail (printf "config.imageGC.exclude[%d] %q: is a name of one component, so it matches Docker Hub's official images only (docker.io/library/%s): write %s for any registry, or docker.io/library/%s to mean official images only: %s" $i $p $t $any $t $refused) }}
{{- end }}
{{- end }}
{{- end }}
