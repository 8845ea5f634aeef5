// Package trust holds the lab's tests of a fleet of real agents against
// what crosses the gossip from outside or from a member that lies: forged
// packets from a stranger, lying push-pull states, an insider speaking for
// other members and replaying their rows; and the count of proposers of
// one trip among 20 agents. Its non-test code is this comment.
//
//	go test -race -count=1 ./trust/
package trust
