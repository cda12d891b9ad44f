package jetstream

import (
	"errors"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/mmmq/mmmq/modules/config"
)

// Config is the plugin's configuration section, key "mmmq.jetstream"
// (environment: MMMQ_JETSTREAM_SERVERS, MMMQ_JETSTREAM_REPLICAS, …,
// MMMQ_JETSTREAM_TLS_CA_FILE). It is read only when
// mmmq.broker.storage.backend is "jetstream".
type Config struct {
	// Servers are the NATS servers to connect to: nats:// (or tls://)
	// URLs separated by commas, as the NATS client takes them; the client
	// picks one and fails over to the others. A string rather than a list
	// so that MMMQ_JETSTREAM_SERVERS can set it (section lists are
	// file-only). Default "nats://127.0.0.1:4222".
	Servers string `koanf:"servers"`
	// Replicas is how many servers of the JetStream cluster store each
	// topic's stream, 1 to 5 (JetStream's own bound); an append is
	// acknowledged once a majority of them stored it. It applies when a
	// stream is created; existing streams keep theirs. Default 3.
	Replicas int64 `koanf:"replicas"`
	// StreamPrefix starts the name of every stream (and key-value bucket)
	// this broker makes, "<prefix>_<encoded topic>" (see StreamName), and
	// its subjects "<prefix>.t.<topic>": 1 to 32 characters of
	// [A-Za-z0-9_-]. Brokers that share a cluster and a prefix share the
	// topics. Default "mmmq".
	StreamPrefix string `koanf:"stream-prefix"`
	// CredsFile is a NATS credentials file (JWT and NKey seed); "" = none.
	CredsFile string `koanf:"creds-file"`
	// User and Password authenticate with a user name and password;
	// "" = none.
	User     string `koanf:"user"`
	Password string `koanf:"password"`
	// Token authenticates with a token; "" = none.
	Token string `koanf:"token"`
	// TLS is the client side of TLS to the NATS servers.
	TLS TLSConfig `koanf:"tls"`
	// ConnectTimeout bounds the first connection at startup (the broker
	// refuses to start when no server answers in time), 100ms to 5m; the
	// first JetStream requests are then retried for up to 30 s, or this
	// long when longer, while the cluster has no leader for them. Default
	// 5s.
	ConnectTimeout time.Duration `koanf:"connect-timeout"`
	// RequestTimeout bounds each JetStream request (publish ack, message
	// get, stream info), 100ms to 5m. Default 5s.
	RequestTimeout time.Duration `koanf:"request-timeout"`
	// LeaseTimeout is how long a consumer-group or dispatcher lease lasts
	// without renewal, 1s to 5m. Default 10s.
	LeaseTimeout time.Duration `koanf:"lease-timeout"`
}

// TLSConfig is mmmq.jetstream.tls: PEM files; all "" = the system roots
// and no client certificate (TLS is still used for tls:// URLs).
type TLSConfig struct {
	// CAFile is the CA bundle the servers' certificates are checked
	// against; "" = the system roots. Default "".
	CAFile string `koanf:"ca-file"`
	// CertFile and KeyFile are a client certificate and its key, for
	// servers that verify clients; both or neither. Default "".
	CertFile string `koanf:"cert-file"`
	KeyFile  string `koanf:"key-file"`
}

// Defaults of the section.
const (
	DefaultServers        = "nats://127.0.0.1:4222"
	DefaultReplicas       = 3
	DefaultStreamPrefix   = "mmmq"
	DefaultConnectTimeout = 5 * time.Second
	DefaultRequestTimeout = 5 * time.Second
	DefaultLeaseTimeout   = 10 * time.Second
)

// prefixRE is the allowed mmmq.jetstream.stream-prefix: characters valid in
// a stream name, a key-value bucket name and a subject token alike.
var prefixRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,32}$`)

// ConfigSection registers Config under mmmq.jetstream. Module includes it.
// Errors name the key: mmmq.jetstream.servers (empty, or a URL that is not
// nats://, tls://, ws:// or wss:// with a host), .replicas (outside 1..5),
// .stream-prefix (see prefixRE), .tls.cert-file and .tls.key-file (one
// without the other), .connect-timeout and .request-timeout (outside
// 100ms..5m), .lease-timeout (outside 1s..5m), .password (without a user).
var ConfigSection = config.NewSection("jetstream", Config{
	Servers:        DefaultServers,
	Replicas:       DefaultReplicas,
	StreamPrefix:   DefaultStreamPrefix,
	ConnectTimeout: DefaultConnectTimeout,
	RequestTimeout: DefaultRequestTimeout,
	LeaseTimeout:   DefaultLeaseTimeout,
}, validate)

func validate(c *Config) error {
	errs := []error{
		checkServers(c.Servers),
		config.CheckIntRange("mmmq.jetstream.replicas", c.Replicas, 1, 5),
		checkDuration("mmmq.jetstream.connect-timeout", c.ConnectTimeout, 100*time.Millisecond, 5*time.Minute),
		checkDuration("mmmq.jetstream.request-timeout", c.RequestTimeout, 100*time.Millisecond, 5*time.Minute),
		checkDuration("mmmq.jetstream.lease-timeout", c.LeaseTimeout, time.Second, 5*time.Minute),
	}
	if !prefixRE.MatchString(c.StreamPrefix) {
		errs = append(errs, config.InvalidValue("mmmq.jetstream.stream-prefix", "must be 1-32 characters of A-Z a-z 0-9 _ -; got %q", c.StreamPrefix))
	}
	if (c.TLS.CertFile == "") != (c.TLS.KeyFile == "") {
		key := "mmmq.jetstream.tls.key-file"
		if c.TLS.CertFile == "" {
			key = "mmmq.jetstream.tls.cert-file"
		}
		errs = append(errs, config.InvalidValue(key, "cert-file and key-file go together; set both or neither"))
	}
	if c.Password != "" && c.User == "" {
		errs = append(errs, config.InvalidValue("mmmq.jetstream.password", "needs mmmq.jetstream.user"))
	}
	return errors.Join(errs...)
}

// checkServers checks the comma-separated server URLs.
func checkServers(s string) error {
	const key = "mmmq.jetstream.servers"
	if strings.TrimSpace(s) == "" {
		return config.InvalidValue(key, "must name at least one server, e.g. %q", DefaultServers)
	}
	for _, raw := range strings.Split(s, ",") {
		u, err := url.Parse(strings.TrimSpace(raw))
		if err != nil {
			return config.InvalidValue(key, "%q: %v", raw, err)
		}
		switch {
		case u.Scheme != "nats" && u.Scheme != "tls" && u.Scheme != "ws" && u.Scheme != "wss":
			return config.InvalidValue(key, "%q: the scheme must be nats://, tls://, ws:// or wss://", raw)
		case u.Host == "":
			return config.InvalidValue(key, "%q has no host", raw)
		}
	}
	return nil
}

func checkDuration(key string, d, lo, hi time.Duration) error {
	if d < lo || d > hi {
		return config.InvalidValue(key, "must be between %s and %s; got %s", lo, hi, d)
	}
	return nil
}

// redactedServers is Servers with the password of any URL replaced by
// "xxxxx" (url.URL.Redacted), for errors and logs.
func (c Config) redactedServers() string {
	parts := strings.Split(c.Servers, ",")
	for i, raw := range parts {
		if u, err := url.Parse(strings.TrimSpace(raw)); err == nil {
			parts[i] = u.Redacted()
		}
	}
	return strings.Join(parts, ",")
}
