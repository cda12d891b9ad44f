package config

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type ratioConfig struct {
	Ratio float64 `koanf:"ratio"`
}

var ratioSection = NewSection("ratios", ratioConfig{Ratio: 1}, nil)

// A float key is set from the environment like any other, and a value
// that is not a finite decimal number names the variable.
func TestFloatFromEnvironment(t *testing.T) {
	cfg, err := Load(LoadOptions{Sections: []Section{ratioSection}, Environ: []string{"MMMQ_RATIOS_RATIO=0.25"}})
	require.NoError(t, err)
	assert.Equal(t, 0.25, SectionValue(cfg, ratioSection).Ratio)
	for _, bad := range []string{"half", "NaN", "+Inf"} {
		_, err := Load(LoadOptions{Sections: []Section{ratioSection}, Environ: []string{"MMMQ_RATIOS_RATIO=" + bad}})
		if assert.Error(t, err, bad) {
			assert.Contains(t, err.Error(), "MMMQ_RATIOS_RATIO")
			assert.Contains(t, err.Error(), "decimal number")
		}
	}
}
