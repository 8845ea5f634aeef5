package deploy_test

import (
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// secretFlags are the flags whose files hold secrets, which must not be
// readable by their group or others (the project's rule, which the
// binaries enforce).
var secretFlags = []string{"keyring-file", "tokens-file", "tls-key", "etcd-key", "etcd-password-file", "embedded-etcd-key"}

// copier is an init container that copies Secret volumes (mounted under
// $SRC, one directory each) into a directory ($DST) with mode 0400.
type copier struct {
	c        *corev1.Container
	src, dst string
}

func copiers(spec *corev1.PodSpec) []copier {
	var out []copier
	for i := range spec.InitContainers {
		c := &spec.InitContainers[i]
		var src, dst string
		for _, e := range c.Env {
			switch e.Name {
			case "SRC":
				src = e.Value
			case "DST":
				dst = e.Value
			}
		}
		if src != "" && dst != "" {
			out = append(out, copier{c: c, src: src, dst: dst})
		}
	}
	return out
}

// TestSecretFilesPrivate checks that every secret file a Fusebox binary is
// given has a mode the binary accepts. The kubelet makes the files of a
// Secret volume group-readable (at least 0440, group fsGroup) in a pod
// with fsGroup, and owned by root (unreadable to user 65532) without one,
// so: no Fusebox container mounts a Secret volume; each secret flag names
// a file in a memory-backed emptyDir that an init container (SRC → DST)
// fills from the Secret volume mounted at SRC/<dir> for DST/<dir>/<file>.
// TestSecretCopyScript runs that init container's script.
func TestSecretFilesPrivate(t *testing.T) {
	each(t, func(t *testing.T, r *rendering) {
		for _, p := range r.templates {
			volumes := map[string]corev1.Volume{}
			for _, v := range p.spec.Volumes {
				volumes[v.Name] = v
			}
			cps := copiers(p.spec)
			for _, fc := range p.fuseboxContainers() {
				c, binary, where := fc.c, fc.binary, fc.where
				for _, m := range c.VolumeMounts {
					if volumes[m.Name].Secret != nil || volumes[m.Name].Projected != nil {
						t.Errorf("%s mounts the Secret volume %s at %s: the kubelet makes its files group-readable (fsGroup), which %s refuses; copy it with mode 0400 in an init container",
							where, m.Name, m.MountPath, binary)
					}
				}
				vals, _ := flagValues(t, where, binary, c)
				for _, flag := range secretFlags {
					if v := vals[flag]; v != "" {
						checkSecretFile(t, where, flag, v, c, p.spec, volumes, cps)
					}
				}
			}
		}
	})
}

func checkSecretFile(t *testing.T, where, flag, file string, c *corev1.Container, spec *corev1.PodSpec, volumes map[string]corev1.Volume, cps []copier) {
	t.Helper()
	m, ok := mountOf(c, file)
	if !ok {
		return // reported by TestManifestFlagsAndPorts
	}
	v := volumes[m.Name]
	if v.EmptyDir == nil || v.EmptyDir.Medium != corev1.StorageMediumMemory {
		t.Errorf("%s: --%s=%s is on volume %s, not a memory-backed emptyDir filled from a Secret", where, flag, file, m.Name)
		return
	}
	rel := strings.TrimPrefix(file, strings.TrimSuffix(m.MountPath, "/")+"/")
	dir, _, found := strings.Cut(rel, "/")
	if !found {
		t.Errorf("%s: --%s=%s: the copies are in one directory per Secret (%s/<dir>/<file>)", where, flag, file, m.MountPath)
		return
	}
	for _, cp := range cps {
		var writes bool
		for _, im := range cp.c.VolumeMounts {
			writes = writes || (im.Name == m.Name && im.MountPath == cp.dst && !im.ReadOnly)
		}
		if !writes {
			continue
		}
		if cp.dst != m.MountPath {
			t.Errorf("%s: init container %s copies to %s, which %s mounts at %s", where, cp.c.Name, cp.dst, c.Name, m.MountPath)
		}
		for _, im := range cp.c.VolumeMounts {
			if im.MountPath == path.Join(cp.src, dir) && volumes[im.Name].Secret != nil {
				return
			}
		}
		t.Errorf("%s: --%s=%s: init container %s mounts no Secret volume at %s", where, flag, file, cp.c.Name, path.Join(cp.src, dir))
		return
	}
	t.Errorf("%s: --%s=%s: no init container (env SRC, DST) fills volume %s", where, flag, file, m.Name)
}

// TestSecretCopyScript runs each copier init container's script with
// /bin/sh on Secret volumes laid out as the kubelet does (files mode 0440
// behind the ..data symlink), twice (an init container may run again in
// the same pod), and checks the copies: the same bytes, mode 0400, no
// kubelet bookkeeping entries.
func TestSecretCopyScript(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skipf("no sh to run the init containers' scripts: %v", err)
	}
	scripts := 0
	each(t, func(t *testing.T, r *rendering) {
		for _, p := range r.templates {
			for _, cp := range copiers(p.spec) {
				scripts++
				where := fmt.Sprintf("%s init container %s", p.owner, cp.c.Name)
				if len(cp.c.Command) != 2 || cp.c.Command[0] != "sh" || cp.c.Command[1] != "-c" || len(cp.c.Args) != 1 {
					t.Errorf("%s: want command [sh -c] and the script as the one argument, got %q %q", where, cp.c.Command, cp.c.Args)
					continue
				}
				runCopyScript(t, where, sh, cp)
			}
		}
	})
	if scripts == 0 {
		t.Fatal("no init container copies Secrets")
	}
}

func runCopyScript(t *testing.T, where, sh string, cp copier) {
	t.Helper()
	tmp := t.TempDir()
	src, dst := filepath.Join(tmp, "src"), filepath.Join(tmp, "dst")
	want := map[string]string{} // dir/key → content
	for _, m := range cp.c.VolumeMounts {
		dir, ok := strings.CutPrefix(m.MountPath, cp.src+"/")
		if !ok || strings.Contains(dir, "/") {
			continue
		}
		// The kubelet's atomic writer: keys are symlinks to ..data/KEY,
		// ..data a symlink to a timestamped directory.
		ts := filepath.Join(src, dir, "..2026_12_01_14_00_00.000000001")
		if err := os.MkdirAll(ts, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, key := range []string{"tls.key", "keyring"} {
			content := fmt.Sprintf("secret %s/%s\n", dir, key)
			f := filepath.Join(ts, key)
			if err := os.WriteFile(f, []byte(content), 0o440); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(f, 0o440); err != nil { // past the umask
				t.Fatal(err)
			}
			if err := os.Symlink(filepath.Join("..data", key), filepath.Join(src, dir, key)); err != nil {
				t.Fatal(err)
			}
			want[dir+"/"+key] = content
		}
		if err := os.Symlink(filepath.Base(ts), filepath.Join(src, dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	if len(want) == 0 {
		t.Errorf("%s: no Secret volume mounted under %s", where, cp.src)
		return
	}
	if err := os.Mkdir(dst, 0o777); err != nil {
		t.Fatal(err)
	}
	for run := 1; run <= 2; run++ {
		cmd := exec.Command(sh, "-c", cp.c.Args[0])
		cmd.Env = append(os.Environ(), "SRC="+src, "DST="+dst)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s: run %d of the script: %v\n%s", where, run, err, out)
			return
		}
	}
	var got []string
	err := filepath.WalkDir(dst, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dst, p)
		got = append(got, rel)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(p)
		switch {
		case err != nil:
			t.Errorf("%s: the copy %s is unreadable to its owner: %v", where, rel, err)
		case !fi.Mode().IsRegular():
			t.Errorf("%s: the copy %s is not a regular file (%v)", where, rel, fi.Mode())
		case fi.Mode().Perm()&0o077 != 0:
			t.Errorf("%s: the copy %s has mode %04o: the binaries refuse group/other-accessible secret files", where, rel, fi.Mode().Perm())
		case string(b) != want[rel]:
			t.Errorf("%s: the copy %s holds %q, want %q", where, rel, b, want[rel])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	wantNames := slices.Sorted(maps.Keys(want))
	if !slices.Equal(got, wantNames) {
		t.Errorf("%s: the script copied %q, want exactly %q", where, got, wantNames)
	}
}
