package simulated

import (
	"context"
	"strings"
	"testing"

	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/providers"
)

// A file the modes say the model cannot see (no vision, no text) is named
// in the simulated answer, as a model told so would: the note is not
// silently dropped. A file it reads is quoted, not named as unseen.
func TestAnswerSaysWhichFileItCannotSee(t *testing.T) {
	input := "Attached files:\n\n" +
		"## File: notes.md (file_01NOTES), as extracted text\nThe harbour crane lifts forty tonnes.\n\n" +
		"## File: chart.png (file_01CHART) is not visible to you\nThe image chart.png is attached to the question, but you cannot see it (no text could be taken from it); say so if the question depends on it.\n\n" +
		"## End of attached files\n\n" +
		"What does the harbour crane lift, and what does the chart show?"
	resp, err := New("provider_d", 0).Complete(context.Background(), &providers.Request{
		Model: "sim-delta-standard", Purpose: events.StepAnswer,
		Messages: []providers.Message{{Role: providers.RoleUser, Content: input}},
	})
	if err != nil {
		t.Fatal(err)
	}
	// Without ": ", the line is no topic the steps compare across models.
	if !strings.Contains(resp.Text, "- I cannot see chart.png, which is attached, so") || strings.Contains(resp.Text, "cannot see notes.md") || !strings.Contains(resp.Text, "from notes.md: The harbour crane") {
		t.Fatalf("answer %q", resp.Text)
	}
}
