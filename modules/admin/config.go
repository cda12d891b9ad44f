package admin

import "github.com/mmmq/mmmq/modules/config"

// Config configures the admin API (key "mmmq.admin", the section
// ConfigSection).
type Config struct {
	// AllowedHosts limits where dispatchers created through the admin API
	// may push: each entry is a pattern of the consumer's host name or IP
	// address, or of "host:port", compared label by label (the parts
	// between dots) with "*" matching any run of characters within one
	// label ("*.svc.cluster.local", "10.0.0.*", "billing:8081"). Empty
	// (the default) allows any host. File only.
	AllowedHosts []string `koanf:"allowed-hosts"`
}

// ConfigSection is the section mmmq.admin, registered by Module.
var ConfigSection = config.NewSection("admin", Config{}, nil)
