package simulated

import (
	"context"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/crosscheck/crosscheck/internal/events"
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
func (fixture) Wire() string    { return "" }

func TestContract(t *testing.T) { contract.Run(t, fixture{}) }

// TestAnswerQuotesWholeCharacters: the excerpt of a long prompt the answer
// quotes ends on a character boundary, so a prompt in Japanese or with
// emoji is quoted as itself, not as escaped bytes of a cut character.
func TestAnswerQuotesWholeCharacters(t *testing.T) {
	prompt := strings.Repeat("日本語の質問です。", 10) + strings.Repeat("🙂", 20)
	resp, err := New("provider_a", 0).Complete(context.Background(), &providers.Request{
		Model: "sim-alpha-standard", Purpose: events.StepAnswer,
		Messages: []providers.Message{{Role: providers.RoleUser, Content: prompt}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !utf8.ValidString(resp.Text) || strings.Contains(resp.Text, `\x`) || !strings.Contains(resp.Text, "日本語の質問です。日本語") {
		t.Fatalf("answer %q", resp.Text)
	}
}
