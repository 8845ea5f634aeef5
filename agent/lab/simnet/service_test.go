package simnet

import (
	"testing"
	"testing/synctest"
	"time"
)

// A host with a service time serves its packets one after the other: a
// burst arrives spaced by the service time, in order, and what finds
// QueueLen packets waiting is dropped (in virtual time, so the spacing is
// exact).
func TestServiceTimeQueuesAndDrops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const svc = 2 * time.Millisecond
		const latency = 10 * time.Millisecond
		n, err := New(Config{QueueLen: 5, ServiceTime: svc, Link: Link{Latency: latency}})
		if err != nil {
			t.Fatal(err)
		}
		defer n.Close()
		a, b := newTr(t, n), newTr(t, n)
		sent := time.Now()
		for i := range 8 {
			if _, err := a.WriteTo([]byte{byte(i)}, b.Addr()); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 5 {
			p := <-b.PacketCh()
			if int(p.Buf[0]) != i {
				t.Fatalf("packet %d came out as number %d: a host serves in arrival order", p.Buf[0], i)
			}
			if want := sent.Add(latency + time.Duration(i+1)*svc); !p.Timestamp.Equal(want) || !time.Now().Equal(want) {
				t.Errorf("packet %d handed to memberlist at +%v (timestamp +%v), want +%v", i, time.Since(sent), p.Timestamp.Sub(sent), want.Sub(sent))
			}
		}
		synctest.Wait()
		if s := b.Stats(); s.PacketsReceived != 5 || s.PacketsDropped != 3 {
			t.Errorf("received %d, dropped %d; want 5 and 3 (QueueLen 5 waiting)", s.PacketsReceived, s.PacketsDropped)
		}
		// Once the host caught up, a packet waits for nobody.
		time.Sleep(time.Second)
		at := time.Now()
		a.WriteTo([]byte{9}, b.Addr())
		if p := <-b.PacketCh(); !p.Timestamp.Equal(at.Add(latency + svc)) {
			t.Errorf("a packet to an idle host came out after %v, want latency + service time %v", p.Timestamp.Sub(at), latency+svc)
		}
	})
}
