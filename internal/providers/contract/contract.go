// Package contract is the one test suite every model backend must pass: the
// same calls and the same upstream behaviours, played by a fake upstream that
// speaks each vendor's real wire format.
package contract

import (
	"context"
	"encoding/json"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/providers"
)

// Kinds of upstream behaviour.
const (
	KindAnswer = "answer" // a text answer with usage (and citations, if any)
	KindJSON   = "json"   // a structured answer: JSON is the object
	KindStatus = "status" // an HTTP error with the vendor's error body
	KindStall  = "stall"  // no answer until the client gives up
	// KindToolCall answers with the tool calls of ToolCalls (and Text, if
	// any), when the request offered each called tool with its parameters
	// and the tool choice in the vendor's format; with a 400 otherwise.
	KindToolCall = "tool_call"
	// KindHuge answers with a body far larger than any backend reads of
	// one response, gzip-compressed (WriteHuge).
	KindHuge = "huge"
	// KindCut answers Text (and JSON, if any, as a structured reply would
	// carry it) cut at the output bound: the vendor's length finish
	// (finish_reason length, status incomplete for max_output_tokens,
	// stop_reason max_tokens, finishReason MAX_TOKENS), with Usage.
	KindCut = "cut"
	// KindRefusal is a safety refusal in the vendor's form: OpenAI's
	// refusal part or field, Anthropic's stop_reason refusal, Gemini's
	// finishReason SAFETY. Text is the refusal's text, where the vendor
	// sends one.
	KindRefusal = "refusal"
)

// Wire formats a fixture speaks (Fixture.Wire).
const (
	WireResponses = "openai-responses"
	WireChat      = "chat-completions"
	WireAnthropic = "anthropic"
	WireGemini    = "gemini"
)

// HugeAlloc bounds what a call that meets KindHuge may allocate: the
// backend reads a few MiB of the body at most, and never decodes it (about
// 10 MiB for the 4 MiB of providers.MaxResponseBytes; more under the race
// detector, which drops pooled buffers).
const HugeAlloc = 32 << 20

// Scenario is how the fake upstream answers one request.
type Scenario struct {
	Kind       string
	Text       string
	JSON       string
	Usage      events.Usage
	Citations  []events.Citation
	Status     int
	RetryAfter time.Duration // sent as the vendor's retry-after header
	Message    string        // the vendor's error message
	ToolCalls  []events.ToolCall
	// Body, for KindStatus, is the error body sent verbatim instead of the
	// vendor's usual envelope around Message: what a particular host sends.
	Body string
	// NoUsage leaves the usage out of the answer, as some hosts do.
	NoUsage bool
}

// Fixture is one backend wired to its fake upstream.
type Fixture interface {
	// Provider returns the backend under test, pointed at the fake upstream.
	Provider(t *testing.T) providers.Provider
	// Play makes the upstream answer the next requests as scenarios says, one
	// each; the last one repeats.
	Play(scenarios ...Scenario)
	// Requests is the number of requests the upstream received.
	Requests() int
	// Supports reports whether the backend can play a kind; the simulated
	// backend plays only answers and structured output.
	Supports(kind string) bool
	// Citations reports whether the backend returns web-search citations.
	Citations() bool
	// Wire is the wire format the fixture speaks (Wire*), empty for a
	// backend that plays a model rather than a host.
	Wire() string
}

var schema = &providers.Schema{Name: "synthesis", JSON: json.RawMessage(`{"type":"object","required":["answer","conflicts"],"properties":{"answer":{"type":"string"},"conflicts":{"type":"array"}},"additionalProperties":false}`)}

func ask(text string) *providers.Request {
	return &providers.Request{Model: "m", Messages: []providers.Message{{Role: providers.RoleUser, Content: text}}}
}

// Run runs the contract against f.
func Run(t *testing.T, f Fixture) {
	t.Run("answer with usage", func(t *testing.T) {
		f.Play(Scenario{Kind: KindAnswer, Text: "Mount Everest is 8,849 m tall.", Usage: events.Usage{InputTokens: 12, OutputTokens: 34}})
		resp, err := f.Provider(t).Complete(context.Background(), ask("How tall is Everest?"))
		if err != nil {
			t.Fatalf("Complete: %v", err)
		}
		if strings.TrimSpace(resp.Text) == "" || resp.Usage.InputTokens <= 0 || resp.Usage.OutputTokens <= 0 {
			t.Fatalf("answer %q usage %+v: want text and usage", resp.Text, resp.Usage)
		}
		if f.Supports(KindStatus) && (!strings.Contains(resp.Text, "8,849") || resp.Usage != (events.Usage{InputTokens: 12, OutputTokens: 34})) {
			t.Fatalf("answer %q usage %+v: want the upstream's text and usage", resp.Text, resp.Usage)
		}
	})
	t.Run("structured output", func(t *testing.T) {
		f.Play(Scenario{Kind: KindJSON, JSON: `{"answer":"one answer","conflicts":[]}`, Usage: events.Usage{InputTokens: 50, OutputTokens: 10}})
		req := ask("### provider_a (m)\n- topic: x\n\n### provider_b (m)\n- topic: y\n")
		req.Schema, req.Purpose = schema, events.StepSynthesis
		resp, err := (&providers.Structured{Provider: f.Provider(t)}).Complete(context.Background(), req)
		if err != nil {
			t.Fatalf("Complete: %v", err)
		}
		var out struct {
			Answer    string `json:"answer"`
			Conflicts []any  `json:"conflicts"`
		}
		if err := json.Unmarshal(resp.JSON, &out); err != nil || out.Answer == "" || out.Conflicts == nil {
			t.Fatalf("structured output %s: %v", resp.JSON, err)
		}
	})
	if f.Supports(KindToolCall) {
		t.Run("tools go to the model and its calls come back", func(t *testing.T) {
			want := []events.ToolCall{{ID: "call_1", Name: "get_weather", Arguments: `{"city":"Oslo"}`}}
			f.Play(Scenario{Kind: KindToolCall, ToolCalls: want, Usage: events.Usage{InputTokens: 20, OutputTokens: 8}})
			req := ask("What is the weather in Oslo?")
			req.Tools = []events.Tool{
				{Name: "get_weather", Description: "The weather in a city.", Parameters: `{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`},
				{Name: "get_time", Description: "The time in a city."},
			}
			req.ToolChoice = events.ToolChoiceRequired
			resp, err := f.Provider(t).Complete(context.Background(), req)
			if err != nil {
				t.Fatalf("Complete: %v", err)
			}
			if len(resp.ToolCalls) != 1 || resp.ToolCalls[0].Name != "get_weather" || resp.ToolCalls[0].ID == "" {
				t.Fatalf("tool calls %+v, want %+v", resp.ToolCalls, want)
			}
			var got, exp any
			if json.Unmarshal([]byte(resp.ToolCalls[0].Arguments), &got) != nil || json.Unmarshal([]byte(want[0].Arguments), &exp) != nil || !jsonEqual(got, exp) {
				t.Fatalf("arguments %s, want %s", resp.ToolCalls[0].Arguments, want[0].Arguments)
			}
			if resp.Usage.InputTokens != 20 || resp.Usage.OutputTokens != 8 {
				t.Fatalf("usage %+v", resp.Usage)
			}
		})
	}
	if f.Citations() {
		t.Run("web search citations", func(t *testing.T) {
			cites := []events.Citation{{URL: "https://example.org/everest", Title: "Everest"}}
			f.Play(Scenario{Kind: KindAnswer, Text: "8,849 m.", Usage: events.Usage{InputTokens: 5, OutputTokens: 5}, Citations: cites})
			req := ask("How tall is Everest?")
			req.WebSearch = true
			resp, err := f.Provider(t).Complete(context.Background(), req)
			if err != nil {
				t.Fatalf("Complete: %v", err)
			}
			if len(resp.Citations) == 0 || resp.Citations[0].URL != cites[0].URL {
				t.Fatalf("citations %+v, want %+v", resp.Citations, cites)
			}
		})
	}
	if f.Supports(KindHuge) {
		t.Run("a response larger than a backend reads fails it unread", func(t *testing.T) {
			InChild(t, func(t *testing.T) {
				huge()
				f.Play(Scenario{Kind: KindHuge})
				p := f.Provider(t)
				before := f.Requests()
				var ms runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&ms)
				start := ms.TotalAlloc
				_, err := p.Complete(context.Background(), ask("x"))
				runtime.ReadMemStats(&ms)
				alloc := ms.TotalAlloc - start
				var pe *providers.Error
				if !errors.As(err, &pe) || pe.Class != providers.ClassHostError || pe.Retriable() {
					t.Fatalf("err %v, want a host_error *providers.Error that is not retried", err)
				}
				if alloc > HugeAlloc {
					t.Fatalf("the call allocated %d MiB for a body of %d MiB (%d KB compressed); want at most %d MiB",
						alloc>>20, HugeDecodedBytes>>20, len(huge())>>10, HugeAlloc>>20)
				}
				if n := f.Requests() - before; n != 1 {
					t.Fatalf("%d requests, want one", n)
				}
				t.Logf("refused (%v) after allocating %d KiB", err, alloc>>10)
			})
		})
	}
	if !f.Supports(KindStatus) {
		return
	}
	misbehaving(t, f)
	for _, c := range []struct {
		name, class string
		s           Scenario
	}{
		{"429 is rate_limited with retry-after", providers.ClassRateLimited, Scenario{Kind: KindStatus, Status: 429, RetryAfter: 7 * time.Second, Message: "slow down"}},
		{"500 is host_error", providers.ClassHostError, Scenario{Kind: KindStatus, Status: 500, Message: "boom"}},
		{"400 is host_error", providers.ClassHostError, Scenario{Kind: KindStatus, Status: 400, Message: "bad"}},
		{"401 is host_error", providers.ClassHostError, Scenario{Kind: KindStatus, Status: 401, Message: "who are you"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f.Play(c.s)
			before := f.Requests()
			_, err := f.Provider(t).Complete(context.Background(), ask("x"))
			var pe *providers.Error
			if !errors.As(err, &pe) || pe.Class != c.class || pe.Status != c.s.Status {
				t.Fatalf("err %v, want a %s *providers.Error with status %d", err, c.class, c.s.Status)
			}
			if c.s.RetryAfter > 0 && pe.RetryAfter != c.s.RetryAfter {
				t.Fatalf("RetryAfter %s, want the upstream's %s", pe.RetryAfter, c.s.RetryAfter)
			}
			if n := f.Requests() - before; n != 1 {
				t.Fatalf("the SDK sent %d requests; retries are the service's, so it must send one", n)
			}
		})
	}
	t.Run("an upstream's long retry-after is capped", func(t *testing.T) {
		// Eleven days: a job holds its slot while it waits, so the wait is
		// never longer than providers.MaxRetryAfter, whatever the upstream asks.
		f.Play(Scenario{Kind: KindStatus, Status: 429, RetryAfter: 1_000_000 * time.Second, Message: "slow down"})
		_, err := f.Provider(t).Complete(context.Background(), ask("x"))
		var pe *providers.Error
		if !errors.As(err, &pe) || pe.Class != providers.ClassRateLimited {
			t.Fatalf("err %v, want a rate_limited *providers.Error", err)
		}
		if pe.RetryAfter != providers.MaxRetryAfter {
			t.Fatalf("RetryAfter %s, want the cap %s", pe.RetryAfter, providers.MaxRetryAfter)
		}
	})
	t.Run("500 then success is retried by the service", func(t *testing.T) {
		f.Play(Scenario{Kind: KindStatus, Status: 500, Message: "boom"}, Scenario{Kind: KindAnswer, Text: "fine now", Usage: events.Usage{InputTokens: 1, OutputTokens: 2}})
		before := f.Requests()
		r := &providers.Retry{Provider: f.Provider(t), Delays: []time.Duration{10 * time.Millisecond, 10 * time.Millisecond}}
		resp, err := r.Complete(context.Background(), ask("x"))
		if err != nil || !strings.Contains(resp.Text, "fine now") || f.Requests()-before != 2 {
			t.Fatalf("got %q, %v after %d requests; want the second answer", resp.Text, err, f.Requests()-before)
		}
	})
	t.Run("400 and 401 are not retried", func(t *testing.T) {
		for _, status := range []int{400, 401} {
			f.Play(Scenario{Kind: KindStatus, Status: status, Message: "no"})
			before := f.Requests()
			r := &providers.Retry{Provider: f.Provider(t), Delays: []time.Duration{time.Millisecond, time.Millisecond}}
			if _, err := r.Complete(context.Background(), ask("x")); err == nil || f.Requests()-before != 1 {
				t.Fatalf("%d: %d requests, err %v; want one and an error", status, f.Requests()-before, err)
			}
		}
	})
	t.Run("a stalled response times out", func(t *testing.T) {
		f.Play(Scenario{Kind: KindStall})
		r := &providers.Retry{Provider: f.Provider(t), Timeout: 200 * time.Millisecond}
		start := time.Now()
		_, err := r.Complete(context.Background(), ask("x"))
		if providers.Classify(err).Class != providers.ClassTimeout || time.Since(start) > 5*time.Second {
			t.Fatalf("err %v after %s; want a timeout", err, time.Since(start))
		}
	})
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}
