package deploy_test

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// kustomizations are the directories under deploy/kubernetes that render
// into something to apply.
var kustomizations = []string{"overlays/dev", "overlays/production", "examples/app", "examples/app-other-language",
	"examples/demo", "examples/demo/on-node-agent", "examples/node-prepared"}

// securedRenderings are the renderings whose pods TestPodsAreLockedDown
// and TestHostPathsHaveAnOwner check: the kustomizations and the base the
// overlays share.
var securedRenderings = append([]string{"base"}, kustomizations...)

// kinds maps apiVersion/kind to the k8s.io/api type a rendered object must
// decode into. A kind missing here fails the test: add its type.
var kinds = map[string]func() any{
	"v1/Namespace":                       func() any { return &corev1.Namespace{} },
	"v1/ServiceAccount":                  func() any { return &corev1.ServiceAccount{} },
	"v1/Service":                         func() any { return &corev1.Service{} },
	"apps/v1/DaemonSet":                  func() any { return &appsv1.DaemonSet{} },
	"apps/v1/Deployment":                 func() any { return &appsv1.Deployment{} },
	"policy/v1/PodDisruptionBudget":      func() any { return &policyv1.PodDisruptionBudget{} },
	"networking.k8s.io/v1/NetworkPolicy": func() any { return &networkingv1.NetworkPolicy{} },
}

// object is one rendered object, decoded.
type object struct {
	id  string // "Kind namespace/name"
	obj any    // a pointer to its k8s.io/api type
}

// podTemplate is the pod template of a workload, with what the checks need
// around it.
type podTemplate struct {
	owner     string // "Kind namespace/name"
	namespace string
	replicas  int32 // -1 for a DaemonSet
	meta      metav1.ObjectMeta
	spec      *corev1.PodSpec
}

// rendering is the decoded output of one kustomization.
type rendering struct {
	dir       string
	objects   []object
	templates []podTemplate
}

var renderings struct {
	mu   sync.Mutex
	done map[string]*rendering
}

// render renders deploy/kubernetes/DIR through kustomize's Go API (once
// per test process) and decodes every object strictly into its k8s.io/api
// type: unknown or duplicate fields fail.
func render(t *testing.T, dir string) *rendering {
	t.Helper()
	renderings.mu.Lock()
	defer renderings.mu.Unlock()
	if r, ok := renderings.done[dir]; ok {
		return r
	}
	path := filepath.Join(repoRoot, "deploy", "kubernetes", dir)
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	resources, err := k.Run(filesys.MakeFsOnDisk(), path)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	r := &rendering{dir: dir}
	for _, res := range resources.Resources() {
		y, err := res.AsYAML()
		if err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(y, &tm); err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		id := fmt.Sprintf("%s %s/%s", tm.Kind, res.GetNamespace(), res.GetName())
		newObj, ok := kinds[tm.APIVersion+"/"+tm.Kind]
		if !ok {
			t.Errorf("%s: %s: apiVersion %s kind %s has no k8s.io/api type in this test", dir, id, tm.APIVersion, tm.Kind)
			continue
		}
		obj := newObj()
		if err := yaml.UnmarshalStrict(y, obj); err != nil {
			t.Errorf("%s: %s does not decode strictly into %T: %v", dir, id, obj, err)
			continue
		}
		r.objects = append(r.objects, object{id: id, obj: obj})
		switch o := obj.(type) {
		case *appsv1.DaemonSet:
			r.templates = append(r.templates, podTemplate{owner: id, namespace: o.Namespace, replicas: -1,
				meta: o.Spec.Template.ObjectMeta, spec: &o.Spec.Template.Spec})
		case *appsv1.Deployment:
			replicas := int32(1)
			if o.Spec.Replicas != nil {
				replicas = *o.Spec.Replicas
			}
			r.templates = append(r.templates, podTemplate{owner: id, namespace: o.Namespace, replicas: replicas,
				meta: o.Spec.Template.ObjectMeta, spec: &o.Spec.Template.Spec})
		}
	}
	if renderings.done == nil {
		renderings.done = map[string]*rendering{}
	}
	renderings.done[dir] = r
	return r
}

// each runs f for every kustomization, as a subtest.
func each(t *testing.T, f func(t *testing.T, r *rendering)) {
	eachOf(t, kustomizations, f)
}

// eachOf runs f for every directory of dirs, rendered, as a subtest.
func eachOf(t *testing.T, dirs []string, f func(t *testing.T, r *rendering)) {
	for _, dir := range dirs {
		t.Run(dir, func(t *testing.T) { f(t, render(t, dir)) })
	}
}

func TestKustomizationsRenderAndDecodeStrictly(t *testing.T) {
	each(t, func(t *testing.T, r *rendering) {
		if len(r.objects) == 0 {
			t.Fatal("renders no object")
		}
		if len(r.templates) == 0 {
			t.Error("renders no workload")
		}
		seen := map[string]bool{}
		for _, o := range r.objects {
			if seen[o.id] {
				t.Errorf("%s rendered twice", o.id)
			}
			seen[o.id] = true
		}
	})
}

// TestStrictDecodingRefusesUnknownFields makes sure the decoding above is
// strict: a misspelt field fails.
func TestStrictDecodingRefusesUnknownFields(t *testing.T) {
	y := []byte("apiVersion: v1\nkind: Service\nmetadata:\n  name: x\nspec:\n  ports:\n    - port: 1\n      targetPrt: 2\n")
	if err := yaml.UnmarshalStrict(y, &corev1.Service{}); err == nil {
		t.Fatal("a Service with spec.ports[0].targetPrt decoded without error")
	}
}

// runAsUser returns the user a container runs as (the container's
// runAsUser, else the pod's; -1 when neither sets one) and whether
// runAsNonRoot is true for it (the container's, else the pod's).
func runAsUser(pod *corev1.PodSpec, c *corev1.Container) (uid int64, nonRoot bool) {
	uid = -1
	if s := pod.SecurityContext; s != nil {
		if s.RunAsUser != nil {
			uid = *s.RunAsUser
		}
		if s.RunAsNonRoot != nil {
			nonRoot = *s.RunAsNonRoot
		}
	}
	if s := c.SecurityContext; s != nil {
		if s.RunAsUser != nil {
			uid = *s.RunAsUser
		}
		if s.RunAsNonRoot != nil {
			nonRoot = *s.RunAsNonRoot
		}
	}
	return uid, nonRoot
}

// TestPodsAreLockedDown checks every container of every workload, the
// base's included: non-root (one exception, rootInit: the agent's
// host-dirs init container, with CAP_CHOWN alone; none at all with the
// node-prepared component), read-only root filesystem, no privilege
// escalation, every capability dropped, probes, requests and a memory
// limit, no host network or PID namespace. TestLockdownRefusesRootContainers
// shows that these checks fail on a root container.
func TestPodsAreLockedDown(t *testing.T) {
	eachOf(t, securedRenderings, func(t *testing.T, r *rendering) {
		for _, p := range r.templates {
			for _, problem := range lockdownProblems(p, !slices.Contains(nodePreparedRenderings, r.dir)) {
				t.Error(problem)
			}
		}
	})
}

// lockdownProblems returns what is wrong with the pod of p, a sentence
// each. allowRootInit says whether p may have rootInit (no: the pod is
// rendered with the node-prepared component).
func lockdownProblems(p podTemplate, allowRootInit bool) []string {
	var problems []string
	report := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	spec := p.spec
	if spec.HostNetwork || spec.HostPID || spec.HostIPC {
		report("%s: uses the host's network, PID or IPC namespace", p.owner)
	}
	if spec.SecurityContext == nil || spec.SecurityContext.SeccompProfile == nil ||
		spec.SecurityContext.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		report("%s: no RuntimeDefault seccomp profile", p.owner)
	}
	check := func(c *corev1.Container, init bool) {
		where := fmt.Sprintf("%s container %s", p.owner, c.Name)
		sc := c.SecurityContext
		if sc == nil {
			report("%s: no securityContext", where)
			return
		}
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			report("%s: root filesystem not read-only", where)
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			report("%s: allowPrivilegeEscalation not false", where)
		}
		if sc.Privileged != nil && *sc.Privileged {
			report("%s: privileged", where)
		}
		if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
			report("%s: capabilities not dropped (drop: [ALL])", where)
		}
		problems = append(problems, userProblems(p, c, init, allowRootInit)...)
		if !init && (c.ReadinessProbe == nil || c.LivenessProbe == nil) {
			report("%s: needs a readiness and a liveness probe", where)
		}
		res := c.Resources
		if res.Requests.Cpu().IsZero() || res.Requests.Memory().IsZero() {
			report("%s: no CPU and memory requests", where)
		}
		if res.Limits.Memory().IsZero() {
			report("%s: no memory limit", where)
		}
		if !res.Limits.Memory().IsZero() && res.Limits.Memory().Cmp(*res.Requests.Memory()) < 0 {
			report("%s: memory limit below the request", where)
		}
	}
	for i := range spec.InitContainers {
		check(&spec.InitContainers[i], true)
	}
	for i := range spec.Containers {
		check(&spec.Containers[i], false)
	}
	return problems
}

// selects reports whether a label selector (matchLabels only: what these
// manifests use) selects labels.
func selects(sel map[string]string, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func (r *rendering) selected(namespace string, sel map[string]string) []podTemplate {
	var out []podTemplate
	for _, p := range r.templates {
		if p.namespace == namespace && selects(sel, p.meta.Labels) {
			out = append(out, p)
		}
	}
	return out
}

// containerPort finds the port a probe, Service or NetworkPolicy refers to
// (by name or number) among the containers of a pod.
func containerPort(spec *corev1.PodSpec, port intstr.IntOrString, proto corev1.Protocol) (corev1.ContainerPort, bool) {
	if proto == "" {
		proto = corev1.ProtocolTCP
	}
	for _, c := range spec.Containers {
		for _, cp := range c.Ports {
			p := cp.Protocol
			if p == "" {
				p = corev1.ProtocolTCP
			}
			if p != proto {
				continue
			}
			if (port.Type == intstr.String && cp.Name == port.StrVal) || (port.Type == intstr.Int && cp.ContainerPort == port.IntVal) {
				return cp, true
			}
		}
	}
	return corev1.ContainerPort{}, false
}

// TestReferencesResolve checks what the API server would accept but a
// cluster would not run: Services, NetworkPolicies and PDBs that select no
// pod, ports that name no container port, probes on ports the container
// does not declare, mounts of undeclared volumes, scrape annotations on
// the wrong port.
func TestReferencesResolve(t *testing.T) {
	each(t, func(t *testing.T, r *rendering) {
		for _, o := range r.objects {
			switch o := o.obj.(type) {
			case *corev1.Service:
				id := "Service " + o.Namespace + "/" + o.Name
				pods := r.selected(o.Namespace, o.Spec.Selector)
				if len(o.Spec.Selector) == 0 || len(pods) == 0 {
					t.Errorf("%s selects no pod", id)
				}
				for _, sp := range o.Spec.Ports {
					target := sp.TargetPort
					if target.Type == intstr.Int && target.IntVal == 0 {
						target = intstr.FromInt32(sp.Port)
					}
					for _, p := range pods {
						cp, ok := containerPort(p.spec, target, sp.Protocol)
						switch {
						case !ok:
							t.Errorf("%s port %s: %s has no %s port %s", id, sp.Name, p.owner, sp.Protocol, target.String())
						case cp.ContainerPort != sp.Port:
							t.Errorf("%s port %s: %d forwards to %d; keep the Service's port the binary's", id, sp.Name, sp.Port, cp.ContainerPort)
						}
					}
				}
			case *networkingv1.NetworkPolicy:
				id := "NetworkPolicy " + o.Namespace + "/" + o.Name
				pods := r.selected(o.Namespace, o.Spec.PodSelector.MatchLabels)
				if len(pods) == 0 {
					t.Errorf("%s selects no pod", id)
				}
				for _, rule := range o.Spec.Ingress {
					for _, peer := range rule.From {
						if peer.PodSelector != nil && peer.NamespaceSelector == nil && len(r.selected(o.Namespace, peer.PodSelector.MatchLabels)) == 0 {
							t.Errorf("%s: the peer %v matches no pod of this installation", id, peer.PodSelector.MatchLabels)
						}
					}
					for _, np := range rule.Ports {
						if np.Port == nil {
							continue
						}
						proto := corev1.ProtocolTCP
						if np.Protocol != nil {
							proto = *np.Protocol
						}
						for _, p := range pods {
							if _, ok := containerPort(p.spec, *np.Port, proto); !ok {
								t.Errorf("%s allows %s %s, which %s does not serve", id, proto, np.Port.String(), p.owner)
							}
						}
					}
				}
			case *policyv1.PodDisruptionBudget:
				id := "PodDisruptionBudget " + o.Namespace + "/" + o.Name
				pods := r.selected(o.Namespace, o.Spec.Selector.MatchLabels)
				if len(pods) == 0 {
					t.Errorf("%s selects no pod", id)
				}
				if (o.Spec.MinAvailable == nil) == (o.Spec.MaxUnavailable == nil) {
					t.Errorf("%s: set exactly one of minAvailable and maxUnavailable", id)
				}
				for _, p := range pods {
					if m := o.Spec.MinAvailable; m != nil && m.Type == intstr.Int && m.IntVal >= p.replicas {
						t.Errorf("%s: minAvailable %d with %d replicas blocks every drain", id, m.IntVal, p.replicas)
					}
				}
			}
		}
		for _, p := range r.templates {
			volumes := map[string]corev1.Volume{}
			for _, v := range p.spec.Volumes {
				volumes[v.Name] = v
				if v.Secret != nil && (v.Secret.DefaultMode == nil || *v.Secret.DefaultMode&0o007 != 0) {
					t.Errorf("%s: secret volume %s must not be readable by others (defaultMode 0440)", p.owner, v.Name)
				}
			}
			for _, c := range slices.Concat(p.spec.InitContainers, p.spec.Containers) {
				for _, m := range c.VolumeMounts {
					if _, ok := volumes[m.Name]; !ok {
						t.Errorf("%s container %s mounts undeclared volume %s", p.owner, c.Name, m.Name)
					}
				}
			}
			for _, c := range p.spec.Containers {
				for _, probe := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe} {
					if probe == nil || probe.HTTPGet == nil {
						continue
					}
					if _, ok := containerPort(p.spec, probe.HTTPGet.Port, corev1.ProtocolTCP); !ok {
						t.Errorf("%s container %s: probe port %s is not a container port", p.owner, c.Name, probe.HTTPGet.Port.String())
					}
				}
			}
			if p.meta.Annotations["prometheus.io/scrape"] == "true" {
				port := p.meta.Annotations["prometheus.io/port"]
				var http []string
				for _, c := range p.spec.Containers {
					for _, cp := range c.Ports {
						if cp.Name == "http" {
							http = append(http, fmt.Sprint(cp.ContainerPort))
						}
					}
				}
				if !slices.Contains(http, port) {
					t.Errorf("%s: prometheus.io/port %q is not its http port %v", p.owner, port, http)
				}
			}
		}
	})
}

// TestNamespacesExist checks that every namespaced object lands in a
// namespace the same rendering creates (the examples/app snippets aside,
// which go into the application's own namespace).
func TestNamespacesExist(t *testing.T) {
	each(t, func(t *testing.T, r *rendering) {
		if r.dir == "examples/app" || r.dir == "examples/app-other-language" {
			return
		}
		created := map[string]bool{}
		for _, o := range r.objects {
			if ns, ok := o.obj.(*corev1.Namespace); ok {
				created[ns.Name] = true
			}
		}
		for _, o := range r.objects {
			if _, ok := o.obj.(*corev1.Namespace); ok {
				continue
			}
			ns := strings.SplitN(strings.SplitN(o.id, " ", 2)[1], "/", 2)[0]
			if !created[ns] {
				t.Errorf("%s: namespace %q is not created here (have %v)", o.id, ns, slices.Sorted(maps.Keys(created)))
			}
		}
	})
}
