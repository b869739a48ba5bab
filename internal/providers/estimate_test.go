package providers

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/crosscheck/crosscheck/internal/events"
)

// words counts a text's tokens as its words: enough to see what was
// counted.
func words(model, text string) int { return len(strings.Fields(text)) }

// TestEstimatedCountsWhatTheHostDidNotReport: a call its host answered
// without usage gets the count of what it sent and got, marked estimated,
// counted and logged; a call with usage, and one the host refused with an
// error status, are left as they are.
func TestEstimatedCountsWhatTheHostDidNotReport(t *testing.T) {
	var log strings.Builder
	reply := func(resp *Response, err error) Provider {
		return ProviderFunc(func(context.Context, *Request) (*Response, error) { return resp, err })
	}
	req := &Request{Model: "local-1", Purpose: events.StepAnswer, Messages: []Message{{Role: RoleSystem, Content: "be brief"}, {Role: RoleUser, Content: "how tall is Everest"}}}
	before := testutil.ToFloat64(usageEstimated.WithLabelValues("provider_d", "local-1"))

	e := &Estimated{Provider: reply(&Response{Text: "8,849 m tall"}, nil), Name: "provider_d", Count: words, Log: zerolog.New(&log)}
	resp, err := e.Complete(context.Background(), req)
	if err != nil || resp.Usage != (events.Usage{InputTokens: 6, OutputTokens: 3}) || resp.UsageSource != UsageEstimated {
		t.Fatalf("resp %+v, err %v: want 6 in, 3 out, estimated", resp, err)
	}
	if got := testutil.ToFloat64(usageEstimated.WithLabelValues("provider_d", "local-1")) - before; got != 1 {
		t.Fatalf("crosscheck_model_usage_estimated_total moved by %v, want 1", got)
	}
	if !strings.Contains(log.String(), `"level":"warn"`) || !strings.Contains(log.String(), "reported no usage") || strings.Contains(log.String(), "Everest") {
		t.Fatalf("log %s: want one warning without the content", log.String())
	}

	for name, c := range map[string]struct {
		resp *Response
		err  error
		want events.Usage
	}{
		"reported":                         {&Response{Text: "x", Usage: events.Usage{InputTokens: 1, OutputTokens: 2}}, nil, events.Usage{InputTokens: 1, OutputTokens: 2}},
		"refused with a status":            {&Response{}, &Error{Class: ClassContextOverflow, Status: 400}, events.Usage{}},
		"no connection":                    {&Response{}, &Error{Class: ClassHostError}, events.Usage{}},
		"answered and refused (HTTP 200)":  {&Response{}, &Error{Class: ClassRefused}, events.Usage{InputTokens: 6}},
		"answered and cut at the window":   {&Response{Text: "a b"}, &Error{Class: ClassContextOverflow}, events.Usage{InputTokens: 6, OutputTokens: 2}},
		"answered, a structured reply cut": {&Response{Text: `{"a":`}, nil, events.Usage{InputTokens: 6, OutputTokens: 1}},
	} {
		e := &Estimated{Provider: reply(c.resp, c.err), Name: "provider_d", Count: words, Log: zerolog.Nop()}
		resp, _ := e.Complete(context.Background(), req)
		if resp.Usage != c.want {
			t.Errorf("%s: usage %+v, want %+v", name, resp.Usage, c.want)
		}
	}
}

// TestUnbilledTokensOfFailedCalls: the whole decorated call of a structured
// step whose host writes no JSON and reports no usage: both calls are
// counted, the failure carries their usage (for its step_failed event), and
// that usage is counted as unbilled.
func TestUnbilledTokensOfFailedCalls(t *testing.T) {
	calls := 0
	host := ProviderFunc(func(context.Context, *Request) (*Response, error) {
		calls++
		return &Response{Text: "Once upon a time"}, nil
	})
	p := &Metered{Name: "provider_c", Provider: &Structured{Provider: &Retry{Provider: &Estimated{Provider: host, Name: "provider_c", Count: words, Log: zerolog.Nop()}, Delays: []time.Duration{time.Millisecond}}}}
	before := testutil.ToFloat64(tokensUnbilled.WithLabelValues("provider_c", "m"))
	resp, err := p.Complete(context.Background(), &Request{Model: "m", Purpose: events.StepExtractClaims, Schema: testSchema, Messages: []Message{{Role: RoleUser, Content: "extract the claims"}}})
	if Classify(err).Class != ClassNotJSON || calls != 2 {
		t.Fatalf("err %v after %d calls, want not_json after two", err, calls)
	}
	if resp.Usage.InputTokens == 0 || resp.Usage.OutputTokens != 8 || resp.UsageSource != UsageEstimated {
		t.Fatalf("usage %+v %q: want both calls counted, estimated", resp.Usage, resp.UsageSource)
	}
	if e := Classify(err); e.Usage != resp.Usage || e.UsageSource != UsageEstimated {
		t.Fatalf("the failure carries usage %+v %q, want %+v estimated", e.Usage, e.UsageSource, resp.Usage)
	}
	got := testutil.ToFloat64(tokensUnbilled.WithLabelValues("provider_c", "m")) - before
	if want := float64(resp.Usage.InputTokens + resp.Usage.OutputTokens); got != want {
		t.Fatalf("crosscheck_model_tokens_unbilled_total moved by %v, want %v", got, want)
	}
}
