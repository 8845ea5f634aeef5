// Package auth holds the coordinator's access control: bearer tokens read
// from a tokens file, each with a role (viewer or admin) and an identity
// recorded in the audit, and the loopback-only mode used when there is no
// tokens file.
//
// It is pure logic with no gRPC or HTTP types in its API beyond
// net.Addr: the coordinator's interceptors and HTTP middleware call
// Authenticate and Authorize and map the sentinel errors to status codes in
// one place.
//
// Usage:
//
//	tokens, err := auth.LoadTokensFile("/etc/fusebox/tokens") // "admin TOKEN alice" lines
//	a := auth.Authenticator{Tokens: tokens}                  // Tokens nil: loopback-only mode
//	id, err := a.Authenticate(r.Header.Get("Authorization"), peerAddr)
//	if err == nil {
//		err = auth.Authorize(id, auth.RoleAdmin) // ErrPermissionDenied for a viewer
//	}
package auth
