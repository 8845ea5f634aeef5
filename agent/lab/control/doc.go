// Package control holds the lab's tests of the control plane with real
// agents: a coordinator (its Admin API, its dashboard in a headless
// Chromium, its what-if replay) and fuseboxctl over a fleet of agents on
// etcd, through leader losses and rewinds of etcd. Its non-test code is
// this comment.
//
//	go test -race -count=1 ./control/
//
// The browser tests need Chromium (FUSEBOX_SKIP_BROWSER=1 skips them).
package control
