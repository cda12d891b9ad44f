package config

import (
	"errors"
	"fmt"
)

// Sentinels wrapped by every [*KeyError].
var (
	// ErrUnknownKey marks a file key or MMMQ_ environment variable that names
	// no configuration key.
	ErrUnknownKey = errors.New("config: unknown key")
	// ErrInvalidValue marks a value outside what its key allows.
	ErrInvalidValue = errors.New("config: invalid value")
	// ErrPluginMissing marks a key of a stock plugin the binary does not
	// contain, set to a value other than its documented default (see
	// [StockPluginKeys]). It wraps [ErrUnknownKey].
	ErrPluginMissing = fmt.Errorf("%w of a plugin this binary does not contain", ErrUnknownKey)
)

// KeyError is one configuration problem tied to a key. Load and Validate
// return one or more of them joined with errors.Join; it unwraps to
// [ErrUnknownKey], [ErrInvalidValue] or [ErrPluginMissing].
type KeyError struct {
	// Key is the full key, e.g. "server.port" or
	// "mmmq.broker.dispatchers[0].host"; empty for an unknown variable.
	Key string
	// Var is the environment variable that supplied the value, if any.
	Var string
	// Problem says what is wrong and what is allowed; for an unknown key,
	// empty or a hint (a key under a section that is not loaded).
	Problem string

	kind error
}

func unknownKey(key string) *KeyError {
	return &KeyError{Key: key, kind: ErrUnknownKey}
}

func unknownVar(name, problem string) *KeyError {
	return &KeyError{Var: name, Problem: problem, kind: ErrUnknownKey}
}

func invalid(key, format string, args ...any) *KeyError {
	return &KeyError{Key: key, Problem: fmt.Sprintf(format, args...), kind: ErrInvalidValue}
}

// Error returns e.g. `config: unknown key "mmmq.broker.segmnt.max-bytes"`,
// `config: unknown key "mmmq.orders.order-host": no section mmmq.orders is loaded; ...`,
// `config: unknown environment variable MMMQ_FOO`,
// `config: server.port: must be 1..65535, got 0 (from MMMQ_SERVER_PORT)` or
// `config: mmmq.profiling.addr: is read by plugin ..., which this binary does not contain; ...`.
func (e *KeyError) Error() string {
	switch {
	case e.kind == ErrUnknownKey && e.Key == "":
		msg := "config: unknown environment variable " + e.Var
		if e.Problem != "" {
			msg += ": " + e.Problem
		}
		return msg
	case e.kind == ErrUnknownKey && e.Problem != "":
		return fmt.Sprintf("config: unknown key %q: %s", e.Key, e.Problem)
	case e.kind == ErrUnknownKey:
		return fmt.Sprintf("config: unknown key %q", e.Key)
	}
	msg := "config: " + e.Key + ": " + e.Problem
	if e.Var != "" {
		msg += " (from " + e.Var + ")"
	}
	return msg
}

// Unwrap returns [ErrUnknownKey], [ErrInvalidValue] or [ErrPluginMissing].
func (e *KeyError) Unwrap() error { return e.kind }
