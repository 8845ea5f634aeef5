package deploy_test

import (
	"fmt"
	"io"
	"net"
	"net/url"
	"os/exec"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/fusebox-dev/fusebox/agent"
	"github.com/fusebox-dev/fusebox/coordinator"
	"github.com/fusebox-dev/fusebox/sharedstate/daemonflag"
)

// flagInfo is one flag of a binary, from its -h listing.
type flagInfo struct {
	typ string // "string", "int", "duration", "list"…; "" for a bool
	def string // the default as printed ("" when none is printed)
}

var helps struct {
	mu   sync.Mutex
	done map[string]map[string]flagInfo
}

var (
	helpFlagLine = regexp.MustCompile(`^ +(?:-\w, )?--([A-Za-z0-9][A-Za-z0-9_-]*)(?: ([a-z]\w*))?  +(.*)$`)
	helpDefault  = regexp.MustCompile(`\(default ("(?:[^"\\]|\\.)*"|[^)]*)\)$`)
)

// parseHelp parses the listing pflag's FlagUsages writes: a line a flag.
func parseHelp(out string) map[string]flagInfo {
	flags := map[string]flagInfo{}
	for _, line := range strings.Split(out, "\n") {
		m := helpFlagLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		fi := flagInfo{typ: m[2]}
		if d := helpDefault.FindStringSubmatch(m[3]); d != nil {
			fi.def = d[1]
			if s, err := strconv.Unquote(d[1]); err == nil {
				fi.def = s
			}
		}
		flags[m[1]] = fi
	}
	return flags
}

func TestParseHelp(t *testing.T) {
	out := "Usage:\n  x [flags]\n\nFlags:\n" +
		"      --addr string    address (default \"127.0.0.1:7070\")\n" +
		"      --etcd string    endpoints (default: embedded)\n" +
		"      --headless       no banner\n" +
		"      --n int          count (default 3)\n" +
		"  -v, --verbose        verbose\n"
	got := parseHelp(out)
	want := map[string]flagInfo{
		"addr": {typ: "string", def: "127.0.0.1:7070"}, "etcd": {typ: "string"},
		"headless": {}, "n": {typ: "int", def: "3"}, "verbose": {},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("parseHelp = %v, want %v", got, want)
	}
}

// helpOf returns the flags the built binary lists with -h.
func helpOf(t *testing.T, binary string) map[string]flagInfo {
	t.Helper()
	helps.mu.Lock()
	defer helps.mu.Unlock()
	if f, ok := helps.done[binary]; ok {
		return f
	}
	out, err := exec.Command(binaryPath(t, binary), "-h").CombinedOutput()
	if err != nil {
		t.Fatalf("%s -h: %v\n%s", binary, err, out)
	}
	flags := parseHelp(string(out))
	if len(flags) < 3 {
		t.Fatalf("%s -h lists %d flags; the listing format changed?\n%s", binary, len(flags), out)
	}
	if helps.done == nil {
		helps.done = map[string]map[string]flagInfo{}
	}
	helps.done[binary] = flags
	return flags
}

// checkArgs runs the built binary with args followed by -h: the flag
// package parses every argument before -h, so the binary exits 0 only when
// each flag exists and each value parses (a typo'd flag or a bad duration
// exits 2 naming it). It returns the value each flag ends up with: the last
// one given, else its default.
func checkArgs(t *testing.T, where, binary string, args []string) (map[string]string, bool) {
	t.Helper()
	out, err := exec.Command(binaryPath(t, binary), append(slices.Clone(args), "-h")...).CombinedOutput()
	if err != nil {
		first, _, _ := strings.Cut(string(out), "\n")
		t.Errorf("%s: %s refuses its arguments %q: %v: %s", where, binary, args, err, first)
		return nil, false
	}
	flags := helpOf(t, binary)
	vals := map[string]string{}
	for name, f := range flags {
		vals[name] = f.def
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") || a == "--" {
			t.Errorf("%s: %s: positional argument %q", where, binary, a)
			return nil, false
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		f, ok := flags[name]
		if !ok {
			t.Errorf("%s: %s has no flag %s", where, binary, name)
			return nil, false
		}
		switch {
		case hasValue:
		case f.typ == "":
			value = "true"
		case i+1 < len(args):
			i++
			value = args[i]
		}
		vals[name] = value
	}
	return vals, true
}

// port returns the port of a host:port or of a URL's host.
func port(t *testing.T, where, addr string) int32 {
	t.Helper()
	if u, err := url.Parse(addr); err == nil && u.Scheme != "" && u.Host != "" {
		addr = u.Host
	}
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Errorf("%s: %q is not host:port", where, addr)
		return -1
	}
	n, err := strconv.ParseInt(p, 10, 32)
	if err != nil {
		t.Errorf("%s: %q: bad port", where, addr)
		return -1
	}
	return int32(n)
}

// host returns the host part of host:port or of a URL.
func host(addr string) string {
	if u, err := url.Parse(addr); err == nil && u.Scheme != "" && u.Host != "" {
		addr = u.Host
	}
	h, _, _ := net.SplitHostPort(addr)
	return h
}

func isLoopback(h string) bool {
	ip := net.ParseIP(h)
	return h == "localhost" || (ip != nil && ip.IsLoopback())
}

// listener is a port a binary listens on, as its manifest must declare it.
type listener struct {
	flag  string // the flag that sets it
	addr  string // the flag's value
	port  int32
	proto corev1.Protocol
}

// fuseboxListeners returns, by container port name, what a Fusebox binary
// listens on with the given flag values, and checks each port against the
// binary's default for that flag: every deploy/ file uses the default
// ports (sharedstate/DESIGN.md, "Names"), so the docs, the Prometheus config and the
// dashboards stay right.
func fuseboxListeners(t *testing.T, where, binary string, vals, defaults map[string]string) map[string]listener {
	t.Helper()
	out := map[string]listener{}
	add := func(name, flag string, protos ...corev1.Protocol) {
		v := vals[flag]
		if v == "" {
			return
		}
		p := port(t, where, v)
		if d := defaults[flag]; d != "" && p != port(t, where+" (default)", d) {
			t.Errorf("%s: %s --%s=%s: port %d, the binary's default is %s", where, binary, flag, v, p, d)
		}
		for i, proto := range protos {
			n := name
			if i > 0 {
				n += "-" + strings.ToLower(string(proto))
			}
			out[n] = listener{flag: flag, addr: v, port: p, proto: proto}
		}
	}
	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	switch binary {
	case "fusebox-agent":
		add("gossip", "gossip-addr", tcp, udp)
		add("http", "http-addr", tcp)
		if v := vals["proxy-addr"]; v != "" { // off by default: the port is the documented one
			if p := port(t, where, v); p != port(t, where, agent.DefaultProxyAddr) {
				t.Errorf("%s: --proxy-addr=%s: port %d, the documented one is %s", where, v, p, agent.DefaultProxyAddr)
			}
			add("proxy", "proxy-addr", tcp)
		}
		if a := vals["advertise-addr"]; a != "" && port(t, where, a) != port(t, where, vals["gossip-addr"]) {
			t.Errorf("%s: --advertise-addr %s and --gossip-addr %s differ in port", where, a, vals["gossip-addr"])
		}
	case "fusebox-coordinator":
		add("grpc", "grpc-addr", tcp)
		add("http", "http-addr", tcp)
		add("gossip", "gossip-addr", tcp, udp)
		if vals["etcd"] == "" {
			add("etcd", "embedded-etcd-url", tcp)
		}
		if a := vals["gossip-advertise-addr"]; a != "" && port(t, where, a) != port(t, where, vals["gossip-addr"]) {
			t.Errorf("%s: --gossip-advertise-addr %s and --gossip-addr %s differ in port", where, a, vals["gossip-addr"])
		}
	case "fusebox-demo":
		if vals["agent"] == "" { // with --agent: no coordinator, only /healthz and /readyz
			add("grpc", "grpc-addr", tcp)
		}
		add("http", "http-addr", tcp)
	default:
		t.Fatalf("%s: no listener model for %s", where, binary)
	}
	return out
}

// pathFlags are the flags whose values are files or directories.
var pathFlags = map[string]bool{"socket": true, "data-dir": true, "keyring-file": true, "tokens-file": true,
	"tls-cert": true, "tls-key": true, "tls-client-ca": true, "etcd-ca": true, "etcd-cert": true, "etcd-key": true,
	"config": true}

// writableFlags are the path flags the binary writes to.
var writableFlags = map[string]bool{"socket": true, "data-dir": true}

// sampleFieldValues stand in for the downward API's values when expanding
// $(VAR) references the way the kubelet does.
var sampleFieldValues = map[string]string{
	"spec.nodeName":      "node-1.example.internal",
	"status.podIP":       "10.244.1.7",
	"status.hostIP":      "192.0.2.7",
	"metadata.name":      "fusebox-coordinator-6c9f7d-x2x4q",
	"metadata.namespace": "fusebox",
}

var varRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// containerEnv returns the container's environment as the kubelet builds
// it, with sample values for the downward API, and an expander for $(VAR)
// references in its arguments.
func containerEnv(t *testing.T, where string, c *corev1.Container) (map[string]string, func(string) string) {
	t.Helper()
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.FieldRef != nil:
			v, ok := sampleFieldValues[e.ValueFrom.FieldRef.FieldPath]
			if !ok {
				t.Errorf("%s: env %s: no sample value for fieldPath %s", where, e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
			env[e.Name] = v
		default:
			env[e.Name] = "value-of-" + e.Name
		}
	}
	expand := func(s string) string {
		return varRef.ReplaceAllStringFunc(s, func(ref string) string {
			name := varRef.FindStringSubmatch(ref)[1]
			v, ok := env[name]
			if !ok {
				t.Errorf("%s: %q refers to $(%s), which the container's env does not define", where, s, name)
			}
			return v
		})
	}
	return env, expand
}

// fuseboxBinary returns the Fusebox binary a container runs, or "".
func fuseboxBinary(c *corev1.Container) string {
	if len(c.Command) == 0 {
		return ""
	}
	b := path.Base(c.Command[0])
	if slices.Contains(fuseboxBinaries, b) || b == "fuseboxctl" {
		return b
	}
	return ""
}

// fuseboxContainer is a (non-init) container of a pod template that runs a
// Fusebox binary.
type fuseboxContainer struct {
	c      *corev1.Container
	binary string // what fuseboxBinary returns
	where  string // "Kind namespace/name container NAME", for messages
}

// fuseboxContainers returns the containers of p that run a Fusebox binary,
// in order: what the manifest checks of flags, plaintext and secrets walk.
func (p podTemplate) fuseboxContainers() []fuseboxContainer {
	var out []fuseboxContainer
	for i := range p.spec.Containers {
		c := &p.spec.Containers[i]
		if binary := fuseboxBinary(c); binary != "" {
			out = append(out, fuseboxContainer{c: c, binary: binary, where: fmt.Sprintf("%s container %s", p.owner, c.Name)})
		}
	}
	return out
}

// TestManifestFlagsAndPorts checks every container that runs a Fusebox
// binary: each flag exists and parses in the real binary (the daemons'
// through agent.LoadConfig and coordinator.LoadConfig, which validate
// too), every FUSEBOX_* variable of a daemon is one of its flags, the container ports are exactly what the flags
// make the binary listen on (named gossip, http, grpc, etcd; the ports are
// the binaries' defaults), no exposed port is bound to loopback, every
// file a flag names is in a volume, the binary's writable paths are on
// writable volumes, probes speak HTTPS exactly when the coordinator serves
// TLS, and the image runs as the Dockerfile's user.
func TestManifestFlagsAndPorts(t *testing.T) {
	each(t, func(t *testing.T, r *rendering) {
		for _, p := range r.templates {
			for _, fc := range p.fuseboxContainers() {
				checkFuseboxContainer(t, fc.where, fc.binary, p, fc.c)
			}
		}
	})
}

func checkFuseboxContainer(t *testing.T, where, binary string, p podTemplate, c *corev1.Container) {
	if repo, _, _ := strings.Cut(path.Base(c.Image), ":"); repo != "fusebox" {
		t.Errorf("%s: image %q is not the Fusebox image", where, c.Image)
	}
	if uid, _ := runAsUser(p.spec, c); uid != dockerUser {
		t.Errorf("%s: runs as user %d, the image's user is %d", where, uid, dockerUser)
	}
	if len(c.Command) != 1 || c.Command[0] != "/usr/local/bin/"+binary {
		t.Errorf("%s: command %q: the image has the binaries in /usr/local/bin", where, c.Command)
	}
	vals, defaults := flagValues(t, where, binary, c)
	if vals == nil {
		return
	}

	// Ports: exactly the listeners, under the right names.
	want := fuseboxListeners(t, where, binary, vals, defaults)
	got := map[string]corev1.ContainerPort{}
	for _, cp := range c.Ports {
		got[cp.Name] = cp
	}
	for name, l := range want {
		cp, ok := got[name]
		proto := cp.Protocol
		if proto == "" {
			proto = corev1.ProtocolTCP
		}
		switch {
		case !ok:
			t.Errorf("%s: --%s=%s listens on %s %d: declare it as container port %q", where, l.flag, l.addr, l.proto, l.port, name)
		case cp.ContainerPort != l.port || proto != l.proto:
			t.Errorf("%s: container port %s is %s %d, --%s=%s listens on %s %d", where, name, proto, cp.ContainerPort, l.flag, l.addr, l.proto, l.port)
		case isLoopback(host(l.addr)):
			t.Errorf("%s: --%s=%s is loopback: container port %s is unreachable", where, l.flag, l.addr, name)
		}
	}
	for name, cp := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("%s: container port %s (%d) is not one %s listens on with these flags", where, name, cp.ContainerPort, binary)
		}
	}

	// Files: in volumes; written ones on writable volumes.
	volumes := map[string]corev1.Volume{}
	for _, v := range p.spec.Volumes {
		volumes[v.Name] = v
	}
	for flag, v := range vals {
		if !pathFlags[flag] || v == "" || !strings.HasPrefix(v, "/") {
			continue
		}
		if flag == "data-dir" && binary == "fusebox-coordinator" && vals["etcd"] != "" {
			continue // only the embedded etcd uses it
		}
		m, ok := mountOf(c, v)
		switch {
		case !ok:
			t.Errorf("%s: --%s=%s is in no volume (the root filesystem is read-only and holds no configuration)", where, flag, v)
		case writableFlags[flag] && (m.ReadOnly || volumes[m.Name].Secret != nil):
			t.Errorf("%s: --%s=%s is on the read-only volume %s", where, flag, v, m.Name)
		}
	}

	// Probes: over TLS exactly when the coordinator serves TLS.
	wantScheme := corev1.URISchemeHTTP
	if binary == "fusebox-coordinator" && vals["tls-cert"] != "" {
		wantScheme = corev1.URISchemeHTTPS
		if p.meta.Annotations["prometheus.io/scheme"] != "https" {
			t.Errorf("%s: serves TLS: annotate prometheus.io/scheme: https", where)
		}
	}
	for _, probe := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe} {
		if probe == nil || probe.HTTPGet == nil {
			t.Errorf("%s: probes must be HTTP GETs of /healthz or /readyz", where)
			continue
		}
		scheme := probe.HTTPGet.Scheme
		if scheme == "" {
			scheme = corev1.URISchemeHTTP
		}
		if scheme != wantScheme {
			t.Errorf("%s: probe %s over %s, the binary serves %s", where, probe.HTTPGet.Path, scheme, wantScheme)
		}
		if probe.HTTPGet.Port != intstr.FromString("http") {
			t.Errorf("%s: probe on port %s, want the http port", where, probe.HTTPGet.Port.String())
		}
	}
	if binary == "fusebox-agent" {
		if c.ReadinessProbe != nil && c.ReadinessProbe.HTTPGet != nil && c.ReadinessProbe.HTTPGet.Path != "/readyz" {
			t.Errorf("%s: the agent's readiness is /readyz, not %s", where, c.ReadinessProbe.HTTPGet.Path)
		}
		checkAgentSocket(t, where, p, c, vals["socket"])
	}
}

// flagValues returns the value of every flag of the Fusebox binary the
// container runs, as its arguments and environment set them, and the
// flags' defaults; nil when the binary refuses them (reported).
func flagValues(t *testing.T, where, binary string, c *corev1.Container) (vals, defaults map[string]string) {
	t.Helper()
	env, expand := containerEnv(t, where, c)
	args := make([]string, len(c.Args))
	for i, a := range c.Args {
		args[i] = expand(a)
	}
	if _, ok := daemons[binary]; ok {
		return daemonFlags(t, where, binary, args, env)
	}
	vals, ok := checkArgs(t, where, binary, args)
	if !ok {
		return nil, nil
	}
	defaults = map[string]string{}
	for name, f := range helpOf(t, binary) {
		defaults[name] = f.def
	}
	return vals, defaults
}

// daemon is how a daemon's main loads its configuration: flags, FUSEBOX_*
// variables and the --config file (daemonflag.Load), then validation.
type daemon struct {
	// load is LoadConfig; it returns the flag set bound to the result.
	load func(args []string, getenv func(string) string) (*pflag.FlagSet, error)
	// flags is the flag set bound to the defaults.
	flags func() *pflag.FlagSet
}

// daemons are the binaries whose configuration the tests load in process,
// through the package their main calls.
var daemons = map[string]daemon{
	"fusebox-agent": {
		load: func(args []string, getenv func(string) string) (*pflag.FlagSet, error) {
			cfg, err := agent.LoadConfig(args, getenv, io.Discard)
			return agent.NewFlagSet(&cfg), err
		},
		flags: func() *pflag.FlagSet { def := agent.DefaultConfig(); return agent.NewFlagSet(&def) },
	},
	"fusebox-coordinator": {
		load: func(args []string, getenv func(string) string) (*pflag.FlagSet, error) {
			cfg, err := coordinator.LoadConfig(args, getenv, io.Discard)
			return coordinator.NewFlagSet(&cfg), err
		},
		flags: func() *pflag.FlagSet { def := coordinator.DefaultConfig(); return coordinator.NewFlagSet(&def) },
	},
}

// daemonFlags loads a daemon's configuration the way its main does
// (FUSEBOX_* variables, the --config file, flags, validation) and returns
// the flag values and defaults. Every FUSEBOX_* variable of the container
// must be one of the daemon's flags.
func daemonFlags(t *testing.T, where, binary string, args []string, env map[string]string) (vals, defaults map[string]string) {
	t.Helper()
	d := daemons[binary]
	defFS := d.flags()
	for name := range env {
		if strings.HasPrefix(name, daemonflag.EnvPrefix) && defFS.Lookup(flagOfEnv(name)) == nil {
			t.Errorf("%s: %s is no %s flag's variable", where, name, binary)
		}
	}
	fs, err := d.load(args, func(k string) string { return env[k] })
	if err != nil {
		t.Errorf("%s: %s refuses its configuration: %v", where, binary, err)
		return nil, nil
	}
	vals, defaults = map[string]string{}, map[string]string{}
	fs.VisitAll(func(f *pflag.Flag) { vals[f.Name] = f.Value.String() })
	defFS.VisitAll(func(f *pflag.Flag) { defaults[f.Name] = f.DefValue })
	return vals, defaults
}

// flagOfEnv is the daemon flag a FUSEBOX_* variable sets.
func flagOfEnv(name string) string {
	return strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(name, daemonflag.EnvPrefix)), "_", "-")
}

// mountOf returns the volume mount that holds path.
func mountOf(c *corev1.Container, p string) (corev1.VolumeMount, bool) {
	var best corev1.VolumeMount
	found := false
	for _, m := range c.VolumeMounts {
		mp := strings.TrimSuffix(m.MountPath, "/")
		if (p == mp || strings.HasPrefix(p, mp+"/")) && len(mp) >= len(best.MountPath) {
			best, found = m, true
		}
	}
	return best, found
}

// agentSocketHostDir is the node directory of the agent's socket, which
// application pods mount (examples/app, deploy/README.md).
const agentSocketHostDir = "/run/fusebox"

// checkAgentSocket checks that the agent's socket lands in the node's
// /run/fusebox: its directory is a hostPath mount of that directory.
func checkAgentSocket(t *testing.T, where string, p podTemplate, c *corev1.Container, socket string) {
	t.Helper()
	m, ok := mountOf(c, socket)
	if !ok {
		return // reported with the other paths
	}
	for _, v := range p.spec.Volumes {
		if v.Name != m.Name {
			continue
		}
		if v.HostPath == nil || v.HostPath.Path != agentSocketHostDir || m.SubPath != "" || path.Dir(socket) != m.MountPath {
			t.Errorf("%s: the socket %s must be in a hostPath mount of the node's %s (application pods mount it)", where, socket, agentSocketHostDir)
		}
	}
	if p.spec.SecurityContext == nil || p.spec.SecurityContext.RunAsGroup == nil || *p.spec.SecurityContext.RunAsGroup != dockerUser {
		t.Errorf("%s: runAsGroup must be %d: the socket's group, which application pods join", where, dockerUser)
	}
}

// agentClients are the kustomizations whose pods use the node's agent, as
// application pods do.
var agentClients = []string{"examples/app", "examples/demo/on-node-agent"}

// TestApplicationSnippet checks examples/app and the demo services on the
// node's agent against the agent: the pod mounts the node directory the
// agent's socket is in, FUSEBOX_AGENT names that socket, the pod is in the
// socket's group, and a fusebox-demo container passes FUSEBOX_AGENT to
// --agent (without it, it would run its own agents).
func TestApplicationSnippet(t *testing.T) {
	base := render(t, "overlays/dev")
	var socket string
	for _, p := range base.templates {
		for i := range p.spec.Containers {
			c := &p.spec.Containers[i]
			if fuseboxBinary(c) != "fusebox-agent" {
				continue
			}
			env, expand := containerEnv(t, p.owner, c)
			args := make([]string, len(c.Args))
			for i, a := range c.Args {
				args[i] = expand(a)
			}
			cfg, err := agent.LoadConfig(args, func(k string) string { return env[k] }, io.Discard)
			if err != nil {
				t.Fatalf("%s: %v", p.owner, err)
			}
			socket = cfg.Socket
		}
	}
	if socket == "" {
		t.Fatal("overlays/dev runs no agent")
	}
	for _, dir := range agentClients {
		t.Run(dir, func(t *testing.T) { checkAgentClients(t, render(t, dir), socket) })
	}
}

func checkAgentClients(t *testing.T, r *rendering, socket string) {
	if len(r.templates) == 0 {
		t.Fatalf("%s renders no workload", r.dir)
	}
	for _, p := range r.templates {
		sc := p.spec.SecurityContext
		if sc == nil || !slices.Contains(sc.SupplementalGroups, dockerUser) {
			t.Errorf("%s: add supplementalGroups [%d]: the agent's socket is mode 0660, group %d", p.owner, dockerUser, dockerUser)
		}
		var hostVolume string
		for _, v := range p.spec.Volumes {
			if v.HostPath != nil && v.HostPath.Path == agentSocketHostDir {
				hostVolume = v.Name
				if v.HostPath.Type == nil || *v.HostPath.Type != corev1.HostPathDirectory {
					t.Errorf("%s: hostPath %s should be type Directory (the agent creates it)", p.owner, agentSocketHostDir)
				}
			}
		}
		if hostVolume == "" {
			t.Errorf("%s: no hostPath volume of %s", p.owner, agentSocketHostDir)
		}
		for _, c := range p.spec.Containers {
			where := fmt.Sprintf("%s container %s", p.owner, c.Name)
			env, expand := containerEnv(t, where, &c)
			addr, ok := env["FUSEBOX_AGENT"]
			if !ok {
				t.Errorf("%s: no FUSEBOX_AGENT", where)
				continue
			}
			sockPath, found := strings.CutPrefix(addr, "unix://")
			m, mounted := mountOf(&c, sockPath)
			switch {
			case !found:
				t.Errorf("%s: FUSEBOX_AGENT=%s is not a unix:// address", where, addr)
			case !mounted || m.Name != hostVolume:
				t.Errorf("%s: FUSEBOX_AGENT=%s is not in the mount of the node's %s", where, addr, agentSocketHostDir)
			case path.Base(sockPath) != path.Base(socket):
				t.Errorf("%s: FUSEBOX_AGENT=%s, but the agent's socket is %s", where, addr, path.Base(socket))
			}
			if fuseboxBinary(&c) == "fusebox-demo" {
				args := make([]string, len(c.Args))
				for i, a := range c.Args {
					args[i] = expand(a)
				}
				vals, ok := checkArgs(t, where, "fusebox-demo", args)
				if ok && vals["agent"] != addr {
					t.Errorf("%s: fusebox-demo --agent=%q, want FUSEBOX_AGENT's %q: without it the demo runs its own agents", where, vals["agent"], addr)
				}
			}
		}
	}
}
