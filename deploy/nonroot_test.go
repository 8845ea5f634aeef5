package deploy_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// rootInit is the one container that may run as root: the agent's init
// container that hands the hostPath directories the kubelet created as
// root (type DirectoryOrCreate) to the agent's user, with CAP_CHOWN and no
// other capability (base/agent-daemonset.yaml). The node-prepared
// component removes it: its nodes create the directories owned by that
// user.
var rootInit = struct {
	owner, name string
	caps        []corev1.Capability
}{owner: "DaemonSet fusebox/fusebox-agent", name: "host-dirs", caps: []corev1.Capability{"CHOWN"}}

// nodePreparedRenderings are the kustomizations that use
// components/node-prepared: no container of theirs may run as root.
var nodePreparedRenderings = []string{"examples/node-prepared"}

// nodePreparedTmpfiles is the tmpfiles.d file that prepares a node for the
// component.
const nodePreparedTmpfiles = "deploy/kubernetes/components/node-prepared/tmpfiles.conf"

// mayRunAsRoot says why a container may run as root, "" when it cannot:
// its user is 0, or runAsNonRoot is not true for it (in the container or
// the pod), so the image's user, or a later edit, decides.
func mayRunAsRoot(pod *corev1.PodSpec, c *corev1.Container) string {
	uid, nonRoot := runAsUser(pod, c)
	switch {
	case uid == 0:
		return "runAsUser 0"
	case !nonRoot:
		return "runAsNonRoot is not true for it, in the container or the pod"
	}
	return ""
}

// isRootInit reports whether c, of p, is rootInit.
func isRootInit(p podTemplate, c *corev1.Container, init bool) bool {
	return init && p.owner == rootInit.owner && c.Name == rootInit.name
}

// userProblems checks the user a container runs as: non-root with a
// numeric user and no added capability, or rootInit with exactly its
// capabilities where allowRootInit.
func userProblems(p podTemplate, c *corev1.Container, init, allowRootInit bool) []string {
	where := fmt.Sprintf("%s container %s", p.owner, c.Name)
	var added []corev1.Capability
	if sc := c.SecurityContext; sc != nil && sc.Capabilities != nil {
		added = sc.Capabilities.Add
	}
	why := mayRunAsRoot(p.spec, c)
	if why == "" {
		var problems []string
		if uid, _ := runAsUser(p.spec, c); uid < 0 {
			problems = append(problems, fmt.Sprintf("%s: names no runAsUser (container or pod): the kubelet cannot check runAsNonRoot against an image user that is a name", where))
		}
		if len(added) > 0 {
			problems = append(problems, fmt.Sprintf("%s: adds capabilities %v", where, added))
		}
		return problems
	}
	switch {
	case !isRootInit(p, c, init):
		return []string{fmt.Sprintf("%s: may run as root (%s): only %s's init container %s may, and only without the node-prepared component", where, why, rootInit.owner, rootInit.name)}
	case !allowRootInit:
		return []string{fmt.Sprintf("%s: may run as root (%s): with the node-prepared component no container may (it removes %s)", where, why, rootInit.name)}
	case !slices.Equal(added, rootInit.caps):
		return []string{fmt.Sprintf("%s: runs as root and adds %v: want exactly %v", where, added, rootInit.caps)}
	}
	return nil
}

func ptrTo[T any](v T) *T { return &v }

// TestLockdownRefusesRootContainers shows that TestPodsAreLockedDown's
// checks fail where they should: the dev overlay's agent pod, changed one
// way at a time.
func TestLockdownRefusesRootContainers(t *testing.T) {
	var stock podTemplate
	for _, p := range render(t, "overlays/dev").templates {
		if p.owner == rootInit.owner {
			stock = p
		}
	}
	if stock.spec == nil {
		t.Fatalf("overlays/dev renders no %s", rootInit.owner)
	}
	container := func(cs []corev1.Container, name string) *corev1.Container {
		for i := range cs {
			if cs[i].Name == name {
				return &cs[i]
			}
		}
		t.Fatalf("%s has no container %s", stock.owner, name)
		return nil
	}
	asRoot := func(c *corev1.Container) {
		c.SecurityContext.RunAsUser = ptrTo(int64(0))
		c.SecurityContext.RunAsNonRoot = ptrTo(false)
	}
	cases := []struct {
		name          string
		allowRootInit bool
		change        func(p *podTemplate)
		want          string // in one of the problems; "": none
	}{
		{"stock", true, func(*podTemplate) {}, ""},
		{"stock on prepared nodes", false, func(*podTemplate) {},
			"container host-dirs: may run as root (runAsUser 0): with the node-prepared component"},
		{"a root sidecar", true, func(p *podTemplate) {
			c := container(p.spec.Containers, "agent").DeepCopy()
			c.Name = "sidecar"
			asRoot(c)
			p.spec.Containers = append(p.spec.Containers, *c)
		}, "container sidecar: may run as root (runAsUser 0): only"},
		{"a second root init container", true, func(p *podTemplate) {
			c := container(p.spec.InitContainers, rootInit.name).DeepCopy()
			c.Name = "fix-perms"
			p.spec.InitContainers = append(p.spec.InitContainers, *c)
		}, "container fix-perms: may run as root (runAsUser 0): only"},
		{"host-dirs as a main container", true, func(p *podTemplate) {
			p.spec.Containers = append(p.spec.Containers, *container(p.spec.InitContainers, rootInit.name))
		}, "container host-dirs: may run as root (runAsUser 0): only"},
		{"host-dirs in another workload", true, func(p *podTemplate) { p.owner = "DaemonSet fusebox/other" },
			"container host-dirs: may run as root (runAsUser 0): only"},
		{"host-dirs with one more capability", true, func(p *podTemplate) {
			sc := container(p.spec.InitContainers, rootInit.name).SecurityContext
			sc.Capabilities.Add = append(sc.Capabilities.Add, "DAC_OVERRIDE")
		}, "container host-dirs: runs as root and adds [CHOWN DAC_OVERRIDE]: want exactly [CHOWN]"},
		{"host-dirs adding nothing", true, func(p *podTemplate) {
			container(p.spec.InitContainers, rootInit.name).SecurityContext.Capabilities.Add = nil
		}, "container host-dirs: runs as root and adds []: want exactly [CHOWN]"},
		{"host-dirs keeping every capability", true, func(p *podTemplate) {
			container(p.spec.InitContainers, rootInit.name).SecurityContext.Capabilities.Drop = nil
		}, "container host-dirs: capabilities not dropped"},
		{"host-dirs allowed to escalate", true, func(p *podTemplate) {
			container(p.spec.InitContainers, rootInit.name).SecurityContext.AllowPrivilegeEscalation = ptrTo(true)
		}, "container host-dirs: allowPrivilegeEscalation not false"},
		{"host-dirs writing its root filesystem", true, func(p *podTemplate) {
			container(p.spec.InitContainers, rootInit.name).SecurityContext.ReadOnlyRootFilesystem = nil
		}, "container host-dirs: root filesystem not read-only"},
		{"the agent as root", true, func(p *podTemplate) { asRoot(container(p.spec.Containers, "agent")) },
			"container agent: may run as root (runAsUser 0)"},
		{"no runAsNonRoot in the pod", true, func(p *podTemplate) { p.spec.SecurityContext.RunAsNonRoot = nil },
			"container agent: may run as root (runAsNonRoot is not true"},
		{"no user anywhere", true, func(p *podTemplate) { p.spec.SecurityContext.RunAsUser = nil },
			"container agent: names no runAsUser"},
		{"a non-root container adding a capability", true, func(p *podTemplate) {
			sc := container(p.spec.Containers, "agent").SecurityContext
			sc.Capabilities.Add = []corev1.Capability{"NET_BIND_SERVICE"}
		}, "container agent: adds capabilities [NET_BIND_SERVICE]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := stock
			p.spec = stock.spec.DeepCopy()
			tc.change(&p)
			problems := lockdownProblems(p, tc.allowRootInit)
			if tc.want == "" {
				if len(problems) > 0 {
					t.Errorf("problems %q, want none", problems)
				}
				return
			}
			if !slices.ContainsFunc(problems, func(s string) bool { return strings.Contains(s, tc.want) }) {
				t.Errorf("problems %q, want one with %q", problems, tc.want)
			}
		})
	}
}

// tmpfilesLine is one line of a tmpfiles.d file.
type tmpfilesLine struct {
	typ, path, user, group, age string
	mode                        os.FileMode
}

// parseTmpfiles parses a tmpfiles.d file into its lines by path. It knows
// the subset this repository uses: every line with its six fields.
func parseTmpfiles(t *testing.T, text string) map[string]tmpfilesLine {
	t.Helper()
	lines := map[string]tmpfilesLine{}
	sc := bufio.NewScanner(strings.NewReader(text))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 6 {
			t.Fatalf("%s line %d: %q: want six fields (type path mode user group age)", nodePreparedTmpfiles, n, line)
		}
		mode, err := strconv.ParseUint(f[2], 8, 32)
		if err != nil || len(f[2]) != 4 {
			t.Fatalf("%s line %d: mode %q is not four octal digits", nodePreparedTmpfiles, n, f[2])
		}
		if _, dup := lines[f[1]]; dup {
			t.Fatalf("%s line %d: %s twice", nodePreparedTmpfiles, n, f[1])
		}
		lines[f[1]] = tmpfilesLine{typ: f[0], path: f[1], mode: os.FileMode(mode), user: f[3], group: f[4], age: f[5]}
	}
	return lines
}

// runAsGroup returns the group a container runs as (the container's, else
// the pod's; -1 when neither sets one).
func runAsGroup(pod *corev1.PodSpec, c *corev1.Container) int64 {
	gid := int64(-1)
	if s := pod.SecurityContext; s != nil && s.RunAsGroup != nil {
		gid = *s.RunAsGroup
	}
	if s := c.SecurityContext; s != nil && s.RunAsGroup != nil {
		gid = *s.RunAsGroup
	}
	return gid
}

// TestHostPathsHaveAnOwner checks that every hostPath directory a non-root
// container writes to is made its own: either the kubelet may create it
// (type DirectoryOrCreate: owned by root) and rootInit chowns it to the
// writers' user and group first, or the pod requires it to exist (type
// Directory) and the node-prepared tmpfiles.d file creates it owned by
// them. So the node-prepared rendering, which may not have rootInit, has
// type Directory volumes, and a stock one that lost host-dirs fails here.
func TestHostPathsHaveAnOwner(t *testing.T) {
	tmpfiles := parseTmpfiles(t, readFile(t, nodePreparedTmpfiles))
	for _, l := range tmpfiles {
		if l.typ != "d" || l.age != "-" {
			t.Errorf("%s: %s: want type d and no age (nothing cleaned up), got %s and %s", nodePreparedTmpfiles, l.path, l.typ, l.age)
		}
		if l.mode&0o022 != 0 {
			t.Errorf("%s: %s mode %04o: writable by its group or others", nodePreparedTmpfiles, l.path, l.mode)
		}
	}
	if l := tmpfiles[agentSocketHostDir]; l.mode&0o050 != 0o050 {
		t.Errorf("%s: %s mode %04o: application pods reach the socket through the directory's group (r-x)", nodePreparedTmpfiles, agentSocketHostDir, l.mode)
	}
	eachOf(t, securedRenderings, func(t *testing.T, r *rendering) {
		for _, p := range r.templates {
			for _, v := range p.spec.Volumes {
				if v.HostPath != nil {
					checkHostPathOwner(t, p, v, tmpfiles)
				}
			}
		}
	})
}

func checkHostPathOwner(t *testing.T, p podTemplate, v corev1.Volume, tmpfiles map[string]tmpfilesLine) {
	where := fmt.Sprintf("%s volume %s (hostPath %s)", p.owner, v.Name, v.HostPath.Path)
	owners := map[string]bool{}
	var chowners []*corev1.Container
	for i, c := range slices.Concat(p.spec.InitContainers, p.spec.Containers) {
		init := i < len(p.spec.InitContainers)
		for _, m := range c.VolumeMounts {
			switch {
			case m.Name != v.Name || m.ReadOnly:
			case isRootInit(p, &c, init):
				chowners = append(chowners, &c)
			default:
				uid, _ := runAsUser(p.spec, &c)
				owners[fmt.Sprintf("%d:%d", uid, runAsGroup(p.spec, &c))] = true
			}
		}
	}
	if len(owners) == 0 {
		return // read only: whoever made it
	}
	if len(owners) > 1 {
		t.Errorf("%s: written by several users %v", where, owners)
		return
	}
	var owner string
	for o := range owners {
		owner = o
	}
	typ := corev1.HostPathUnset
	if v.HostPath.Type != nil {
		typ = *v.HostPath.Type
	}
	switch typ {
	case corev1.HostPathDirectory:
		l, ok := tmpfiles[v.HostPath.Path]
		if !ok || l.user+":"+l.group != owner {
			t.Errorf("%s: type Directory, so the node must create it owned by %s, and %s does not (%+v)", where, owner, nodePreparedTmpfiles, l)
		}
	case corev1.HostPathDirectoryOrCreate:
		for _, c := range chowners {
			for _, m := range c.VolumeMounts {
				if m.Name == v.Name && len(c.Command) >= 3 && c.Command[0] == "chown" && c.Command[1] == owner &&
					slices.Contains(c.Command[2:], m.MountPath) {
					return
				}
			}
		}
		t.Errorf("%s: type DirectoryOrCreate: the kubelet creates it owned by root, and no init container %s chowns it to %s",
			where, rootInit.name, owner)
	default:
		t.Errorf("%s: type %q: want DirectoryOrCreate (and %s) or Directory (and nodes prepared with %s)", where, typ, rootInit.name, nodePreparedTmpfiles)
	}
}

// TestNodePreparedTmpfilesApply applies the node-prepared tmpfiles.d file
// under a temporary root with the real systemd-tmpfiles and checks the
// directories it makes: type, mode and owner as the file says (which
// TestHostPathsHaveAnOwner matched against the agent pod). It needs root
// (to chown) and systemd-tmpfiles, and skips, saying so, without them.
func TestNodePreparedTmpfilesApply(t *testing.T) {
	bin, err := exec.LookPath("systemd-tmpfiles")
	if err != nil {
		t.Skipf("systemd-tmpfiles is not installed: %v", err)
	}
	if os.Geteuid() != 0 {
		t.Skip("not root: systemd-tmpfiles cannot chown the directories to 65532")
	}
	file, err := filepath.Abs(filepath.Join(repoRoot, nodePreparedTmpfiles))
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	out, err := exec.Command(bin, "--create", "--root="+root, file).CombinedOutput()
	if err != nil || len(out) > 0 {
		t.Fatalf("systemd-tmpfiles --create --root=%s %s: %v\n%s", root, file, err, out)
	}
	for _, l := range parseTmpfiles(t, readFile(t, nodePreparedTmpfiles)) {
		fi, err := os.Stat(filepath.Join(root, l.path))
		if err != nil {
			t.Errorf("%s: %v", l.path, err)
			continue
		}
		st := fi.Sys().(*syscall.Stat_t)
		uid, gid := strconv.Itoa(int(st.Uid)), strconv.Itoa(int(st.Gid))
		if l.user == "root" {
			l.user = "0"
		}
		if l.group == "root" {
			l.group = "0"
		}
		if !fi.IsDir() || fi.Mode().Perm() != l.mode || uid != l.user || gid != l.group {
			t.Errorf("%s: %v %s:%s, want a directory %v %s:%s", l.path, fi.Mode(), uid, gid, l.mode, l.user, l.group)
		}
	}
}
