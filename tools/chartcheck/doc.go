// Package chartcheck holds the checks of the Helm chart in deploy/k8s/sluice:
// its test renders the chart with helm (the pinned build in bin/helm, or
// $SLUICE_HELM) with the default values, with TLS from secrets and with TLS
// from cert-manager, parses every manifest and checks what a cluster depends
// on: a volume claim per stateful pod, probes on gRPC health, disruption
// budgets, headless Services that publish pods before they are ready, flags
// that agree across roles (the etcd initial cluster names every controller
// pod at its DNS name, node ids do not overlap, every flag exists in
// sluiced), and with cert-manager a Certificate per role that names only its
// role and every address its pods advertise, writing the secret they mount.
// No Kubernetes cluster is involved: it checks the manifests, not their
// behaviour.
package chartcheck
