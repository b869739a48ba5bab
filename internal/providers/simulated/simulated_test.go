package simulated

import (
	"testing"

	"github.com/crosscheck/crosscheck/internal/providers"
	"github.com/crosscheck/crosscheck/internal/providers/contract"
)

type fixture struct{}

func (fixture) Provider(*testing.T) providers.Provider { return New("provider_a", 0) }
func (fixture) Play(...contract.Scenario)              {}
func (fixture) Requests() int                          { return 0 }
func (fixture) Supports(kind string) bool {
	return kind == contract.KindAnswer || kind == contract.KindJSON
}
func (fixture) Citations() bool { return false }

func TestContract(t *testing.T) { contract.Run(t, fixture{}) }
