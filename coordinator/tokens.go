package coordinator

import (
	"errors"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/fusebox-dev/fusebox/coordinator/internal/auth"
)

// defaultTokensPoll is how often the tokens file is checked for a change.
const defaultTokensPoll = 2 * time.Second

// authn returns the authenticator of the tokens in force (loopback-only
// mode without a tokens file).
func (c *Coordinator) authn() auth.Authenticator {
	return auth.Authenticator{Tokens: c.tokens.Load()}
}

// ReloadTokens re-reads --tokens-file: a token removed from it stops
// working at once, a token added works. A file that cannot be read, is
// group/other-accessible or does not parse is refused and the tokens in
// force stay; the error says why. The coordinator calls it on SIGHUP and
// when the file changes.
func (c *Coordinator) ReloadTokens() error {
	if c.cfg.TokensFile == "" {
		return errors.New("coordinator: no --tokens-file to reload")
	}
	t, err := auth.LoadTokensFile(c.cfg.TokensFile)
	if err != nil {
		c.log.Error("tokens file not reloaded: the previous tokens stay in force", "file", c.cfg.TokensFile, "err", err)
		return err
	}
	c.tokens.Store(t)
	c.log.Info("bearer tokens reloaded", "file", c.cfg.TokensFile, "tokens", t.Len())
	return nil
}

// fileStamp is what tells a changed file: its identity, size and mtime.
type fileStamp struct {
	fi os.FileInfo
}

func stampOf(path string) fileStamp {
	fi, _ := os.Stat(path)
	return fileStamp{fi}
}

func (a fileStamp) same(b fileStamp) bool {
	if a.fi == nil || b.fi == nil {
		return a.fi == nil && b.fi == nil
	}
	return os.SameFile(a.fi, b.fi) && a.fi.Size() == b.fi.Size() &&
		a.fi.ModTime().Equal(b.fi.ModTime()) && a.fi.Mode() == b.fi.Mode()
}

// watchTokens starts tokensLoop; SIGHUP is caught from its return on.
func (c *Coordinator) watchTokens() {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	c.goBackground("", func() error { c.tokensLoop(hup); return nil })
}

// tokensLoop reloads the tokens file on SIGHUP and when it changes (checked
// every tokensPoll: a rename over it, as editors and config managers do,
// counts), until Close.
func (c *Coordinator) tokensLoop(hup chan os.Signal) {
	defer signal.Stop(hup)
	every := c.opts.tokensPoll
	if every <= 0 {
		every = defaultTokensPoll
	}
	last := stampOf(c.cfg.TokensFile)
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-hup:
			last = stampOf(c.cfg.TokensFile)
			_ = c.ReloadTokens()
		case <-t.C:
			if now := stampOf(c.cfg.TokensFile); !now.same(last) {
				last = now
				_ = c.ReloadTokens()
			}
			t.Reset(every)
		}
	}
}
