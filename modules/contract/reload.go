package contract

import (
	"context"

	"go.uber.org/fx"
)

// Reloader is something that re-reads its files on request: the token list
// and token files (auth), TLS certificates (httpapi, lineproto). The reload
// module calls every Reloader on SIGHUP. Reload must not drop connections
// or requests in flight; on error the old state stays in force and the
// error is logged.
type Reloader interface {
	// Name says what is reloaded, for logs ("auth tokens", "http tls").
	Name() string
	Reload(ctx context.Context) error
}

// ReloaderTag is the value group of Reloaders.
const ReloaderTag = `group:"reloaders"`

// ProvideReloader registers ctor, a constructor whose result implements
// Reloader, as a member of the reloaders value group.
func ProvideReloader(ctor any) fx.Option {
	return fx.Provide(fx.Annotate(ctor, fx.As(new(Reloader)), fx.ResultTags(ReloaderTag)))
}
