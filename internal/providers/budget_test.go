package providers

import (
	"context"
	"strings"
	"testing"
)

// TestBudgetFitsThePromptAndTheOutput: a prompt that leaves too little of
// the window has its last user message cut in the middle (its beginning
// and end kept); max tokens is what the window leaves, never above the
// model's maximum nor the request's; a prompt that fits goes uncut.
func TestBudgetFitsThePromptAndTheOutput(t *testing.T) {
	var got []*Request
	host := ProviderFunc(func(_ context.Context, req *Request) (*Response, error) {
		got = append(got, req)
		return &Response{Text: "ok"}, nil
	})
	b := &Budget{Provider: host, Limits: func(string) (int, int) { return 2000, 512 }, Count: words}
	long := "QUESTION how tall is it " + strings.Repeat("answer words ", 3000) + " LAST"
	req := &Request{Model: "m", MaxOutputTokens: 16384, Messages: []Message{{Role: RoleSystem, Content: "be brief"}, {Role: RoleUser, Content: long}}}
	if _, err := b.Complete(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	r := got[0]
	prompt := b.promptTokens(r)
	if r.ContextWindow != 2000 || r.MaxOutputTokens > 512 || r.MaxOutputTokens < 1 || prompt+r.MaxOutputTokens > 2000 {
		t.Fatalf("window %d, max tokens %d, prompt %d: want it all within 2000 and at most 512 out", r.ContextWindow, r.MaxOutputTokens, prompt)
	}
	if c := r.Messages[1].Content; !strings.HasPrefix(c, "QUESTION how tall") || !strings.HasSuffix(c, "LAST") || !strings.Contains(c, CutMarker) {
		t.Fatalf("the cut message does not keep its ends around the marker: %.80q … %q", c, c[len(c)-40:])
	}
	if req.Messages[1].Content != long || req.MaxOutputTokens != 16384 {
		t.Fatal("the caller's request was modified")
	}

	got = nil
	short := &Request{Model: "m", MaxOutputTokens: 16384, Messages: []Message{{Role: RoleUser, Content: "how tall is it"}}}
	if _, err := b.Complete(context.Background(), short); err != nil {
		t.Fatal(err)
	}
	if r := got[0]; r.MaxOutputTokens != 512 || r.Messages[0].Content != "how tall is it" {
		t.Fatalf("max tokens %d, message %q: want 512 and the message as it was", r.MaxOutputTokens, r.Messages[0].Content)
	}
	b.Limits = func(string) (int, int) { return 1000, 16384 }
	got = nil
	if _, err := b.Complete(context.Background(), &Request{Model: "m", MaxOutputTokens: 300, Messages: []Message{{Role: RoleUser, Content: "how tall is it"}}}); err != nil {
		t.Fatal(err)
	}
	if r := got[0]; r.MaxOutputTokens != 300 {
		t.Fatalf("max tokens %d: want the request's 300", r.MaxOutputTokens)
	}
}

// TestBudgetRetriesAContextOverflowOnceTighter: a host that refuses the
// prompt as too long for its (smaller) window gets it once more, cut to
// the window it named; a second refusal fails the call.
func TestBudgetRetriesAContextOverflowOnceTighter(t *testing.T) {
	for _, refusals := range []int{1, 2} {
		var prompts []int
		var b *Budget
		host := ProviderFunc(func(_ context.Context, req *Request) (*Response, error) {
			prompts = append(prompts, b.promptTokens(req))
			if len(prompts) <= refusals {
				return nil, &Error{Class: ClassContextOverflow, Status: 400, PromptTokens: prompts[0] * 2, ContextWindow: 1500, Message: "too long"}
			}
			return &Response{Text: "ok"}, nil
		})
		b = &Budget{Provider: host, Limits: func(string) (int, int) { return 8000, 512 }, Count: words}
		req := &Request{Model: "m", MaxOutputTokens: 16384, Messages: []Message{{Role: RoleUser, Content: strings.Repeat("evidence ", 6000)}}}
		_, err := b.Complete(context.Background(), req)
		if len(prompts) != 2 {
			t.Fatalf("%d refusals: %d calls, want 2", refusals, len(prompts))
		}
		// The host counts twice as many tokens and has a 1500-token window:
		// the retry's prompt is under 750 of ours.
		if prompts[1] >= 750 {
			t.Fatalf("the retry's prompt is %d tokens, want under 750", prompts[1])
		}
		if (refusals == 1) != (err == nil) {
			t.Fatalf("%d refusals: err %v", refusals, err)
		}
	}
}

// TestBudgetScalesTheRetryByWhatWasSent: a prompt already cut to the
// configured window and refused by a host that counts three times as many
// tokens is cut again in proportion to what was sent, not to the prompt
// before its first cut.
func TestBudgetScalesTheRetryByWhatWasSent(t *testing.T) {
	var prompts []int
	var b *Budget
	host := ProviderFunc(func(_ context.Context, req *Request) (*Response, error) {
		n := b.promptTokens(req)
		prompts = append(prompts, n)
		if 3*n > 1024 {
			return nil, &Error{Class: ClassContextOverflow, Status: 400, PromptTokens: 3 * n, ContextWindow: 1024, Message: "too long"}
		}
		return &Response{Text: "ok"}, nil
	})
	b = &Budget{Provider: host, Limits: func(string) (int, int) { return 1024, 96 }, Count: words}
	req := &Request{Model: "m", MaxOutputTokens: 16384, Messages: []Message{{Role: RoleUser, Content: strings.Repeat("evidence ", 6000)}}}
	if _, err := b.Complete(context.Background(), req); err != nil || len(prompts) != 2 {
		t.Fatalf("err %v after %d calls (prompts %v): want the retry to fit", err, len(prompts), prompts)
	}
}
