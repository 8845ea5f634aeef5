#!/usr/bin/env bash
# deps-check: DESIGN.md's import table ("Layout"), checked with `go list`.
# Each package's non-test imports must be in its row; a package in no row
# fails too (add it to the table and here). Prints every violation as
# "deps-check: <package> imports <import>: <rule>" and exits 1 if any.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
mod=$($GO list -m)
fail=0
bad() { echo "deps-check: $1 imports $2: $3"; fail=1; }

# The module's packages, relative to the module path ("" is the root).
rel() { local p=${1#"$mod"}; echo "${p#/}"; }

PROTO='sharedstate|protocol|protocol/fuseboxv1|protocol/convert'

# rule PKG -> sets ALLOW (regex of module packages it may import, relative)
# and DENY (regex of other modules' packages it must not import directly),
# and WHY (the row). Returns 1 for packages the table does not cover.
rule() {
  ALLOW='^$'; DENY='^$'; WHY=''
  case "$1" in
    cmd/*) ALLOW='.*'; WHY='cmd may import everything' ;;
    sharedstate/store/embedded/embeddedtest)
      ALLOW='^(sharedstate|sharedstate/store|sharedstate/store/embedded)$'; DENY='hashicorp/memberlist'
      WHY='embeddedtest (test helpers) may import embedded, store, sharedstate' ;;
    sharedstate/store/embedded)
      ALLOW='^(sharedstate|sharedstate/secretfile|sharedstate/store)$'; DENY='hashicorp/memberlist'
      WHY='sharedstate/store/embedded may import store, sharedstate and the etcd server' ;;
    sharedstate/store)
      ALLOW='^sharedstate(/secretfile)?$'; DENY='hashicorp/memberlist|^go\.etcd\.io/etcd/server'
      WHY='sharedstate/store may import sharedstate and the etcd client' ;;
    sharedstate | sharedstate/*)
      ALLOW='^sharedstate(/internal(/.*)?)?$'; DENY='\.'
      WHY='sharedstate and its small packages import the standard library only' ;;
    protocol/gossip/simnet)
      ALLOW='^$'; DENY='^go\.etcd\.io/'
      WHY='protocol/gossip/simnet (the simulated network of tests and scale runs) may import memberlist only' ;;
    protocol/gossip)
      ALLOW="^($PROTO|sharedstate/secretfile)\$"; DENY='^go\.etcd\.io/'
      WHY='protocol/gossip may import protocol, sharedstate and memberlist' ;;
    protocol/serverlimits)
      ALLOW='^$'; DENY='^go\.etcd\.io/|hashicorp/memberlist'
      WHY='protocol/serverlimits (the server timeouts and gRPC limits of both daemons) may import grpc and the standard library only' ;;
    protocol | protocol/*)
      ALLOW="^($PROTO)\$"; DENY='^go\.etcd\.io/|hashicorp/memberlist'
      WHY='protocol may import sharedstate (conversions), grpc and protobuf' ;;
    agent/agenttest)
      ALLOW='^agent$'; DENY='^go\.etcd\.io/'
      WHY='agent/agenttest (test helpers) may import agent' ;;
    agent/internal/scale/procs | agent/internal/scale/cmd/scaleprocs)
      ALLOW="^($PROTO|agent/internal/scale|agent/internal/scale/procs|sharedstate/ctxtime|sharedstate/store|sharedstate/store/embedded)\$"; DENY='^go\.etcd\.io/|hashicorp/memberlist'
      WHY='agent/internal/scale/procs (scale-procs: real agent processes on loopback) may import agent/internal/scale, store and embedded (its etcd), protocol' ;;
    agent/internal/scale | agent/internal/scale/*)
      ALLOW="^($PROTO|protocol/gossip|protocol/gossip/simnet|sharedstate/ctxtime|agent|agent/internal/scale)\$"; DENY='^go\.etcd\.io/'
      WHY='agent/internal/scale (fleets on the simulated network) may import agent, protocol/gossip/simnet and what agent may' ;;
    agent/proxy)
      ALLOW='^(sharedstate|sharedstate/backoff|sharedstate/cliflag|sharedstate/ctxtime)$'; DENY='^go\.etcd\.io/|hashicorp/memberlist|^google\.golang\.org/'
      WHY='agent/proxy (the egress proxy) decides through its Engine interface: it may import sharedstate and its small packages and client_golang, never the agent, gRPC, etcd or memberlist' ;;
    agent | agent/*)
      ALLOW="^($PROTO|protocol/gossip|protocol/serverlimits|sharedstate/logging|sharedstate/cliflag|sharedstate/ctxtime|sharedstate/secretfile|sharedstate/store|agent/.*)\$"; DENY='^go\.etcd\.io/'
      WHY='agent may import sharedstate, store, protocol, protocol/gossip, protocol/serverlimits (etcd only through store)' ;;
    clientlib/idempotency/redisstore)
      ALLOW="^($PROTO|clientlib|clientlib/.*)\$"; DENY='^go\.etcd\.io/|hashicorp/memberlist'
      WHY='clientlib/idempotency/redisstore may import clientlib, sharedstate, protocol and Redis' ;;
    clientlib | clientlib/*)
      ALLOW="^($PROTO|sharedstate/backoff|clientlib|clientlib/.*)\$"; DENY='^go\.etcd\.io/|hashicorp/memberlist|redis'
      WHY='clientlib may import sharedstate, sharedstate/backoff, protocol, protocol/convert, grpc, client_golang (Redis only in redisstore)' ;;
    coordinator | coordinator/*)
      ALLOW="^($PROTO|protocol/gossip|protocol/serverlimits|sharedstate/cliflag|sharedstate/logging|sharedstate/secretfile|sharedstate/store|sharedstate/store/embedded|coordinator/.*)\$"; DENY='^go\.etcd\.io/'
      WHY='coordinator may import sharedstate, store, embedded, protocol, protocol/gossip, protocol/serverlimits, never agent (etcd only through store)' ;;
    deploy)
      ALLOW='^$'; DENY='.'
      WHY='deploy holds manifests and their tests: no non-test Go code (kustomize and k8s.io/api are test-only)' ;;
    *) return 1 ;;
  esac
}

while read -r pkg imports; do
  p=$(rel "$pkg")
  if ! rule "$p"; then
    bad "$p" "-" "package is in no row of DESIGN.md's import table"
    continue
  fi
  for imp in $imports; do
    case "$imp" in
      "$mod" | "$mod"/*)
        r=$(rel "$imp")
        [[ $r =~ $ALLOW ]] || bad "$p" "$r" "$WHY" ;;
      *.*/*) # another module
        if [[ $imp =~ $DENY ]]; then bad "$p" "$imp" "$WHY"; fi ;;
      *) ;; # the standard library
    esac
  done
done < <($GO list -f '{{.ImportPath}} {{join .Imports " "}}' ./...)

# clientlib pulls in neither etcd nor memberlist, not even indirectly, and
# Redis only through redisstore.
while read -r pkg; do
  for d in $($GO list -deps "$pkg" | grep -E 'go\.etcd\.io|hashicorp/memberlist' || true); do
    bad "$(rel "$pkg")" "$d" "clientlib must not pull in etcd or memberlist (indirectly either)"
  done
  case "$pkg" in */redisstore) continue ;; esac
  for d in $($GO list -deps "$pkg" | grep -E 'redis' | grep -v "^$mod/" || true); do
    bad "$(rel "$pkg")" "$d" "Redis only in clientlib/idempotency/redisstore"
  done
done < <($GO list ./clientlib/...)

# No binary links package testing, a test-helper package or the simulated
# network.
for b in $($GO list ./cmd/... | grep -v /internal/); do
  for d in $($GO list -deps "$b" | grep -E '^testing$|/sstest$|/embeddedtest$|/protocol/gossip/simnet$' || true); do
    bad "$(rel "$b")" "$d" "binaries must not link test code (test helpers and the simulated network belong in packages only tests and scale runs import)"
  done
done

if ((fail)); then exit 1; fi
echo "deps-check: ok"
