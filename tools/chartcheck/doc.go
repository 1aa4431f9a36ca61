// Package chartcheck holds the checks of the Helm chart in deploy/k8s/sluice:
// its test renders the chart with helm (the pinned build in bin/helm, or
// $SLUICE_HELM) with the default values and with TLS, parses every manifest
// and checks what a cluster depends on: a volume claim per stateful pod,
// probes on gRPC health, disruption budgets, headless Services that publish
// pods before they are ready, and flags that agree across roles (the etcd
// initial cluster names every controller pod at its DNS name, node ids do
// not overlap, every flag exists in sluiced). No Kubernetes cluster is
// involved: it checks the manifests, not their behaviour.
package chartcheck
