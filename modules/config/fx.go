package config

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"go.uber.org/fx"

	"github.com/mmmq/mmmq/modules/contract"
)

// Module provides *Config and, through [ModuleSections], each module's
// core section as its own value (ServerConfig, LoggingConfig,
// NodeConfig), so a module's constructor takes only the
// section(s) it reads; a module's own section is provided by its
// [ProvideSection]. It also provides this broker's *contract.Instance
// (a random instance id made when the application is built, and
// server.port), which the dispatchers' pushes carry and the HTTP API
// checks publishes against. *Config is built
// from the LoadOptions value in the container, which the application
// supplies with one of (never both; Fx then fails with "already provided"):
//
//	fx.Supply(config.LoadOptions{Path: flagPath, PathExplicit: set}) // Load inside the app
//	config.Supply(cfg)                                               // a Config built before (tests; mmmq serve, to report a bad key on one line)
//
// With neither, it loads as Load(LoadOptions{}) does: DefaultPath (or
// $MMMQ_CONFIG) if present, then the process environment. When it loads, the
// sections registered with [ProvideSection] are added to
// LoadOptions.Sections; a supplied Config is used as it is (a section it
// does not hold reads as its defaults, see [SectionValue]). A supplied
// Config that Load built with sections must agree with the application: every section a
// module registers was given to Load, and a section given to Load that no
// module of the application reads holds only its defaults (else the
// application fails naming the key: it was set for a module the binary
// dropped).
var Module = fx.Module("config", fx.Provide(provide, provideSections, newInstance))

// newInstance is this broker's instance: a fresh id, and server.port as a
// listen port (the HTTP API adds the port it bound when that is 0).
func newInstance(s ServerConfig) *contract.Instance { return contract.NewInstance(s.Port) }

// sectionsGroup is the value group of the sections registered by ProvideSection.
const sectionsGroup = `group:"config.sections"`

type params struct {
	fx.In

	Options  LoadOptions `optional:"true"`
	Sections []Section   `group:"config.sections"`
}

func provide(p params) (*Config, error) {
	if cfg := p.Options.supplied; cfg != nil {
		if err := cfg.checkSections(p.Sections); err != nil {
			return nil, err
		}
		return cfg, nil
	}
	opts := p.Options
	opts.Sections = append(slices.Clone(opts.Sections), p.Sections...)
	return Load(opts)
}

// ModuleSections is what Module provides besides *Config: one value per
// module section, copied from the *Config. A module's Fx constructor takes
// the section(s) it reads instead of *Config.
type ModuleSections struct {
	fx.Out

	// Server is the "server" section (httpapi; groups' long-poll deadline).
	Server ServerConfig
	// Logging is the "logging" section (logging).
	Logging LoggingConfig
	// Node is this broker's identity ("mmmq.node-name"; dispatcher).
	Node NodeConfig
}

// NodeConfig names this broker (the key "mmmq.node-name").
type NodeConfig struct {
	// Name is mmmq.node-name; "" means the host name.
	Name string
}

// SectionsOf returns cfg's module sections, the lists copied.
func SectionsOf(cfg *Config) ModuleSections {
	return ModuleSections{
		Server:  cfg.Server,
		Logging: cfg.Logging,
		Node:    NodeConfig{Name: cfg.MMMQ.NodeName},
	}
}

func provideSections(cfg *Config) ModuleSections { return SectionsOf(cfg) }

// ProvideSection returns an option that registers sec with Module (through
// a value group, so that a Module that loads the configuration reads sec's
// keys) and provides sec's value of type T (see [SectionValue]) to the
// graph. The module that reads sec includes it (dispatcher.Module for
// mmmq.broker.dispatch, a plugin's module for its own); app.Main and
// app.Sections, which load before building the graph, find it there
// ([FindSections]), so a binary that calls Load itself passes
// app.Sections(its options) in LoadOptions.Sections.
// Two ProvideSection of one T fail with Fx's "already provided".
func ProvideSection[T any](sec *SectionOf[T]) fx.Option {
	return fx.Options(
		fx.Provide(fx.Annotate(func() Section { return sec }, fx.ResultTags(sectionsGroup))),
		fx.Provide(func(cfg *Config) T { return SectionValue(cfg, sec) }),
	)
}

// Supply returns an option that makes Module provide a copy of cfg instead
// of loading: the copy is normalized (see [Config.Normalize]) and
// validated now, plugin sections included; an invalid cfg makes the
// application fail with the validation error. It supplies a LoadOptions
// value, so it cannot be combined with fx.Supply(LoadOptions{...}). Module
// must still be part of the app.
func Supply(cfg *Config) fx.Option {
	if cfg == nil {
		return fx.Error(errors.New("config: Supply(nil)"))
	}
	c := *cfg
	c.Warnings = slices.Clone(cfg.Warnings)
	c.IgnoredVars = slices.Clone(cfg.IgnoredVars)
	c.sections = maps.Clone(cfg.sections)
	c.Normalize()
	if err := c.Validate(); err != nil {
		return fx.Error(err)
	}
	return fx.Supply(LoadOptions{supplied: &c})
}

// checkSections compares the sections of a Config built by Load with those
// registered in the application (registered): a registered section the
// loader was not given would silently read its defaults, and a loaded
// section with a non-default value that no module reads would be silently
// ignored. Only a Config that Load built with sections is checked (not one
// built in code from Default, as tests do).
func (c *Config) checkSections(registered []Section) error {
	loaded := false
	for _, sv := range c.sections {
		loaded = loaded || sv.loaded
	}
	if !loaded {
		return nil
	}
	reg := map[string]bool{}
	registered = slices.SortedFunc(slices.Values(registered), func(a, b Section) int { return strings.Compare(a.Name(), b.Name()) })
	for _, s := range registered {
		reg[s.Name()] = true
		if _, ok := c.sections[s.Name()]; !ok {
			return fmt.Errorf("config: %s is read by a module of this application, but the configuration was loaded without that section: add it to config.LoadOptions.Sections (app.Sections, or config.FindSections, of the application's options lists every section its modules register)", s.Key())
		}
	}
	for _, name := range slices.Sorted(maps.Keys(c.sections)) {
		sv := c.sections[name]
		if reg[name] {
			continue
		}
		cur := map[string]any{}
		collectDefaults(reflect.ValueOf(sv.value), sv.sec.Key()+".", cur)
		def := sv.sec.Defaults()
		for _, key := range slices.Sorted(maps.Keys(def)) {
			if !reflect.DeepEqual(cur[key], def[key]) {
				return &KeyError{Key: key, Problem: fmt.Sprintf("is set, but no module of this application reads %s (was its module left out, e.g. with app.Without?)", sv.sec.Key()), kind: ErrPluginMissing}
			}
		}
	}
	return nil
}
