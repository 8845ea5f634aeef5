#!/usr/bin/env bash
# deps-check: the layout and import rules of sharedstate/DESIGN.md
# ("Layout", "Import rules", "Modules"), checked with `go list` in every
# module of the repository (each folder with a go.mod). Each package's
# non-test imports must be in its rule; a package in no rule fails too (add
# it here and to sharedstate/DESIGN.md). Each module's graph (`go list -m all`) must
# lack the modules its rule denies; a module in no rule fails too. The
# design doc is checked against this file: every package must be in a row
# of its Layout table (its folder's or the nearest one above), every row
# must name a folder that exists, and its lists of import and module rules
# must be exactly the rules below, in their words. Prints every violation as
# "deps-check: <package> imports <import>: <rule>" (or "deps-check: module
# <folder> has <module> in its graph: <rule>", "deps-check: sharedstate/DESIGN.md: …")
# and exits 1 if any.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
export GOWORK=off
mod=github.com/fusebox-dev/fusebox
fail=0
allpkgs=""
bad() { echo "deps-check: $1 imports $2: $3"; fail=1; }
badmod() { echo "deps-check: module $1 has $2 in its graph: $3"; fail=1; }
baddoc() { echo "deps-check: $DOC: $1"; fail=1; }

# The design doc this file enforces.
DOC=sharedstate/DESIGN.md

# The repository's packages, relative to the root module's path ("" is the
# root); the import paths of nested modules continue it.
rel() { local p=${1#"$mod"}; echo "${p#/}"; }

# The modules: the folders holding a go.mod ("." is the root).
modules=$(find . -name go.mod -not -path './.*' -not -path '*/testdata/*' -printf '%h\n' | sed 's|^\./||' | sort)

PROTO='sharedstate|protocol|protocol/fuseboxv1|protocol/convert'

# rule PKG -> sets ALLOW (regex of Fusebox packages it may import, relative)
# and DENY (regex of other projects' packages it must not import directly),
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
      ALLOW='^sharedstate(/secretfile|/backoff|/ctxtime)?$'; DENY='hashicorp/memberlist|^go\.etcd\.io/etcd/server'
      WHY='sharedstate/store may import sharedstate and the etcd client' ;;
    sharedstate/daemonflag | sharedstate/daemonflag/*)
      ALLOW='^sharedstate/daemonflag$'; DENY='^go\.etcd\.io/|hashicorp/memberlist|^google\.golang\.org/|prometheus'
      WHY='sharedstate/daemonflag (the flags, FUSEBOX_* variables and --config file of both daemons) may import pflag and YAML only' ;;
    sharedstate | sharedstate/*)
      ALLOW='^sharedstate(/internal(/.*)?)?$'; DENY='\.'
      WHY='sharedstate and its small packages import the standard library only' ;;
    protocol/gossip)
      ALLOW="^($PROTO|sharedstate/secretfile)\$"; DENY='^go\.etcd\.io/'
      WHY='protocol/gossip may import protocol, sharedstate and memberlist' ;;
    protocol/serverlimits)
      ALLOW='^$'; DENY='^go\.etcd\.io/|hashicorp/memberlist'
      WHY='protocol/serverlimits (the server timeouts and gRPC limits of both daemons) may import grpc and the standard library only' ;;
    protocol | protocol/*)
      ALLOW="^($PROTO)\$"; DENY='^go\.etcd\.io/|hashicorp/memberlist'
      WHY='protocol may import sharedstate (conversions), grpc and protobuf' ;;
    agent/lab/conformance | agent/lab/membership | agent/lab/policies | agent/lab/trust | agent/lab/clients | agent/lab/control)
      ALLOW='^$'; DENY='.'
      WHY='the test packages of the lab (the conformance suite of the callers, the multi-agent tests) are tests only: their non-test code imports nothing' ;;
    agent/lab/simnet)
      ALLOW='^$'; DENY='^go\.etcd\.io/'
      WHY='agent/lab/simnet (the simulated network of the lab) may import memberlist only' ;;
    agent/lab | agent/lab/*)
      ALLOW='.*'
      WHY='the lab (agent/lab: the fleet builder, scale runs, soak) may import everything, agent/internal/agentopt (the simulation hooks) included' ;;
    agent/proxy)
      ALLOW='^(clientlib|sharedstate|sharedstate/cliflag|sharedstate/ctxtime)$'; DENY='^go\.etcd\.io/|hashicorp/memberlist|^google\.golang\.org/'
      WHY='agent/proxy (the egress proxy) makes its calls through clientlib, deciding through the Engine interface the agent implements: it may import clientlib, sharedstate and its small packages and client_golang, never the agent, gRPC, etcd or memberlist' ;;
    agent | agent/*)
      ALLOW="^($PROTO|protocol/gossip|protocol/serverlimits|sharedstate/backoff|sharedstate/logging|sharedstate/cliflag|sharedstate/daemonflag|sharedstate/ctxtime|sharedstate/secretfile|sharedstate/store|agent/.*)\$"; DENY='^go\.etcd\.io/'
      WHY='agent may import sharedstate, store, protocol, protocol/gossip, protocol/serverlimits (etcd only through store)' ;;
    clientlib/idempotency/redisstore)
      ALLOW="^($PROTO|clientlib|clientlib/.*)\$"; DENY='^go\.etcd\.io/|hashicorp/memberlist'
      WHY='clientlib/idempotency/redisstore may import clientlib, sharedstate, protocol and Redis' ;;
    clientlib | clientlib/*)
      ALLOW="^($PROTO|sharedstate/backoff|sharedstate/ctxtime|clientlib|clientlib/.*)\$"; DENY='^go\.etcd\.io/|hashicorp/memberlist|redis'
      WHY='clientlib may import sharedstate, sharedstate/backoff, protocol, protocol/convert, grpc, client_golang (Redis only in redisstore)' ;;
    coordinator | coordinator/*)
      ALLOW="^($PROTO|protocol/gossip|protocol/serverlimits|sharedstate/backoff|sharedstate/cliflag|sharedstate/daemonflag|sharedstate/logging|sharedstate/secretfile|sharedstate/store|sharedstate/store/embedded|coordinator/.*)\$"; DENY='^go\.etcd\.io/'
      WHY='coordinator may import sharedstate, store, embedded, protocol, protocol/gossip, protocol/serverlimits, never agent (etcd only through store)' ;;
    deploy)
      ALLOW='^$'; DENY='.'
      WHY='deploy holds manifests and their tests: no non-test Go code (kustomize and k8s.io/api are test-only)' ;;
    *) return 1 ;;
  esac
}

# modrule DIR -> sets DENYMOD (regex of module paths the graph of the
# module in DIR must not hold) and WHYMOD (the row). Returns 1 for modules
# the table does not cover. The Kubernetes API types and kustomize are
# deploy's (etcd's server brings k8s.io/klog and k8s.io/utils, which are
# not them).
K8S='^k8s\.io/(api|apimachinery)$|^sigs\.k8s\.io/kustomize/'
modrule() {
  DENYMOD='^$'; WHYMOD=''
  case "$1" in
    .)
      DENYMOD="^go\.etcd\.io/|hashicorp/memberlist|redis/go-redis|chromedp|k8s\.io/|^$mod/"
      WHYMOD='the root module (sharedstate, protocol, clientlib: what a service links) requires no etcd, bbolt, memberlist, Redis, chromedp, Kubernetes library or other Fusebox module' ;;
    sharedstate/store)
      DENYMOD="hashicorp/memberlist|redis/go-redis|chromedp|$K8S|^$mod/"
      WHYMOD='the store module requires the root module and etcd only' ;;
    sharedstate/daemonflag)
      DENYMOD="^go\.etcd\.io/|hashicorp/memberlist|redis/go-redis|chromedp|k8s\.io/|^$mod(/|\$)"
      WHYMOD='the daemonflag module requires pflag and YAML only, no other Fusebox module' ;;
    protocol/gossip)
      DENYMOD="^go\.etcd\.io/|redis/go-redis|chromedp|k8s\.io/|^$mod/"
      WHYMOD='the gossip module requires the root module and memberlist only' ;;
    clientlib/idempotency/redisstore)
      DENYMOD="^go\.etcd\.io/|hashicorp/memberlist|chromedp|k8s\.io/|^$mod/"
      WHYMOD='the redisstore module requires the root module and go-redis only' ;;
    agent)
      DENYMOD="redis/go-redis|chromedp|$K8S|^$mod/(coordinator|cmd|deploy|agent/lab|clientlib/idempotency/redisstore)\$"
      WHYMOD='the agent module requires the root, store, gossip and daemonflag modules (never coordinator or the lab), no Redis, chromedp or Kubernetes API' ;;
    coordinator)
      DENYMOD="redis/go-redis|$K8S|^$mod/(agent|cmd|deploy|agent/lab|clientlib/idempotency/redisstore)\$"
      WHYMOD='the coordinator module requires the root, store, gossip and daemonflag modules, never the agent (its tests with agents are in the lab) or the lab, no Redis or Kubernetes API' ;;
    cmd)
      DENYMOD="redis/go-redis|$K8S|^$mod/(deploy|agent/lab|clientlib/idempotency/redisstore)\$"
      WHYMOD='the binaries link no Redis, no Kubernetes API (deploy tests only) and nothing of the lab' ;;
    deploy)
      DENYMOD="redis/go-redis|^$mod/(agent/lab|clientlib/idempotency/redisstore)\$"
      WHYMOD='the deploy module (manifests and their tests) requires the agent and coordinator modules, kustomize and k8s.io/api, never the lab' ;;
    agent/lab)
      DENYMOD="redis/go-redis|$K8S|^$mod/(cmd|deploy|clientlib/idempotency/redisstore)\$"
      WHYMOD='the lab module requires the root, store, gossip, agent and coordinator modules (no product module requires it), no Redis or Kubernetes API' ;;
    *) return 1 ;;
  esac
}

for m in $modules; do
  if ! modrule "$m"; then
    badmod "$m" "-" "module is in no row of deps-check's module table (modrule)"
  else
    graph=$(cd "$m" && $GO list -m -f '{{if not .Main}}{{.Path}}{{end}}' all)
    for d in $(grep -E "$DENYMOD" <<<"$graph" || true); do
      badmod "$m" "$d" "$WHYMOD"
    done
  fi

  # -e: a package whose import does not resolve (a module its go.mod lacks)
  # is still listed, and judged by its row.
  imports=$(cd "$m" && $GO list -e -f '{{.ImportPath}} {{join .Imports " "}}' ./...)
  pkgs=$(cut -d' ' -f1 <<<"$imports")
  allpkgs+=" $pkgs"
  while read -r pkg imps; do
    [ -n "$pkg" ] || continue # a module without packages
    p=$(rel "$pkg")
    if ! rule "$p"; then
      bad "$p" "-" "package is in no rule of deps-check's import table (rule)"
      continue
    fi
    for imp in $imps; do
      case "$imp" in
        "$mod" | "$mod"/*)
          r=$(rel "$imp")
          [[ $r =~ $ALLOW ]] || bad "$p" "$r" "$WHY" ;;
        *.*/*) # another module
          if [[ $imp =~ $DENY ]]; then bad "$p" "$imp" "$WHY"; fi ;;
        *) ;; # the standard library
      esac
    done
  done <<<"$imports"

  # clientlib pulls in neither etcd nor memberlist, not even indirectly, and
  # Redis only through redisstore.
  for pkg in $(grep -E "^$mod/clientlib(/|\$)" <<<"$pkgs" || true); do
    deps=$(cd "$m" && $GO list -e -deps "$pkg")
    for d in $(grep -E 'go\.etcd\.io|hashicorp/memberlist' <<<"$deps" || true); do
      bad "$(rel "$pkg")" "$d" "clientlib must not pull in etcd or memberlist (indirectly either)"
    done
    case "$pkg" in */redisstore) continue ;; esac
    for d in $(grep -E 'redis' <<<"$deps" | grep -v "^$mod/" || true); do
      bad "$(rel "$pkg")" "$d" "Redis only in clientlib/idempotency/redisstore"
    done
  done

  # No binary links package testing, a test-helper package or the lab (its
  # simulated network included).
  for b in $(grep -E "^$mod/cmd/" <<<"$pkgs" | grep -v /internal/ || true); do
    for d in $(cd "$m" && $GO list -e -deps "$b" | grep -E '^testing$|/sstest$|/embeddedtest$|/daemonflagtest$|/agent/lab(/|$)' || true); do
      bad "$(rel "$b")" "$d" "binaries must not link test code (test helpers belong in packages only tests import, the simulated network in the lab)"
    done
  done
done

# The design doc. section HEADING prints the lines from the heading to the
# next heading of any level.
section() { awk -v h="$1" '$0 == h {on = 1; next} on && /^#/ {exit} on' "$DOC"; }
if [ ! -f "$DOC" ]; then
  baddoc "missing: it states the rules this script enforces"
else
  # Layout: the rows' folders exist, and every package is in a row.
  rows=$(section '## Layout' | sed -nE 's/^\| `([^`]+)` \|.*/\1/p' | sed 's|/$||')
  for r in $rows; do
    [ -d "$r" ] || baddoc "the Layout table has a row for $r/, which is not a folder"
  done
  for pkg in $allpkgs; do
    p=$(rel "$pkg") q=$p
    until grep -qxF "$q" <<<"$rows"; do
      [[ $q == */* ]] || { baddoc "package $p is in no row of the Layout table (add one for its folder)"; break; }
      q=${q%/*}
    done
  done

  # Import and module rules: each bullet "- `PAT`, `PAT`: WHY" must be the
  # rule this script applies to every PAT (a * stands for any folder), and
  # every rule here must have a bullet.
  check_rules() { # HEADING FUNCTION VAR: the bullets of HEADING against FUNCTION's VAR
    local heading=$1 fn=$2 var=$3 line pats why pat patlist
    local -A documented=()
    while IFS= read -r line; do
      pats=${line%%: *} why=${line#*: }
      documented[$why]=1
      mapfile -t patlist < <(grep -oE '`[^`]+`' <<<"$pats" | tr -d '`')
      for pat in "${patlist[@]}"; do
        if ! "$fn" "${pat//\*/x}"; then
          baddoc "$heading: $pat matches no rule of deps-check"
        elif [ "${!var}" != "$why" ]; then
          baddoc "$heading: $pat says \"$why\"; deps-check's rule for it says \"${!var}\""
        fi
      done
    done < <(section "$heading" | sed -n 's/^- //p' | grep -E '^`[^`]+`(, `[^`]+`)*: ')
    while IFS= read -r why; do
      [ -n "$why" ] || continue
      [ -n "${documented[$why]:-}" ] || baddoc "$heading lacks deps-check's rule \"$why\""
    done < <(sed -nE "s/.*\b$var='([^']*)'.*/\1/p" "$0")
  }
  check_rules '### Import rules' rule WHY
  check_rules '### Modules' modrule WHYMOD
fi

if ((fail)); then exit 1; fi
echo "deps-check: ok"
