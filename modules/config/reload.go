package config

import "slices"

// Reload loads the configuration again with the options of the Load that
// built c (the same file, sections and environment rule; the process
// environment as it is now, unless the options named one): the auth
// module re-reads mmmq.auth from it on SIGHUP. ok is false, with a nil
// Config, when c was not built by Load (Default, or built in code) and so
// has no file to re-read. An invalid file is an error as at startup; the
// caller keeps what it has. Only the caller decides which keys it applies:
// the broker does not restart anything else.
func (c *Config) Reload() (cfg *Config, ok bool, err error) {
	if c == nil || c.loadedWith == nil {
		return nil, false, nil
	}
	opts := *c.loadedWith
	opts.Sections = slices.Clone(opts.Sections)
	cfg, err = Load(opts)
	return cfg, true, err
}
