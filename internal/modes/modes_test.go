package modes

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/providers"
	"github.com/crosscheck/crosscheck/internal/search"
)

func TestAggregate(t *testing.T) {
	claims := []events.Claim{{ID: "c1"}}
	sourced := []events.EvidenceRetrieved{{ClaimID: "c1", Sources: []events.Citation{{URL: "u"}}}}
	judged := func(verdicts ...string) map[string]events.ClaimsAssessed {
		out := map[string]events.ClaimsAssessed{}
		for i, v := range verdicts {
			out[string(rune('a'+i))] = events.ClaimsAssessed{Assessments: []events.Assessment{{ClaimID: "c1", Verdict: v}}}
		}
		return out
	}
	const s, r, u = events.VerdictSupported, events.VerdictRefuted, events.VerdictUnverifiable
	tests := []struct {
		name     string
		evidence []events.EvidenceRetrieved
		assessed map[string]events.ClaimsAssessed
		verdict  string
		conf     float64
	}{
		{"no judgement", sourced, nil, u, 0},
		{"all support", sourced, judged(s, s, s), events.VerdictSupported, 1},
		{"all refute", sourced, judged(r, r), events.VerdictRefuted, 1},
		{"support and unverifiable", sourced, judged(s, u), events.VerdictSupported, 0.5},
		{"only unverifiable", sourced, judged(u, u), u, 1},
		{"split", sourced, judged(s, r), events.VerdictDisputed, 1},
		{"two against one", sourced, judged(s, s, r), events.VerdictDisputed, 1},
		{"three against one", sourced, judged(r, r, r, s), events.VerdictRefuted, 0.5},
		{"without sources", nil, judged(r, r, r), events.VerdictRefuted, 0.5},
	}
	for _, tt := range tests {
		got := Aggregate(claims, tt.evidence, tt.assessed)
		if len(got) != 1 || got[0].Verdict != tt.verdict || got[0].Confidence != tt.conf {
			t.Errorf("%s: got %+v, want %s with confidence %.2f", tt.name, got, tt.verdict, tt.conf)
		}
	}
}

// recorder answers every call with a fixed revision and keeps the prompts.
type recorder struct {
	mu      sync.Mutex
	prompts []string
}

func (r *recorder) Complete(_ context.Context, req *providers.Request) (*providers.Response, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.prompts = append(r.prompts, req.Messages[len(req.Messages)-1].Content)
	return &providers.Response{JSON: []byte(`{"answer":"revised","changed":false}`), Usage: events.Usage{InputTokens: 1, OutputTokens: 1}}, nil
}

// Round 2 shows each model the others' answers without their names, and in
// an order that varies from query to query.
func TestReviseAnonymisesAndShuffles(t *testing.T) {
	rec := &recorder{}
	m := &Justify{Models: Models{Providers: providers.Set{"provider_a": rec}}}
	refs := []events.ModelRef{
		{Provider: "provider_a", ModelID: "alpha-1"}, {Provider: "provider_b", ModelID: "beta-1"},
		{Provider: "provider_c", ModelID: "gamma-1"}, {Provider: "provider_d", ModelID: "delta-1"},
	}
	var answers []events.ModelAnswered
	for _, ref := range refs {
		answers = append(answers, events.ModelAnswered{Model: ref, Answer: "As " + ref.ModelID + " of " + ref.Provider + ", I say " + ref.Provider[9:] + "."})
	}
	orders := map[string]bool{}
	for i := range 12 {
		sub := &events.QuerySubmitted{RequestID: "req_" + string(rune('a'+i)), Prompt: "q", Models: refs}
		ev, ok := m.revise(context.Background(), newJob(&events.Query{Submitted: sub}, nil), answers[0], answers)
		if !ok {
			t.Fatalf("revise: %+v", ev)
		}
		prompt := rec.prompts[len(rec.prompts)-1]
		others := prompt[strings.Index(prompt, "random order:"):]
		for _, name := range []string{"provider_b", "beta-1", "provider_c", "gamma-1", "provider_d", "delta-1", "provider_a"} {
			if strings.Contains(others, name) {
				t.Fatalf("the other answers name %s:\n%s", name, others)
			}
		}
		var order []string
		for _, tag := range []string{"I say b", "I say c", "I say d"} {
			order = append(order, string(rune('0'+strings.Index(others, tag)/10)))
		}
		orders[strings.Join(order, ",")] = true
	}
	if len(orders) < 2 {
		t.Fatalf("the other answers came in one order in 12 queries: %v", orders)
	}
}

func TestCited(t *testing.T) {
	sources := []events.Citation{{URL: "u1"}, {URL: "u2"}, {URL: "u3"}}
	got := cited("A [2]. B [1][2]. C [9] [0].", sources)
	if len(got) != 2 || got[0].URL != "u2" || got[1].URL != "u1" {
		t.Fatalf("cited %v, want u2 then u1", got)
	}
}

// FuzzCited: model text never makes the citation parser fail or cite a
// source that was not given.
func FuzzCited(f *testing.F) {
	for _, s := range []string{"", "[1]", "a [2] b [3] [99] [-1] [01]", "[[1]]", "[1", "é [2]"} {
		f.Add(s)
	}
	sources := []events.Citation{{URL: "u1"}, {URL: "u2"}}
	f.Fuzz(func(t *testing.T, text string) {
		for _, c := range cited(text, sources) {
			if c.URL != "u1" && c.URL != "u2" {
				t.Fatalf("cited %v", c)
			}
		}
	})
}

func TestCleanClaims(t *testing.T) {
	known := map[string]bool{"provider_a": true, "provider_b": true}
	got := cleanClaims([]events.Claim{
		{Text: " Everest is 8,849 m. ", AssertedBy: []string{"provider_a", "provider_a", "model_z"}, Queries: []string{"", "q1", "q2", "q3"}},
		{Text: "made up", AssertedBy: []string{"model_z"}},
		{Text: "", AssertedBy: []string{"provider_b"}},
		{Text: "no queries", AssertedBy: []string{"provider_b"}},
	}, known)
	if len(got) != 2 {
		t.Fatalf("kept %d claims: %+v", len(got), got)
	}
	if got[0].Text != "Everest is 8,849 m." || len(got[0].AssertedBy) != 1 || len(got[0].Queries) != queriesPerClaim {
		t.Errorf("first claim %+v", got[0])
	}
	if len(got[1].Queries) != 1 || got[1].Queries[0] != "no queries" {
		t.Errorf("a claim without queries is searched by its text: %+v", got[1])
	}
}

func TestRankKeepsTheClaimsMostModelsMade(t *testing.T) {
	m := &Verify{MaxClaims: 2}
	got, dropped := m.rank([]events.Claim{
		{Text: "one", AssertedBy: []string{"a"}},
		{Text: "three", AssertedBy: []string{"a", "b", "c"}},
		{Text: "two", AssertedBy: []string{"a", "b"}},
	})
	if dropped != 1 || len(got) != 2 || got[0].Text != "three" || got[0].ID != "c1" || got[1].Text != "two" || got[1].ID != "c2" {
		t.Fatalf("rank: %+v, dropped %d", got, dropped)
	}
}

// fixedSearch finds one source for every query.
type fixedSearch struct{}

func (fixedSearch) Name() string { return "offline" }
func (fixedSearch) Search(context.Context, string, int) ([]search.Result, error) {
	return []search.Result{{URL: "corpus://sample/a.md", Title: "A", Snippet: "Mount Everest is 8,849 metres tall."}}, nil
}

// A model that searches the web itself researches with its own search; the
// others get the service's search results in their prompt.
func TestResearchUsesNativeSearchWhereEnabled(t *testing.T) {
	var mu sync.Mutex
	requests := map[string]providers.Request{}
	set := providers.Set{}
	for _, key := range []string{"provider_a", "provider_b"} {
		set[key] = providers.ProviderFunc(func(ctx context.Context, req *providers.Request) (*providers.Response, error) {
			if req.Purpose == events.StepResearch {
				mu.Lock()
				requests[key] = *req
				mu.Unlock()
				return &providers.Response{Text: "Everest is 8,849 m [1].", Usage: events.Usage{InputTokens: 1, OutputTokens: 1}}, nil
			}
			return &providers.Response{}, &providers.Error{Class: providers.ClassHostError, Message: "only research here"}
		})
	}
	m := &Verify{Models: Models{Providers: set}, Search: fixedSearch{}, NativeSearch: func(ref events.ModelRef) bool { return ref.Provider == "provider_a" }}
	q := &events.Query{}
	q.Apply(events.Record{Event: events.QuerySubmitted{RequestID: "req_1", Mode: events.ModeVerify, Prompt: "How tall is Everest?",
		Models: []events.ModelRef{{Provider: "provider_a", ModelID: "a"}, {Provider: "provider_b", ModelID: "b"}}}})
	j := newJob(q, func(context.Context, events.Event) error { return nil })
	if err := m.research(context.Background(), j); err != nil {
		t.Fatal(err)
	}
	native, service := requests["provider_a"], requests["provider_b"]
	if !native.WebSearch || strings.Contains(native.Messages[1].Content, "Search results:") {
		t.Errorf("provider_a: web search %v, prompt %q", native.WebSearch, native.Messages[1].Content)
	}
	if service.WebSearch || !strings.Contains(service.Messages[1].Content, "[1] A — corpus://sample/a.md") {
		t.Errorf("provider_b: web search %v, prompt %q", service.WebSearch, service.Messages[1].Content)
	}
	if c := j.q.Answers["provider_b"].Citations; len(c) != 1 || c[0].URL != "corpus://sample/a.md" {
		t.Errorf("provider_b's citations %v: want the source it cited as [1]", c)
	}
}

func TestAnonymiseRemovesBrandsInAnyCase(t *testing.T) {
	refs := []events.ModelRef{{Provider: "provider_c", ModelID: "gemini-2.5-flash"}, {Provider: "provider_d", ModelID: "gemini-2.5-flash-lite"}}
	got := anonymise("As Claude, made by Anthropic, I differ from GPT-4.1 (OpenAI), Gemini-2.5-FLASH-lite and PROVIDER_C.", refs)
	for _, name := range []string{"claude", "anthropic", "gpt", "openai", "gemini", "flash", "lite", "provider"} {
		if strings.Contains(strings.ToLower(got), name) {
			t.Fatalf("%q still names %s", got, name)
		}
	}
}

// A synthesis that fails is recorded (step_failed) before the query ends
// aggregation_failed; a run that finds it recorded ends the query the same
// way and calls no model.
func TestFailedSynthesisIsRecordedAndNotMadeAgain(t *testing.T) {
	var calls atomic.Int64
	set := providers.Set{}
	for _, key := range []string{"provider_a", "provider_b"} {
		set[key] = providers.ProviderFunc(func(ctx context.Context, req *providers.Request) (*providers.Response, error) {
			calls.Add(1)
			if req.Purpose == events.StepSynthesis {
				return nil, &providers.Error{Class: providers.ClassHostError, Status: 503, Message: "overloaded"}
			}
			return &providers.Response{Text: "an answer from " + key, Usage: events.Usage{InputTokens: 1, OutputTokens: 1}}, nil
		})
	}
	m := &Unify{Models: Models{Providers: set}}
	q := &events.Query{}
	q.Apply(events.Record{Event: events.QuerySubmitted{RequestID: "req_1", Mode: events.ModeUnify, Prompt: "Which?",
		Models: []events.ModelRef{{Provider: "provider_a", ModelID: "a"}, {Provider: "provider_b", ModelID: "b"}}}})
	var (
		mu       sync.Mutex
		recorded []events.Event
	)
	emit := func(_ context.Context, ev events.Event) error {
		mu.Lock()
		defer mu.Unlock()
		recorded = append(recorded, ev)
		return nil
	}
	ending, err := m.Run(context.Background(), q, emit)
	if err != nil {
		t.Fatal(err)
	}
	want := events.QueryFailed{Code: "aggregation_failed", Message: "the synthesis failed: provider_a: host_error (upstream status 503): overloaded"}
	f, ok := recorded[len(recorded)-1].(events.StepFailed)
	if ending != want || !ok || f.Step != events.StepSynthesis || f.Model == nil || f.Model.Provider != "provider_a" || f.UpstreamStatus != 503 {
		t.Fatalf("ending %+v, last event %+v; want %+v after the synthesis's step_failed", ending, recorded[len(recorded)-1], want)
	}
	for _, ev := range recorded {
		q.Apply(events.Record{Event: ev})
	}
	calls.Store(0)
	again, err := m.Run(context.Background(), q, func(_ context.Context, ev events.Event) error {
		t.Errorf("the resumed run recorded %T", ev)
		return nil
	})
	if err != nil || again != want || calls.Load() != 0 {
		t.Fatalf("resumed: %+v, %v, %d calls; want %+v and no call", again, err, calls.Load(), want)
	}
}

// Decided is the ending every mode reaches from the recorded events without
// a model call, and nothing while a call is still to be made.
func TestDecided(t *testing.T) {
	a, b := events.ModelRef{Provider: "provider_a", ModelID: "a"}, events.ModelRef{Provider: "provider_b", ModelID: "b"}
	base := []events.Event{
		events.QuerySubmitted{RequestID: "req_1", Mode: events.ModeJustify, Prompt: "Which?", Models: []events.ModelRef{a, b}},
		events.QueryStarted{},
	}
	failedA := events.ModelFailed{Model: a, Class: providers.ClassHostError, Message: "down"}
	for _, c := range []struct {
		name   string
		evs    []events.Event
		ending events.Event
	}{
		{"a model still to answer", []events.Event{failedA}, nil},
		{"an answer, not yet written up", []events.Event{failedA, events.ModelAnswered{Model: b, Answer: "x"}}, nil},
		{"every model failed", []events.Event{failedA, events.ModelFailed{Model: b, Class: providers.ClassTimeout, Message: "slow"}},
			events.QueryFailed{Code: "provider_error", Message: "every selected model failed: provider_a: host_error; provider_b: timeout"}},
		{"the answer written", []events.Event{failedA, events.ModelAnswered{Model: b, Answer: "x"}, events.Synthesized{Model: b}}, events.QueryCompleted{}},
		{"its writing failed", []events.Event{failedA, events.ModelAnswered{Model: b, Answer: "x"},
			events.StepFailed{Step: events.StepRewrite, Model: &b, Class: providers.ClassHostError, Message: "down"}},
			events.QueryFailed{Code: "aggregation_failed", Message: "the final answer failed: provider_b: host_error: down"}},
	} {
		q := &events.Query{}
		for _, ev := range append(slices.Clone(base), c.evs...) {
			q.Apply(events.Record{Event: ev})
		}
		ending, ok := Decided(q)
		if ok != (c.ending != nil) || ending != c.ending {
			t.Errorf("%s: %+v, %v; want %+v", c.name, ending, ok, c.ending)
		}
	}
}
