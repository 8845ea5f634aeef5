package coordinator

import (
	"context"
	"fmt"
	"strings"

	"github.com/fusebox-dev/fusebox/sharedstate/cliflag"
	"github.com/fusebox-dev/fusebox/sharedstate/store"
	"github.com/fusebox-dev/fusebox/sharedstate/store/embedded"
)

// startEtcd starts the embedded etcd (or connects to the external one) and
// builds the store.
func (c *Coordinator) startEtcd(ctx context.Context) error {
	var cli *store.Client
	if len(c.cfg.Etcd) == 0 {
		ec := c.cfg.embeddedConfig()
		for _, f := range c.opts.embedded {
			f(&ec)
		}
		if ec.Logger == nil {
			lg, err := store.NewEtcdLogger(ec.LogLevel, &c.closing)
			if err != nil {
				return err
			}
			ec.Logger = lg
		}
		srv, err := embedded.Start(ctx, ec)
		if err != nil {
			return cliflag.AsListenError("embedded-etcd-url", c.cfg.EmbeddedEtcdURL, fmt.Errorf("coordinator: embedded etcd: %w", err))
		}
		c.etcdSrv = srv
		c.endpoint = srv.Endpoints()
		c.log.Info("embedded etcd ready: start agents with --etcd "+strings.Join(c.endpoint, ","),
			"etcd", strings.Join(c.endpoint, ","), "data_dir", ec.Dir)
		cc, err := srv.ClientConfigTLS()
		if err != nil {
			return fmt.Errorf("coordinator: %w", err)
		}
		if cli, err = store.DialConfig(ctx, cc); err != nil {
			return fmt.Errorf("coordinator: %w", err)
		}
	} else {
		o := c.cfg.etcdOptions()
		var err error
		if o.Logger, err = store.NewEtcdLogger("error", &c.closing); err != nil {
			return err
		}
		if cli, err = store.Dial(ctx, o); err != nil {
			return fmt.Errorf("coordinator: %w", err)
		}
		c.endpoint = append([]string(nil), c.cfg.Etcd...)
	}
	c.cli = cli
	st, err := store.New(store.Config{Client: cli, Prefix: c.cfg.EtcdPrefix, Clock: c.clock})
	if err != nil {
		return err
	}
	c.store = st
	return nil
}
