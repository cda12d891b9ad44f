package cli

import (
	"testing"

	"go.uber.org/fx"
)

func TestOneLine(t *testing.T) {
	a := fx.New(fx.Provide(func() (int, error) { return 0, errTest("first\nsecond") }), fx.Invoke(func(int) {}), fx.NopLogger)
	if got := OneLine(a.Err()); got != "first second" {
		t.Errorf("OneLine = %q, want the root cause on one line", got)
	}
}

type errTest string

func (e errTest) Error() string { return string(e) }
