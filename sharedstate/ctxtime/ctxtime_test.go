package ctxtime

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

func TestSleep(t *testing.T) {
	if !Sleep(context.Background(), time.Millisecond) {
		t.Fatal("Sleep(1ms) with a live context reported false")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if Sleep(ctx, time.Hour) {
		t.Fatal("Sleep(1h) with a done context reported true")
	}
	ctx, cancel = context.WithCancel(context.Background())
	go cancel()
	if Sleep(ctx, time.Hour) {
		t.Fatal("Sleep(1h) whose context is cancelled meanwhile reported true")
	}
}

func TestEvery(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var calls atomic.Int64
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		Every(ctx, time.Millisecond, func() { calls.Add(1) })
	}()
	sstest.Eventually(t, 10*time.Second, "fn called 3 times", func() bool { return calls.Load() >= 3 })
	cancel()
	sstest.Eventually(t, 10*time.Second, "Every returned after cancel", func() bool {
		select {
		case <-returned:
			return true
		default:
			return false
		}
	})
}
