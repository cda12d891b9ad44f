// Package config loads, validates and provides the mmmq configuration.
//
// # Sources and precedence
//
// A [Config] is built from three layers, each overriding the one before:
//
//  1. built-in defaults ([Default]);
//  2. a YAML file (--config, else $MMMQ_CONFIG, else configs/mmmq.yaml when that
//     file exists; a missing file that was named explicitly is an error);
//  3. environment variables (the rule below).
//
// configs/mmmq.yaml in the repository lists every key with its default and is
// checked by a test to equal [Default] (and, in package app, the stock
// plugins' section defaults). [Default] is the one place the core defaults
// are written; modules used without configuration take their zero-value
// defaults from it.
//
// # Module sections
//
// [Module] provides *Config and, through [ModuleSections], each core
// section as its own value ([ServerConfig], [LoggingConfig],
// [NodeConfig]); a module's own section (topicqueue.StorageConfig,
// dispatcher.Config, auth.Config, the list configdispatchers.Entries, ...) is provided
// by its [ProvideSection]. Each module
// maps its section(s) to its Options with one function (for example
// topicqueue.OptionsFromConfig, dispatcher.OptionsFromConfig).
//
// # Sections
//
// A module or plugin owns the keys under "mmmq.<path>": it declares them
// with [NewSection] (a struct with koanf tags, its defaults, its
// validation, and a cross check against other keys when it needs one,
// [SectionOf.WithCrossCheck]; path may be nested, "broker.dispatch"), or
// with [NewListSection] when the key holds a list of mappings
// (mmmq.broker.dispatchers: element defaults, fields inherited from other
// keys with [SectionOf.WithInherited]), and its module
// includes [ProvideSection], which registers the section with [Module] and
// provides the decoded value. An application that loads the configuration
// before building the Fx graph finds the sections of its modules with
// [FindSections] (app.Sections) and passes them in [LoadOptions].Sections;
// [SectionValue] reads a section out of a *Config. Sections follow the
// same environment rule and the same strictness as the core keys.
//
// The keys of the stock plugins and modules (lineproto, metrics, profiling,
// topicqueue's storage, ...; see [StockPluginKeys]) are known even when the binary lacks the plugin, so one
// configs/mmmq.yaml serves every binary: such a key at its documented
// default only adds a [Warning] to Config.Warnings; another value is an
// error wrapping [ErrPluginMissing], naming the key and the plugin.
//
// # Environment rule
//
// A key K is set by the variable named "MMMQ_" followed by K with a leading
// "mmmq." removed, upper-cased, and every "." and "-" replaced by "_":
//
//	mmmq.broker.storage.root-dir  <-  MMMQ_BROKER_STORAGE_ROOT_DIR
//	server.port                   <-  MMMQ_SERVER_PORT
//	logging.level                 <-  MMMQ_LOGGING_LEVEL
//
// Variables are resolved by matching against the set of known scalar keys, so
// "-" versus "." is never ambiguous. MMMQ_CONFIG is not a key: it names the
// YAML file when no path was given explicitly. MMMQ_SERVER and MMMQ_TOKEN
// (the commands that talk to a running broker) and MMMQ_LAZYFS and
// MMMQ_LONG (the project's crash tests) are skipped. Any other MMMQ_ variable that
// matches no key (core or registered section) is an error naming the
// variable, except a Kubernetes service link (below). The lists of
// mappings (mmmq.broker.dispatchers, a section's such as
// mmmq.broker.retention.topics) cannot be set from the environment; use
// the file.
// Values are parsed as the key's type: integers in base 10, booleans as
// accepted by strconv.ParseBool, durations in Go syntax ("30s", "1m30s").
//
// # Kubernetes service links
//
// Kubernetes sets, in every pod, variables for each Service of the namespace
// (unless the pod spec says enableServiceLinks: false); a Service named
// "mmmq" or "mmmq-<x>" sets MMMQ_ ones:
//
//	MMMQ_[<X>_]SERVICE_HOST=10.0.0.1
//	MMMQ_[<X>_]SERVICE_PORT[_<PORT NAME>]=8080
//	MMMQ_[<X>_]PORT=tcp://10.0.0.1:8080
//	MMMQ_[<X>_]PORT_8080_TCP=tcp://10.0.0.1:8080   (also UDP, SCTP)
//	MMMQ_[<X>_]PORT_8080_TCP_PROTO=tcp | _PORT=8080 | _ADDR=10.0.0.1
//
// Such a variable that names no key, and whose value is of the kind
// Kubernetes sets there (IP address, port number, protocol, or
// <proto>://<IP>:<port>), is skipped and listed in Config.IgnoredVars. The
// same name with another value is an unknown variable, so a typo such as
// MMMQ_SERVER_PROT is still refused. A variable that names a key (a Service
// "mmmq-server" sets MMMQ_SERVER_PORT=tcp://10.0.0.2:8080) and holds a
// <proto>://<IP>:<port> value is refused, naming the Service: set
// enableServiceLinks: false in the pod spec or rename the Service. Plugin
// sections' variables follow the same rules.
//
// # Strictness
//
// Unknown keys in the file fail with the key's full name, e.g.
// config: unknown key "mmmq.broker.segmnt.max-bytes". Invalid values fail
// naming the key and what is allowed (see [Config.Validate]). Problems are
// reported as [*KeyError] values joined with errors.Join, so callers can use
// errors.Is with [ErrUnknownKey] and [ErrInvalidValue], or errors.As.
package config
