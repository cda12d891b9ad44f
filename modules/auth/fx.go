package auth

import (
	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/contract"
)

// Params is what the module takes from the graph.
type Params struct {
	fx.In

	// Auth is mmmq.auth (ConfigSection, registered by Module).
	Auth Config
	// Config is what Reload re-loads mmmq.auth from (Config.Reload).
	Config *config.Config `optional:"true"`
	Log    *zap.Logger
}

// Result is what the module provides.
type Result struct {
	fx.Out

	Store         *Store
	Authenticator contract.Authenticator
	Limiter       contract.Limiter
	Reloader      contract.Reloader `group:"reloaders"`
}

// Module provides mmmq.auth to the application:
//
//	provides *Store, contract.Authenticator (the Store), contract.Limiter,
//	         and the Store as a member of the reloaders value group
//	registers ConfigSection (mmmq.auth; config.ProvideSection)
//	needs    *config.Config (config.Module), *zap.Logger
//
// On SIGHUP (the reload module) the Store re-loads the configuration file
// as at startup and applies its mmmq.auth (other keys need a restart),
// and re-reads every token file; it also polls the token files every
// PollInterval while the application runs. An unreadable token file at
// startup fails the application, naming its key.
var Module = fx.Module("auth",
	config.ProvideSection(ConfigSection),
	fx.Provide(provide),
	fx.Invoke(register),
)

func provide(p Params) (Result, error) {
	var src Source
	if p.Config != nil {
		cfg := p.Config
		src = func() (Config, bool, error) {
			fresh, ok, err := cfg.Reload()
			if err != nil || !ok {
				return Config{}, ok, err
			}
			return config.SectionValue(fresh, ConfigSection), true, nil
		}
	}
	s, err := New(p.Auth, src, p.Log.Named("auth"))
	if err != nil {
		return Result{}, err
	}
	return Result{Store: s, Authenticator: s, Limiter: NewLimiter(), Reloader: s}, nil
}

func register(lc fx.Lifecycle, s *Store) { lc.Append(fx.StartStopHook(s.Start, s.Stop)) }
