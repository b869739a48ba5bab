package byom

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/crosscheck/crosscheck/internal/apperr"
	"github.com/crosscheck/crosscheck/internal/egress"
	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/providers"
)

// testService is a service whose guard allows loopback on every port: the
// fake hosts of the tests listen on random ones.
func testService(t testing.TB) *Service {
	p, err := egress.ParseAllow("127.0.0.0/8,::1,localhost")
	if err != nil {
		t.Fatal(err)
	}
	return &Service{Guard: &egress.Guard{Policy: p}}
}

func TestScrub(t *testing.T) {
	c := Connection{APIKey: "sk-live-123456", Headers: map[string]string{"X-Org": "org-secret-9"}}
	got := scrub("bad key sk-live-123456 for org-secret-9\n\x1b[31m"+strings.Repeat("x", 500), c)
	if strings.Contains(got, "sk-live") || strings.Contains(got, "org-secret") || strings.ContainsAny(got, "\n\x1b") || len([]rune(got)) > MaxExcerpt+1 {
		t.Fatalf("scrub = %q", got)
	}
}

// FuzzConnectRequest: any body either decodes into a request that
// validates, or is refused with invalid_request; a validated one is within
// every bound.
func FuzzConnectRequest(f *testing.F) {
	f.Add(`{"name":"llama","kind":"openai-compatible","base_url":"http://127.0.0.1:11434/v1","model":"llama3"}`)
	f.Add(`{"name":"a","kind":"azure-openai","base_url":"https://x.openai.azure.com/openai/deployments/d","model":"m","api_key":"k","api_version":"2024-10-21"}`)
	f.Add(`{"name":"a","kind":"anthropic","base_url":"http://169.254.169.254","model":"m","api_key":"k"}`)
	f.Add(`{"name":"a","kind":"gemini","base_url":"https://g.example","model":"m","api_key":"k","headers":{"Host":"x"}}`)
	f.Add(`{"name":"\u202e","kind":"openai","base_url":"file:///etc","model":"m"}`)
	s := testService(f)
	f.Fuzz(func(t *testing.T, body string) {
		var req ConnectRequest
		if json.Unmarshal([]byte(body), &req) != nil {
			return
		}
		err := s.validate(&req)
		if err != nil {
			if apperr.Code(err) != apperr.InvalidRequest {
				t.Fatalf("code %q: %v", apperr.Code(err), err)
			}
			return
		}
		if req.Name == "" || len(req.BaseURL) > MaxURLLen || len(req.Model) > MaxModelLen || len(req.Headers) > MaxHeaders {
			t.Fatalf("accepted out of bounds: %+v", req)
		}
		if _, err := s.Guard.Policy.CheckURL(req.BaseURL); err != nil {
			t.Fatalf("accepted a refused base_url %q", req.BaseURL)
		}
	})
}

// Every part of an answer counts towards MaxAnswerBytes: its text (or
// structured output), citations and tool calls.
func TestAnswerBound(t *testing.T) {
	long := strings.Repeat("x", MaxAnswerBytes/2)
	for _, tc := range []struct {
		name string
		resp providers.Response
		fail bool
	}{
		{"text at the bound", providers.Response{Text: long + long}, false},
		{"text over it", providers.Response{Text: long + long + "x"}, true},
		{"structured output, counted once", providers.Response{Text: "```json\n" + long + "```", JSON: json.RawMessage(long)}, false},
		{"citations", providers.Response{Text: long, Citations: []events.Citation{{URL: "https://example.com/", Snippet: long}}}, true},
		{"tool calls", providers.Response{Text: "a", ToolCalls: []events.ToolCall{{ID: "c1", Name: "f", Arguments: long}, {ID: "c2", Name: "f", Arguments: long}}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := scrubbed{Provider: providers.ProviderFunc(func(context.Context, *providers.Request) (*providers.Response, error) {
				resp := tc.resp
				return &resp, nil
			})}
			resp, err := p.Complete(context.Background(), &providers.Request{})
			var pe *providers.Error
			switch {
			case !tc.fail && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.fail && (!errors.As(err, &pe) || pe.Class != providers.ClassHostError || pe.Retriable()):
				t.Fatalf("got %v, want a final host_error", err)
			case tc.fail && (resp == nil || resp.Text != "" || len(resp.ToolCalls) != 0):
				t.Fatalf("the refused answer came back: %d bytes", answerBytes(resp))
			}
		})
	}
}
