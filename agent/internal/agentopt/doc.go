// Package agentopt holds what agent.New takes besides its Config: the
// optional knobs that package agent's With… functions set, and the hooks
// of a simulated agent (Sim), which nothing but the lab sets.
//
// agent.Option is a function over Options. Go lets a package under
// internal/ be imported only from below the folder holding internal/ (by
// import path, across modules): here package agent and the lab module
// (agent/lab, import path …/agent/lab). So only they can write an
// agent.Option that sets a hook, and package agent exports nothing that
// exists for simulations alone.
//
//	var in agentopt.Inside
//	a, err := agent.New(cfg, agentopt.WithSim(agentopt.Sim{
//		Transport:    tr,       // an agent/lab/simnet transport
//		Peers:        registry, // the fleet's gossip addresses
//		InProcessAPI: true,     // no socket: clients call in.API
//		Attach:       func(i agentopt.Inside) { in = i },
//	}))
package agentopt
