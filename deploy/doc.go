// Package deploy holds what it takes to run Fusebox — the container image
// (docker/), Kubernetes manifests (kubernetes/: a kustomize base, overlays,
// components and examples), systemd units (systemd/), the Grafana dashboard
// (grafana/) and the Prometheus scrape config (prometheus/) — and the tests
// that check those files without a cluster or a Docker daemon: every
// kustomization renders and decodes strictly, every container is non-root
// and read-only, every flag a manifest or unit passes exists in its binary,
// every secret is an owner-only copy, and the units pass systemd-analyze.
//
// The package has no code of its own: its Go files are tests, and its
// module (kustomize, k8s.io/api) is in no binary's graph. README.md in this
// folder is the deployment and operations guide.
package deploy
