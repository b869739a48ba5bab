// Package simulated is the built-in model backend used when no provider
// credentials are configured: the embedded default, the tests and the
// benchmark. It is deterministic (same prompt, same output), reports token
// usage, answers every step the modes ask for with schema-valid output, and lets
// providers disagree on purpose so conflicts are exercised. Everything it says
// is labelled as simulated.
//
// It plays each step by the request's Purpose. Its answers are lines
// "- topic: position". Asked for a synthesis, it reads those lines from the
// answers in the prompt, groups them by topic and reports every topic with
// differing positions as a conflict, resolved by majority when there is one.
// The steps of justify and verify are in steps.go, the facts its research
// answers state (and the false ones it plants) in facts.go.
package simulated

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/providers"
)

// Client is one simulated provider.
type Client struct {
	// Provider is the provider key this client plays; providers disagree by key.
	Provider string
	// Latency is added to every call.
	Latency time.Duration
}

var _ providers.Provider = (*Client)(nil)

// New returns a simulated client for the provider key.
func New(provider string, latency time.Duration) *Client {
	return &Client{Provider: provider, Latency: latency}
}

// Complete answers req after the configured latency, or returns ctx's
// error when ctx ends first. A call whose deadline (the model timeout)
// comes before the latency's end waits on ctx alone, with no timer of its
// own: it can only end with ctx's error.
func (c *Client) Complete(ctx context.Context, req *providers.Request) (*providers.Response, error) {
	// The call waits here for as long as the latency lasts, holding this
	// frame: the answer is played in play, so the frame (and the stack of
	// every goroutine waiting on a model) stays small.
	start := time.Now()
	if c.Latency > 0 {
		if d, ok := ctx.Deadline(); ok && d.Before(start.Add(c.Latency)) {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		t := time.NewTimer(c.Latency)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
	return c.play(req, start)
}

// play is the answer to req, a call that began at start.
//
//go:noinline
func (c *Client) play(req *providers.Request, start time.Time) (*providers.Response, error) {
	resp := &providers.Response{}
	in := 0
	for _, m := range req.Messages {
		in += len(m.Content)
	}
	in += attachmentBytes(req.Attachments)
	// The attached files' text, read where a question calls for it; the
	// steps play from the rest of the input.
	docs, input := attached(last(req.Messages), req.Attachments)
	var out any
	switch req.Purpose {
	case events.StepSynthesis:
		out = synthesize(input)
	case events.StepRevise:
		out = c.revise(input)
	case events.StepFindDisagreements:
		out = findDisagreements(input)
	case events.StepRewrite:
		out = rewrite(input)
	case events.StepExtractClaims:
		out = extractClaims(input)
	case events.StepMergeClaims:
		out = mergeClaims(input)
	case events.StepAssessClaims:
		out = c.assess(input)
	case events.StepResearch:
		resp.Text = c.research(req.Model, input, docs)
		resp.ToolCalls = proposeToolCalls(c.Provider, req, input)
	default:
		resp.Text = c.answer(req.Model, input) + fileLines(input, docs)
		resp.ToolCalls = proposeToolCalls(c.Provider, req, input)
	}
	if out != nil {
		raw, err := json.Marshal(out)
		if err != nil {
			return resp, err
		}
		resp.JSON, resp.Text = raw, string(raw)
	}
	resp.Usage = events.Usage{InputTokens: tokens(in), OutputTokens: tokens(len(resp.Text))}
	resp.Latency = time.Since(start)
	return resp, nil
}

func last(ms []providers.Message) string {
	if len(ms) == 0 {
		return ""
	}
	return ms[len(ms)-1].Content
}

// tokens approximates a token count as one token per four bytes.
func tokens(n int) int { return (n + 3) / 4 }

func hash(s string) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(s))
	return h.Sum32()
}

// answer plays one model's answer. Topic "summary" always agrees; "key figure"
// has one dissenting provider; "recommendation" splits two against two on some
// prompts.
func (c *Client) answer(model, prompt string) string {
	h := hash(prompt)
	idx := strings.IndexByte("abcd", c.Provider[len(c.Provider)-1])
	figure := 10 + int(h%90)
	if idx == int(h/7%4) {
		figure += 1 + int(h/11%5)
	}
	rec := "proceed with care"
	if h%3 == 0 && idx >= 2 {
		rec = "wait for more evidence"
	}
	excerpt := prompt
	if len(excerpt) > 80 {
		// Cut before the character that byte 80 falls in.
		cut := 80
		for cut > 0 && !utf8.RuneStart(excerpt[cut]) {
			cut--
		}
		excerpt = excerpt[:cut] + "…"
	}
	excerpt = strings.ReplaceAll(excerpt, "\n", " ")
	return fmt.Sprintf("[simulated answer by %s/%s]\n- summary: a simulated answer to %q\n- key figure: %d\n- recommendation: %s\n",
		c.Provider, model, excerpt, figure, rec)
}

type synthesis struct {
	Answer    string            `json:"answer"`
	Conflicts []events.Conflict `json:"conflicts"`
}

// synthesize reads "### <label>" blocks of "- topic: position" lines.
func synthesize(prompt string) synthesis {
	type stance struct{ model, position string }
	byTopic := map[string][]stance{}
	var topics []string
	model := ""
	for _, line := range strings.Split(prompt, "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "### ") {
			model = strings.TrimSpace(strings.TrimPrefix(line, "### "))
			if i := strings.IndexByte(model, ' '); i > 0 {
				model = model[:i]
			}
			continue
		}
		topic, pos, ok := strings.Cut(strings.TrimPrefix(line, "- "), ": ")
		if model == "" || !strings.HasPrefix(line, "- ") || !ok {
			continue
		}
		if _, seen := byTopic[topic]; !seen {
			topics = append(topics, topic)
		}
		byTopic[topic] = append(byTopic[topic], stance{model, pos})
	}
	out := synthesis{Conflicts: []events.Conflict{}}
	var b strings.Builder
	b.WriteString("[simulated synthesis]\n")
	for _, topic := range topics {
		stances := byTopic[topic]
		count := map[string]int{}
		for _, s := range stances {
			count[s.position]++
		}
		positions := make([]string, 0, len(count))
		for p := range count {
			positions = append(positions, p)
		}
		sort.Slice(positions, func(i, j int) bool {
			if count[positions[i]] != count[positions[j]] {
				return count[positions[i]] > count[positions[j]]
			}
			return positions[i] < positions[j]
		})
		top := positions[0]
		if len(positions) == 1 {
			fmt.Fprintf(&b, "- %s: %s\n", topic, top)
			continue
		}
		c := events.Conflict{Topic: topic}
		for _, s := range stances {
			c.Positions = append(c.Positions, events.Position{Model: s.model, Position: s.position})
		}
		if count[top]*2 > len(stances) {
			c.Resolution = fmt.Sprintf("majority: %d of %d models hold %q", count[top], len(stances), top)
			fmt.Fprintf(&b, "- %s: %s\n", topic, top)
		} else {
			c.Resolution = fmt.Sprintf("unresolved: no majority among %d models; the answer reports each position", len(stances))
			fmt.Fprintf(&b, "- %s: the models disagree (%s)\n", topic, strings.Join(positions, " / "))
		}
		out.Conflicts = append(out.Conflicts, c)
	}
	out.Answer = b.String()
	return out
}
