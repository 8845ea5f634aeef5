package sstest

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer that several goroutines may write at once: the
// log of a daemon a test runs (an agent in process, a process's stderr),
// printed when the test fails. The zero value is empty and ready.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
