package deploy_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

// proxyClientLabel is the label the agents' NetworkPolicy admits to the
// egress proxy (components/egress-proxy).
const proxyClientLabel = "fusebox.dev/proxy-client"

// proxyClients are the kustomizations whose pods use their node's egress
// proxy, and the rendering whose agents serve it.
var proxyClients = map[string]string{"examples/app-other-language": "overlays/dev"}

// agentProxyPort returns the container port "proxy" of r's agents, or
// false when they serve no proxy.
func agentProxyPort(t *testing.T, r *rendering) (corev1.ContainerPort, bool) {
	t.Helper()
	for _, p := range r.templates {
		for _, fc := range p.fuseboxContainers() {
			if fc.binary != "fusebox-agent" {
				continue
			}
			for _, cp := range fc.c.Ports {
				if cp.Name == "proxy" {
					return cp, true
				}
			}
		}
	}
	return corev1.ContainerPort{}, false
}

// TestEgressProxyReachesOnlyItsClients checks every rendering whose agents
// serve the egress proxy: it is published on the node (hostPort = the
// container port, so a pod reaches its own node's agent at
// $(HOST_IP):7952), and the agents' NetworkPolicy lets only pods
// labelled fusebox.dev/proxy-client reach that port: no rule admits it
// from everyone, from an IP block or from every pod.
func TestEgressProxyReachesOnlyItsClients(t *testing.T) {
	served := 0
	each(t, func(t *testing.T, r *rendering) {
		cp, ok := agentProxyPort(t, r)
		if !ok {
			return
		}
		served++
		if cp.HostPort != cp.ContainerPort {
			t.Errorf("proxy port %d: hostPort %d, want the same port on the node (pods call $(HOST_IP):%d)", cp.ContainerPort, cp.HostPort, cp.ContainerPort)
		}
		admitted := false
		for _, o := range r.objects {
			np, ok := o.obj.(*networkingv1.NetworkPolicy)
			if !ok || len(r.selected(np.Namespace, np.Spec.PodSelector.MatchLabels)) == 0 ||
				np.Spec.PodSelector.MatchLabels["app.kubernetes.io/name"] != "fusebox-agent" {
				continue
			}
			for _, rule := range np.Spec.Ingress {
				if !rulePort(rule, cp.ContainerPort) {
					continue
				}
				if len(rule.From) == 0 {
					t.Errorf("%s admits port %d from everyone", o.id, cp.ContainerPort)
				}
				for _, peer := range rule.From {
					switch {
					case peer.IPBlock != nil:
						t.Errorf("%s admits port %d from the IP block %s", o.id, cp.ContainerPort, peer.IPBlock.CIDR)
					case peer.PodSelector == nil || peer.PodSelector.MatchLabels[proxyClientLabel] != "true":
						t.Errorf("%s admits port %d from peers without %s: \"true\"", o.id, cp.ContainerPort, proxyClientLabel)
					default:
						admitted = true
					}
				}
			}
		}
		if !admitted {
			t.Errorf("no NetworkPolicy admits the proxy's clients (label %s) to port %d", proxyClientLabel, cp.ContainerPort)
		}
	})
	if served == 0 {
		t.Error("no rendering serves the egress proxy: components/egress-proxy is in no kustomization")
	}
}

// rulePort reports whether an ingress rule admits TCP port (no ports: all).
func rulePort(rule networkingv1.NetworkPolicyIngressRule, port int32) bool {
	if len(rule.Ports) == 0 {
		return true
	}
	for _, p := range rule.Ports {
		if p.Port == nil || (p.Port.IntVal == port && (p.Protocol == nil || *p.Protocol == corev1.ProtocolTCP)) {
			return true
		}
	}
	return false
}

// TestProxyClientSnippet checks examples/app-other-language against the
// agents that serve the proxy: each container sets HTTP_PROXY and
// http_proxy (curl reads only the latter), HTTPS_PROXY and https_proxy to
// http://$(HOST_IP):PORT with HOST_IP from status.hostIP and PORT the
// agents' hostPort, and the pod carries the label the NetworkPolicy
// admits.
func TestProxyClientSnippet(t *testing.T) {
	for dir, agents := range proxyClients {
		t.Run(dir, func(t *testing.T) {
			cp, ok := agentProxyPort(t, render(t, agents))
			if !ok {
				t.Fatalf("%s's agents serve no proxy", agents)
			}
			r := render(t, dir)
			if len(r.templates) == 0 {
				t.Fatalf("%s renders no workload", dir)
			}
			for _, p := range r.templates {
				if p.meta.Labels[proxyClientLabel] != "true" {
					t.Errorf("%s: label the pod %s: \"true\" (the agents' NetworkPolicy admits only such pods)", p.owner, proxyClientLabel)
				}
				for i := range p.spec.Containers {
					c := &p.spec.Containers[i]
					where := fmt.Sprintf("%s container %s", p.owner, c.Name)
					hostIP := ""
					for _, e := range c.Env {
						if e.Name == "HOST_IP" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
							hostIP = e.ValueFrom.FieldRef.FieldPath
						}
					}
					if hostIP != "status.hostIP" {
						t.Errorf("%s: HOST_IP must come from the downward API's status.hostIP (the node's agent), got %q", where, hostIP)
					}
					env, _ := containerEnv(t, where, c)
					want := fmt.Sprintf("http://$(HOST_IP):%d", cp.HostPort)
					for _, name := range []string{"HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy"} {
						if env[name] != want {
							t.Errorf("%s: %s=%q, want %q", where, name, env[name], want)
						}
					}
					if noProxy := env["NO_PROXY"]; !slices.Contains(strings.Split(noProxy, ","), "localhost") || env["no_proxy"] != noProxy {
						t.Errorf("%s: NO_PROXY=%q no_proxy=%q: list localhost in both", where, noProxy, env["no_proxy"])
					}
				}
			}
		})
	}
}
