package storage

import (
	"go.uber.org/fx"

	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// Module provides the filesystem used by all storage code: vfs.OS{}. It is
// meant to be replaced in tests with fx.Decorate or fx.Replace, e.g.
// fx.Replace(fx.Annotate(vfs.NewMem(), fx.As(new(vfs.FS)))). Logs are opened
// by the topic registry (modules/topicqueue), which owns them.
var Module = fx.Module("storage",
	fx.Provide(func() vfs.FS { return vfs.OS{} }),
)
