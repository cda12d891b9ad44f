package admin

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/mmmq/mmmq/modules/config"
)

// Config configures the admin API (key "mmmq.admin", the section
// ConfigSection).
type Config struct {
	// AllowedHosts limits where dispatchers created through the admin API
	// may push: each entry is a pattern of the consumer's host name or IP
	// address, or of "host:port", compared label by label (the parts
	// between dots) with "*" matching any run of characters within one
	// label ("*.svc.cluster.local", "10.0.0.*", "billing:8081"); an IPv6
	// address is given as it is, or as "[addr]:port". A port is 1..65535
	// or "*". Empty (the default) allows any host. File only.
	AllowedHosts []string `koanf:"allowed-hosts"`
}

// ConfigSection is the section mmmq.admin, registered by Module. An entry
// that could never match (a URL, a path, an empty label, a bad port) is
// refused, naming it.
var ConfigSection = config.NewSection("admin", Config{}, validateConfig)

func validateConfig(c *Config) error {
	var errs []error
	for i, p := range c.AllowedHosts {
		if err := checkHostPattern(p); err != nil {
			errs = append(errs, config.InvalidValue(fmt.Sprintf("mmmq.admin.allowed-hosts[%d]", i),
				`must be a host pattern, "host" or "host:port" ("*.svc.cluster.local", "10.0.0.*", "billing:8081"; no scheme or path): %v; got %q`, err, p))
		}
	}
	return errors.Join(errs...)
}

// checkHostPattern says why p can never match a consumer's host (see
// hostMatches), nil when it can.
func checkHostPattern(p string) error {
	if strings.HasPrefix(p, "[") { // [IPv6]:port
		addr, port, ok := strings.Cut(strings.TrimPrefix(p, "["), "]:")
		if !ok || net.ParseIP(addr) == nil {
			return errors.New(`an IPv6 address with a port is "[addr]:port"`)
		}
		return checkPort(port)
	}
	if net.ParseIP(p) != nil && strings.Contains(p, ":") {
		return nil // IPv6 without a port
	}
	if strings.ContainsAny(p, "/?#@[] \t") {
		return errors.New("it holds a scheme, path, query or space")
	}
	host, port, withPort := strings.Cut(p, ":")
	if withPort {
		if err := checkPort(port); err != nil {
			return err
		}
	}
	for _, label := range strings.Split(host, ".") {
		if label == "" {
			return errors.New("it has an empty label")
		}
	}
	return nil
}

func checkPort(port string) error {
	if port == "*" {
		return nil
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("port %q is not 1..65535 or *", port)
	}
	return nil
}
