package config

import (
	"errors"

	"go.uber.org/fx"
)

// errSectionsFound ends the throwaway application of FindSections once it
// has read the sections.
var errSectionsFound = errors.New("config: sections found")

// FindSections returns the sections that the modules in opts register with
// [ProvideSection], in no particular order, so that a binary that loads
// the configuration before building the application (app.Main) loads it
// with the sections of the modules it is given, and a plugin module that
// carries its section needs no second registration.
//
// It builds a throwaway Fx application from opts whose first invoke reads
// the sections and ends it: no other invoke runs, no constructor but the
// sections' own is called, no start hook is appended, and Fx logs nothing.
// The error is the one fx.New would report for opts when it fails before
// that first invoke (a module's fx.Error, two providers of one type, ...).
func FindSections(opts ...fx.Option) ([]Section, error) {
	type in struct {
		fx.In
		Sections []Section `group:"config.sections"`
	}
	var found []Section
	a := fx.New(
		// A module of its own, first: Fx runs the invokes of the child
		// modules, in order, before those of the root.
		fx.Module("config.find-sections", fx.Invoke(func(p in) error {
			found = p.Sections
			return errSectionsFound
		})),
		fx.Options(opts...),
		fx.NopLogger, // last: it wins over a WithLogger in opts
	)
	if err := a.Err(); !errors.Is(err, errSectionsFound) {
		if err == nil {
			err = errors.New("config: FindSections: the application did not run its first invoke")
		}
		return nil, err
	}
	return found, nil
}
