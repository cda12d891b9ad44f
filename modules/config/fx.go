package config

import (
	"errors"
	"slices"

	"go.uber.org/fx"
)

// Module provides *Config. It is built from the LoadOptions value in the
// container, which the application supplies with one of (never both; Fx then
// fails with "already provided"):
//
//	fx.Supply(config.LoadOptions{Path: flagPath, PathExplicit: set}) // Load inside the app
//	config.Supply(cfg)                                               // a Config built before (tests; mmmq serve, to report a bad key on one line)
//
// With neither, it loads as Load(LoadOptions{}) does: DefaultPath (or
// $MMMQ_CONFIG) if present, then the process environment.
var Module = fx.Module("config", fx.Provide(provide))

type params struct {
	fx.In

	Options LoadOptions `optional:"true"`
}

func provide(p params) (*Config, error) {
	if cfg := p.Options.supplied; cfg != nil {
		return cfg, nil
	}
	return Load(p.Options)
}

// Supply returns an option that makes Module provide a copy of cfg instead
// of loading: the copy is normalized (see [Config.Normalize]) and
// validated now; an invalid cfg makes the application fail with the
// validation error. It supplies a LoadOptions value, so it cannot be combined
// with fx.Supply(LoadOptions{...}). Module must still be part of the app.
func Supply(cfg *Config) fx.Option {
	if cfg == nil {
		return fx.Error(errors.New("config: Supply(nil)"))
	}
	c := *cfg
	c.MMMQ.Broker.Dispatchers = slices.Clone(cfg.MMMQ.Broker.Dispatchers)
	for i := range c.MMMQ.Broker.Dispatchers {
		d := &c.MMMQ.Broker.Dispatchers[i]
		d.Patterns = slices.Clone(d.Patterns)
	}
	c.Normalize()
	if err := c.Validate(); err != nil {
		return fx.Error(err)
	}
	return fx.Supply(LoadOptions{supplied: &c})
}
