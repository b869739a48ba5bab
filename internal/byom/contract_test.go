package byom

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/providers"
	"github.com/crosscheck/crosscheck/internal/providers/contract"
	"github.com/crosscheck/crosscheck/internal/providers/openai/openaitest"
)

const azureKey = "azure-key-0123456789abcdef"

// azure is a fake Azure OpenAI deployment: Chat Completions under
// /openai/deployments/<name>, the key in api-key, the api-version parameter
// required. A BYOM of kind azure-openai is built over the egress guard, as
// queries build it.
type azure struct {
	*contract.Script
	srv *httptest.Server
}

var _ contract.Fixture = (*azure)(nil)

func (a *azure) Provider(t *testing.T) providers.Provider {
	s := testService(t)
	p, err := s.backend(context.Background(), Connection{Kind: events.KindAzureOpenAI, BaseURL: a.srv.URL + "/openai/deployments/dep1",
		Model: "gpt-4o", APIKey: azureKey, APIVersion: "2024-10-21"})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func (a *azure) Supports(string) bool { return true }
func (a *azure) Citations() bool      { return false }
func (a *azure) Wire() string         { return contract.WireChat }

func (a *azure) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s := a.Receive(r)
	switch {
	case r.URL.Path != "/openai/deployments/dep1/chat/completions":
		openaitest.WriteError(w, http.StatusNotFound, "no route "+r.URL.Path, 0)
		return
	case r.Header.Get("api-key") != azureKey || r.Header.Get("Authorization") != "":
		openaitest.WriteError(w, http.StatusUnauthorized, "Access denied due to invalid subscription key.", 0)
		return
	case r.URL.Query().Get("api-version") != "2024-10-21":
		openaitest.WriteError(w, http.StatusNotFound, "Resource not found", 0)
		return
	}
	switch s.Kind {
	case contract.KindHuge:
		contract.WriteHuge(w)
	case contract.KindStall:
		select {
		case <-r.Context().Done():
		case <-a.Done:
		}
	case contract.KindStatus:
		if s.Body != "" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(s.Status)
			_, _ = w.Write([]byte(s.Body))
			return
		}
		openaitest.WriteError(w, s.Status, s.Message, s.RetryAfter)
	case contract.KindJSON:
		openaitest.WriteJSON(w, completion(s.JSON, s.Usage))
	case contract.KindCut:
		content := s.Text
		if a.LastBody()["response_format"] != nil && s.JSON != "" {
			content = s.JSON
		}
		res := completion(content, s.Usage)
		res["choices"].([]any)[0].(map[string]any)["finish_reason"] = "length"
		openaitest.WriteJSON(w, res)
	case contract.KindRefusal:
		res := completion("", s.Usage)
		msg := res["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)
		msg["content"], msg["refusal"] = nil, s.Text
		openaitest.WriteJSON(w, res)
	case contract.KindToolCall:
		if a.LastBody()["tools"] == nil {
			openaitest.WriteError(w, http.StatusBadRequest, "the request offers no tools", 0)
			return
		}
		res := completion("", s.Usage)
		choice := res["choices"].([]any)[0].(map[string]any)
		choice["finish_reason"] = "tool_calls"
		msg := choice["message"].(map[string]any)
		msg["content"] = nil
		var calls []any
		for _, c := range s.ToolCalls {
			calls = append(calls, map[string]any{"id": c.ID, "type": "function", "function": map[string]any{"name": c.Name, "arguments": c.Arguments}})
		}
		msg["tool_calls"] = calls
		openaitest.WriteJSON(w, res)
	default:
		res := completion(s.Text, s.Usage)
		if s.NoUsage {
			delete(res, "usage")
		}
		openaitest.WriteJSON(w, res)
	}
}

func completion(content string, u events.Usage) map[string]any {
	return map[string]any{
		"id": "chatcmpl-1", "object": "chat.completion", "created": 1741569952, "model": "gpt-4o",
		"choices": []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": content}, "finish_reason": "stop"}},
		"usage":   map[string]any{"prompt_tokens": u.InputTokens, "completion_tokens": u.OutputTokens, "total_tokens": u.InputTokens + u.OutputTokens},
	}
}

// TestAzureContract: the azure-openai kind passes the contract every model
// backend passes.
func TestAzureContract(t *testing.T) {
	a := &azure{Script: contract.NewScript(t)}
	a.srv = httptest.NewServer(a)
	t.Cleanup(a.srv.Close)
	contract.Run(t, a)
}
