package deploy_test

import (
	"fmt"
	"testing"
)

// plaintextRule is a flag that lets a binary run without encryption where
// it otherwise refuses to, and when the binary needs it.
type plaintextRule struct {
	flag     string
	binaries []string
	// needed returns why the flag is needed with these flag values ("" when
	// it is not).
	needed func(vals map[string]string) string
}

var plaintextRules = []plaintextRule{
	{
		flag:     "insecure-gossip",
		binaries: []string{"fusebox-agent", "fusebox-coordinator"},
		needed: func(v map[string]string) string {
			if v["gossip-addr"] != "" && !isLoopback(host(v["gossip-addr"])) && v["keyring-file"] == "" {
				return fmt.Sprintf("--gossip-addr=%s is not loopback and there is no --keyring-file", v["gossip-addr"])
			}
			return ""
		},
	},
	{
		flag:     "insecure-proxy",
		binaries: []string{"fusebox-agent"},
		needed: func(v map[string]string) string {
			if a := v["proxy-addr"]; a != "" && !isLoopback(host(a)) {
				return fmt.Sprintf("--proxy-addr=%s is not loopback (the proxy has no authentication)", a)
			}
			return ""
		},
	},
	{
		flag:     "insecure-embedded-etcd",
		binaries: []string{"fusebox-coordinator"},
		needed: func(v map[string]string) string {
			u := v["embedded-etcd-url"]
			if v["etcd"] == "" && u != "" && !isLoopback(host(u)) && v["embedded-etcd-cert"] == "" {
				return fmt.Sprintf("--embedded-etcd-url=%s is not loopback and the embedded etcd has no TLS (--embedded-etcd-cert)", u)
			}
			return ""
		},
	},
}

// TestPlaintextFlagsExactlyWhereNeeded checks every container that runs a
// Fusebox binary: a flag that allows plaintext or an unauthenticated
// listener (--insecure-gossip, --insecure-embedded-etcd, --insecure-proxy)
// is passed exactly where the binary would refuse to start without it, and
// nowhere else: a manifest that has the keyring or TLS does not also switch
// the check off. Every manifest gossips with the keyring; the dev
// overlay's embedded etcd deliberately has no TLS, and its agents serve
// the egress proxy on the pod network (components/egress-proxy). A binary without the flag has no such refusal yet: the rule
// is logged, not enforced, until the flag exists.
func TestPlaintextFlagsExactlyWhereNeeded(t *testing.T) {
	each(t, func(t *testing.T, r *rendering) {
		for _, p := range r.templates {
			for _, fc := range p.fuseboxContainers() {
				where, binary := fc.where, fc.binary
				vals, _ := flagValues(t, where, binary, fc.c)
				if vals == nil {
					continue
				}
				for _, rule := range plaintextRules {
					applies := false
					for _, b := range rule.binaries {
						applies = applies || b == binary
					}
					if !applies {
						continue
					}
					_, exists := vals[rule.flag]
					given := vals[rule.flag] == "true"
					switch why := rule.needed(vals); {
					case why != "" && !exists:
						t.Logf("%s: %s; %s has no --%s (nor the refusal) yet: not checked", where, why, binary, rule.flag)
					case why != "" && !given:
						t.Errorf("%s: %s: %s refuses to start without --%s", where, why, binary, rule.flag)
					case why == "" && given:
						t.Errorf("%s: passes --%s, which these flags do not need: drop it", where, rule.flag)
					}
				}
			}
		}
	})
}
