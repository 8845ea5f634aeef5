package store_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/store"
)

func TestConfigValidate(t *testing.T) {
	err := store.Config{Prefix: "/nope", RequestTimeout: -1}.Validate()
	for _, want := range []string{"Client is nil", `Prefix "/nope"`, "RequestTimeout"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want it to name %q", err, want)
		}
	}
}

func TestPolicyPutGetListDelete(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)

	def, err := e.st.PutPolicy(ctx, sharedstate.DefaultPolicyName, defaultJSON(t, nil), as("alice"))
	if err != nil {
		t.Fatalf("put default: %v", err)
	}
	if !def.IsDefault() || def.Version != 1 {
		t.Fatalf("put default = %+v", def)
	}
	put, err := e.st.PutPolicy(ctx, "shipping-api", []byte(`{"breaker": {"minimumRequests": 50}}`), as("alice"))
	if err != nil {
		t.Fatalf("put patch: %v", err)
	}

	// Stored form: schema 1 and the dependency are always written.
	raw, err := e.cli.Get(ctx, e.st.PolicyKey("shipping-api"))
	if err != nil {
		t.Fatal(err)
	}
	var stored map[string]any
	if err := json.Unmarshal(raw.Kvs[0].Value, &stored); err != nil {
		t.Fatal(err)
	}
	if stored["schema"] != float64(1) || stored["dependency"] != "shipping-api" {
		t.Fatalf("stored value %s lacks schema 1 / dependency", raw.Kvs[0].Value)
	}

	got, err := e.st.GetPolicy(ctx, "shipping-api")
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := got.Policy(sharedstate.DefaultPolicy()); got.ModRevision != put.ModRevision || p.Breaker.MinimumRequests != 50 {
		t.Fatalf("get = %+v, want mod revision %d and minimumRequests 50", got, put.ModRevision)
	}
	eff, _, err := e.st.EffectivePolicy(ctx, "shipping-api")
	if err != nil {
		t.Fatal(err)
	}
	want := sharedstate.DefaultPolicy()
	want.Dependency = "shipping-api"
	want.Breaker.MinimumRequests = 50
	if eff != want {
		t.Fatalf("effective = %+v, want %+v", eff, want)
	}
	if eff, _, err := e.st.EffectivePolicy(ctx, "no-policy"); err != nil || eff.Breaker.MinimumRequests != 20 || eff.Dependency != "no-policy" {
		t.Fatalf("effective of a dependency without a policy = %+v, %v", eff, err)
	}

	list, rev, err := e.st.ListPolicies(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Name != sharedstate.DefaultPolicyName || list[1].Name != "shipping-api" || rev < put.ModRevision {
		t.Fatalf("list = %+v at %d", list, rev)
	}
	if list[1].ModRevision != put.ModRevision {
		t.Fatalf("listed mod revision %d, want %d", list[1].ModRevision, put.ModRevision)
	}

	if _, err := e.st.DeletePolicy(ctx, "shipping-api", as("bob")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.GetPolicy(ctx, "shipping-api"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("get after delete = %v, want ErrNotFound", err)
	}
	if _, err := e.st.DeletePolicy(ctx, "shipping-api", as("bob")); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("second delete = %v, want ErrNotFound", err)
	}
	if _, err := e.st.PutPolicy(ctx, "x", []byte(`{}`), store.WriteOptions{}); err == nil || !strings.Contains(err.Error(), "Actor") {
		t.Fatalf("put without actor = %v, want an error naming Actor", err)
	}
}

func TestPolicyCompareAndSwap(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	body := []byte(`{"retry": {"maxAttempts": 2}}`)
	w := func(x store.Expect) store.WriteOptions { return store.WriteOptions{Actor: "alice", Expect: x} }

	first, err := e.st.PutPolicy(ctx, "dep", body, w(store.ExpectAbsent))
	if err != nil {
		t.Fatalf("create with ExpectAbsent: %v", err)
	}
	_, err = e.st.PutPolicy(ctx, "dep", body, w(store.ExpectAbsent))
	mustConflict(t, err, 0, first.ModRevision)
	if !strings.Contains(err.Error(), "expected mod revision 0 (absent)") {
		t.Errorf("conflict message %q should name both revisions", err)
	}

	_, err = e.st.PutPolicy(ctx, "dep", body, w(store.ExpectModRevision(first.ModRevision-1)))
	mustConflict(t, err, first.ModRevision-1, first.ModRevision)

	second, err := e.st.PutPolicy(ctx, "dep", body, w(store.ExpectModRevision(first.ModRevision)))
	if err != nil {
		t.Fatalf("put with the right revision: %v", err)
	}
	if second.Version != 2 || second.CreateRevision != first.ModRevision {
		t.Fatalf("second put = %+v", second)
	}
	if _, err := e.st.PutPolicy(ctx, "dep", body, as("alice")); err != nil {
		t.Fatalf("unconditional put: %v", err)
	}

	_, err = e.st.DeletePolicy(ctx, "dep", w(store.ExpectModRevision(second.ModRevision)))
	cur, _ := e.st.GetPolicy(ctx, "dep")
	mustConflict(t, err, second.ModRevision, cur.ModRevision)
	if _, err := e.st.DeletePolicy(ctx, "dep", w(store.ExpectModRevision(cur.ModRevision))); err != nil {
		t.Fatalf("delete with the right revision: %v", err)
	}
	_, err = e.st.PutPolicy(ctx, "dep", body, w(store.ExpectModRevision(cur.ModRevision)))
	mustConflict(t, err, cur.ModRevision, 0)
}

func TestConcurrentCompareAndSwapExactlyOneWins(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	base, err := e.st.PutPolicy(ctx, "dep", []byte(`{"retry": {"maxAttempts": 2}}`), as("setup"))
	if err != nil {
		t.Fatal(err)
	}

	const writers = 8
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		errs  = make([]error, writers)
		wins  = make([]store.PolicyEntry, writers)
	)
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			body := []byte(fmt.Sprintf(`{"retry": {"maxAttempts": %d}}`, 3+i))
			wins[i], errs[i] = e.st.PutPolicy(ctx, "dep", body,
				store.WriteOptions{Actor: fmt.Sprintf("writer-%d", i), Expect: store.ExpectModRevision(base.ModRevision)})
		}()
	}
	close(start)
	wg.Wait()

	winner := -1
	for i, err := range errs {
		if err == nil {
			if winner >= 0 {
				t.Fatalf("writers %d and %d both won", winner, i)
			}
			winner = i
		}
	}
	if winner < 0 {
		t.Fatalf("nobody won: %v", errs)
	}
	for i, err := range errs {
		if i != winner {
			mustConflict(t, err, base.ModRevision, wins[winner].ModRevision)
		}
	}

	entries, err := e.st.ListAudit(ctx, store.AuditQuery{Dependency: "dep"})
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 {
		t.Fatalf("audit has %d entries for dep, want 2 (setup + the winner): %+v", len(entries), entries)
	}
	if entries[0].Actor != fmt.Sprintf("writer-%d", winner) || entries[0].Revision != wins[winner].ModRevision {
		t.Fatalf("newest audit entry = %+v, want the winner's", entries[0])
	}
}

func TestInvalidPolicyRefusedWithEveryViolation(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	good, err := e.st.PutPolicy(ctx, "dep", []byte(`{"retry": {"maxAttempts": 2}}`), as("alice"))
	if err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name   string
		policy string
		body   string
		fields []string // violations that must be named; none: any ErrInvalidPolicy
	}{
		{
			name:   "three violations in a patch",
			policy: "dep",
			body:   `{"breaker": {"failureRateThreshold": 1.5, "window": "10ms"}, "retry": {"maxAttempts": 0}}`,
			fields: []string{"breaker.failureRateThreshold", "breaker.window", "retry.maxAttempts"},
		},
		{
			name:   "patch invalid only merged with the default",
			policy: "dep",
			body:   `{"breaker": {"openDuration": "10m"}}`, // default maxOpenDuration is 2m
			fields: []string{"breaker.maxOpenDuration"},
		},
		{name: "unknown field", policy: "dep", body: `{"breaker": {"minimumRequest": 5}}`},
		{name: "schema 2", policy: "dep", body: `{"schema": 2}`, fields: []string{"schema"}},
		{name: "other dependency", policy: "dep", body: `{"dependency": "other"}`, fields: []string{"dependency"}},
		{name: "incomplete default", policy: sharedstate.DefaultPolicyName, body: `{"dependency": "_default", "retry": {"maxAttempts": 2}}`, fields: []string{"breaker.window", "retry.perAttemptTimeout"}},
		{name: "not JSON", policy: "dep", body: `breaker: {}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before, err := e.cli.Get(ctx, e.st.Prefix(), clientv3.WithPrefix())
			if err != nil {
				t.Fatal(err)
			}
			_, err = e.st.PutPolicy(ctx, tt.policy, []byte(tt.body), as("mallory"))
			if !errors.Is(err, sharedstate.ErrInvalidPolicy) {
				t.Fatalf("put = %v, want ErrInvalidPolicy", err)
			}
			if len(tt.fields) > 0 {
				var verr *sharedstate.ValidationError
				if !errors.As(err, &verr) {
					t.Fatalf("put = %v, want a *sharedstate.ValidationError", err)
				}
				named := map[string]bool{}
				for _, v := range verr.Violations {
					named[v.Field] = true
				}
				for _, f := range tt.fields {
					if !named[f] {
						t.Errorf("violations %v do not name %s", verr.Violations, f)
					}
				}
			}
			after, err := e.cli.Get(ctx, e.st.Prefix(), clientv3.WithPrefix())
			if err != nil {
				t.Fatal(err)
			}
			if after.Header.Revision != before.Header.Revision {
				t.Fatalf("etcd changed (revision %d → %d) after a refused write", before.Header.Revision, after.Header.Revision)
			}
		})
	}
	if got, err := e.st.GetPolicy(ctx, "dep"); err != nil || got.ModRevision != good.ModRevision {
		t.Fatalf("policy after refused writes = %+v, %v", got, err)
	}
}

func TestDefaultCannotInvalidateDependencyPolicies(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	long := func(p *sharedstate.Policy) { p.Breaker.MaxOpenDuration = sharedstate.Duration(10 * time.Minute) }
	if _, err := e.st.PutPolicy(ctx, sharedstate.DefaultPolicyName, defaultJSON(t, long), as("alice")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.PutPolicy(ctx, "slow-dep", []byte(`{"breaker": {"openDuration": "5m"}}`), as("alice")); err != nil {
		t.Fatalf("patch valid over the stored default refused: %v", err)
	}

	// A default with maxOpenDuration 2m would make slow-dep invalid.
	_, err := e.st.PutPolicy(ctx, sharedstate.DefaultPolicyName, defaultJSON(t, nil), as("alice"))
	var verr *sharedstate.ValidationError
	if !errors.As(err, &verr) || !strings.Contains(err.Error(), "slow-dep: breaker.maxOpenDuration") {
		t.Fatalf("put default = %v, want a ValidationError naming slow-dep", err)
	}
	// So would deleting it (the built-in default has 2m too).
	if _, err := e.st.DeletePolicy(ctx, sharedstate.DefaultPolicyName, as("alice")); !errors.As(err, &verr) {
		t.Fatalf("delete default = %v, want a ValidationError", err)
	}
	if _, err := e.st.DeletePolicy(ctx, "slow-dep", as("alice")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.DeletePolicy(ctx, sharedstate.DefaultPolicyName, as("alice")); err != nil {
		t.Fatalf("delete default once nothing depends on it: %v", err)
	}
}

func TestInvalidValuesInEtcdAreSkippedByReaders(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	if _, err := e.st.PutPolicy(ctx, "good", []byte(`{}`), as("alice")); err != nil {
		t.Fatal(err)
	}
	for key, value := range map[string]string{
		e.st.PolicyKey("bad"):     `{"breaker": {"minimumRequests": -1}}`,
		e.st.PolicyKey("garbage"): `not json`,
		e.st.OverrideKey("bad"):   `{"state": "sideways"}`,
	} {
		if _, err := e.cli.Put(ctx, key, value); err != nil {
			t.Fatal(err)
		}
	}
	list, _, err := e.st.ListPolicies(ctx)
	if len(list) != 1 || list[0].Name != "good" {
		t.Fatalf("list = %+v, want only the good policy", list)
	}
	for _, key := range []string{e.st.PolicyKey("bad"), e.st.PolicyKey("garbage")} {
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("list error %v does not name %s", err, key)
		}
	}
	var iv *store.InvalidValueError
	if _, err := e.st.GetPolicy(ctx, "bad"); !errors.As(err, &iv) || iv.Key != e.st.PolicyKey("bad") {
		t.Fatalf("get bad = %v, want an InvalidValueError for its key", err)
	}
	if _, err := e.st.GetOverride(ctx, "bad"); !errors.As(err, &iv) || !errors.Is(err, sharedstate.ErrInvalidOverride) {
		t.Fatalf("get bad override = %v, want an InvalidValueError wrapping ErrInvalidOverride", err)
	}
	// A bad value can still be deleted, and the audit entry stays valid JSON.
	if _, err := e.st.DeletePolicy(ctx, "garbage", as("alice")); err != nil {
		t.Fatal(err)
	}
	entries, err := e.st.ListAudit(ctx, store.AuditQuery{Dependency: "garbage"})
	if err != nil || len(entries) != 1 || string(entries[0].Before) != `"not json"` {
		t.Fatalf("audit of the delete = %+v, %v", entries, err)
	}
}

// TestPutPolicyNamesEveryProblem: a dependency policy with a bad duration,
// a wrong type, an unknown field and an out-of-range value is refused with
// all four, each with its JSON path, and nothing is written.
func TestPutPolicyNamesEveryProblem(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	_, err := e.st.PutPolicy(ctx, "dep", []byte(`{"breaker": {"window": "abc", "minimumRequests": "5", "colour": 1, "failureRateThreshold": 2}}`), as("alice"))
	var verr *sharedstate.ValidationError
	if !errors.As(err, &verr) {
		t.Fatalf("put = %v, want a *sharedstate.ValidationError", err)
	}
	for _, want := range []string{`breaker.window: invalid duration "abc"`, `breaker.minimumRequests: must be an integer, got "5"`,
		`breaker.colour: unknown field`, `breaker.failureRateThreshold: must be in (0,1], got 2`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal lacks %q:\n%v", want, err)
		}
	}
	if len(verr.Violations) != 4 {
		t.Errorf("%d violations, want 4: %v", len(verr.Violations), verr.Violations)
	}
}
