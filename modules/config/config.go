package config

import "time"

// DefaultPath is the YAML file Load reads when no path is given and
// $MMMQ_CONFIG is unset. It is relative to the working directory; a missing
// DefaultPath is not an error.
const DefaultPath = "configs/mmmq.yaml"

// Config is the whole mmmq configuration. The koanf tags are the YAML keys;
// see configs/mmmq.yaml for the documented defaults. Plugin sections
// (mmmq.<name>, see [Section]) are held inside it, unexported; read them with
// [SectionValue].
type Config struct {
	// Server is the HTTP listener (key "server").
	Server ServerConfig `koanf:"server"`
	// Logging is the zap logger setup (key "logging").
	Logging LoggingConfig `koanf:"logging"`
	// MMMQ is the broker (key "mmmq"); plugin sections under it are not
	// fields (see [Section]).
	MMMQ MMMQConfig `koanf:"mmmq"`
	// Warnings are the problems Load found that do not stop startup: keys of
	// a stock plugin this binary does not contain, set to their documented
	// default (see [StockPluginKeys]). Not a key; nil from Default. The
	// caller logs them (app.New does, through zap).
	Warnings []Warning `koanf:"-"`
	// IgnoredVars are the MMMQ_ environment variables Load skipped because
	// they are Kubernetes service links (see the package documentation,
	// "Kubernetes service links"), by name, sorted; nil when none. Not a
	// key; nil from Default. The caller may log them (mmmq serve logs one
	// debug line each); the package prints nothing.
	IgnoredVars []string `koanf:"-"`

	// sections holds the decoded plugin sections by name: exactly those
	// given to Load; nil for a Config that Load built without sections or
	// that Default built.
	sections map[string]sectionValue

	// loadedWith are the options of the Load that built the Config (nil
	// for Default or a hand-built one); see [Config.Reload].
	loadedWith *LoadOptions
	// set are the keys the file or the environment gave (see View.IsSet);
	// nil for a Config built in code.
	set map[string]bool
}

// ServerConfig configures the HTTP server (key "server").
type ServerConfig struct {
	// Port is the TCP port to listen on, 0..65535 (0 picks a free port, for
	// tests). Default 8080.
	Port int `koanf:"port"`
	// Host is the address to bind; "" binds all interfaces. Default "".
	Host string `koanf:"host"`
	// ReadHeaderTimeout bounds reading the request headers (http.Server). Default 5s.
	ReadHeaderTimeout time.Duration `koanf:"read-header-timeout"`
	// ReadTimeout bounds reading a whole request including the body. Default 30s.
	ReadTimeout time.Duration `koanf:"read-timeout"`
	// WriteTimeout bounds writing a response (includes the fsync wait of a
	// durable publish). Default 30s.
	WriteTimeout time.Duration `koanf:"write-timeout"`
	// IdleTimeout is how long a keep-alive connection may sit idle. Default 120s.
	IdleTimeout time.Duration `koanf:"idle-timeout"`
	// ShutdownTimeout bounds the graceful drain of in-flight requests on
	// stop; idle connections and connections that have sent no request
	// are closed at once, and a publish still receiving its body 1 s after
	// the stop began is cut (nothing of it stored). Default 30s.
	ShutdownTimeout time.Duration `koanf:"shutdown-timeout"`
	// MaxBodyBytes is the largest HTTP request body accepted, batches
	// included, in bytes; larger bodies get 413. At least 1024. Default 4194304 (4 MiB).
	MaxBodyBytes int64 `koanf:"max-body-bytes"`
	// MaxConnections caps simultaneous HTTP connections; one over it is
	// answered 503 UNAVAILABLE with Retry-After: 1 and closed. Default 0 =
	// automatic: a quarter of the open-file limit, at least 16 (the segment
	// cache takes at most half, so clients cannot starve storage).
	MaxConnections int `koanf:"max-connections"`
	// TLS serves the HTTP API, and the line protocol when it listens
	// (mmmq.lineproto.addr), over TLS (key "server.tls"). Off by default.
	TLS ServerTLSConfig `koanf:"tls"`
}

// ClientAuth says whether TLS clients must present a certificate (key
// "server.tls.client-auth").
type ClientAuth string

// Values accepted by server.tls.client-auth.
const (
	// ClientAuthNone asks for no client certificate (the default).
	ClientAuthNone ClientAuth = "none"
	// ClientAuthVerifyIfGiven asks for one; a client without one is
	// accepted, one with a certificate that does not verify against
	// server.tls.client-ca-file is refused in the handshake.
	ClientAuthVerifyIfGiven ClientAuth = "verify-if-given"
	// ClientAuthRequire refuses, in the handshake, a client without a
	// certificate that verifies against server.tls.client-ca-file.
	ClientAuthRequire ClientAuth = "require"
)

// ServerTLSConfig turns on TLS for the broker's listeners (key
// "server.tls"): the HTTP API and the line protocol share these
// certificates. TLS is on when CertFile is set; the files are read at
// startup (an unreadable or invalid file stops startup, naming its key) and
// again on SIGHUP, without a restart and without dropping connections.
// TLS 1.2 is the minimum version.
type ServerTLSConfig struct {
	// CertFile is the server certificate chain, PEM (leaf first); "" =
	// plain TCP. Needs KeyFile. Default "".
	CertFile string `koanf:"cert-file"`
	// KeyFile is the private key of CertFile, PEM. Default "".
	KeyFile string `koanf:"key-file"`
	// ClientCAFile holds the PEM certificates of the CAs client
	// certificates are verified against. Needs CertFile and a ClientAuth
	// other than "none" (a CA file that would be ignored is refused).
	// Default "".
	ClientCAFile string `koanf:"client-ca-file"`
	// ClientAuth is "none", "verify-if-given" or "require"; the last two
	// need ClientCAFile. The verified certificate's subject common name is
	// the client's principal. Default "none".
	ClientAuth ClientAuth `koanf:"client-auth"`
}

// Enabled reports whether TLS is on (CertFile is set).
func (t ServerTLSConfig) Enabled() bool { return t.CertFile != "" }

// LogFormat selects the log encoder (key "logging.format").
type LogFormat string

// Log formats accepted by logging.format.
const (
	// FormatJSON writes one JSON object per line (production).
	FormatJSON LogFormat = "json"
	// FormatConsole writes human-readable lines with colored levels.
	FormatConsole LogFormat = "console"
)

// LoggingConfig configures the logger (key "logging").
type LoggingConfig struct {
	// Level is the minimum level logged, any name zapcore.ParseLevel accepts
	// (debug, info, warn, error, dpanic, panic, fatal). Default "info".
	Level string `koanf:"level"`
	// Format is the encoder: "json" or "console". Default "json".
	Format LogFormat `koanf:"format"`
}

// MMMQConfig holds the broker (key "mmmq"). The other keys under it
// (mmmq.admin of modules/admin, mmmq.auth of modules/auth, mmmq.lineproto,
// mmmq.metrics, mmmq.profiling, or a custom plugin's) are sections
// registered by the modules and plugins that read them, see [Section].
type MMMQConfig struct {
	// Broker is the core broker (key "mmmq.broker").
	Broker BrokerConfig `koanf:"broker"`
	// NodeName names this broker in CloudEvents pushes (ce-source
	// "mmmq://<node-name>/<topic>"); "" means the host name. Default "".
	NodeName string `koanf:"node-name"`
}

// BrokerConfig is the mapping "mmmq.broker". It holds no core key: every
// key under it belongs to the section of the module that reads it (see
// [Section]): mmmq.broker.storage, .segment, .memory and .dedup of
// modules/topicqueue, .dispatch of modules/dispatcher, .dispatchers (a list
// section) of plugins/configdispatchers, .groups of modules/groups,
// .retention of modules/retention.
type BrokerConfig struct{}

// Default returns the built-in defaults of the core keys, the one place
// they are written (plugin sections carry theirs, see [NewSection]); it
// validates. Each call returns a new value.
func Default() *Config {
	return &Config{
		Server: ServerConfig{
			Port:              8080,
			Host:              "",
			ReadHeaderTimeout: 5 * time.Second,
			ReadTimeout:       30 * time.Second,
			WriteTimeout:      30 * time.Second,
			IdleTimeout:       120 * time.Second,
			ShutdownTimeout:   30 * time.Second,
			MaxBodyBytes:      4 << 20,
			TLS:               ServerTLSConfig{ClientAuth: ClientAuthNone},
		},
		Logging: LoggingConfig{
			Level:  "info",
			Format: FormatJSON,
		},
	}
}

// Normalize fills, in place, what a list section takes from its element
// defaults and from other keys (see [NewListSection] and
// [SectionOf.WithInherited]: a dispatcher of mmmq.broker.dispatchers
// without a path takes mmmq.broker.dispatch.path). Load calls it; call it
// on a hand-built Config.
func (c *Config) Normalize() {
	w := View{c: c}
	for name, sv := range c.sections {
		sv.value = sv.sec.normalize(sv.value, w)
		c.sections[name] = sv
	}
}
