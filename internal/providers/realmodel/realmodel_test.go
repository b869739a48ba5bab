package realmodel_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/crosscheck/crosscheck/internal/providers/realmodel"
)

type completion struct {
	status int
	raw    string
	body   struct {
		Choices []struct {
			Message      struct{ Content string }
			FinishReason string `json:"finish_reason"`
		}
		Usage *struct {
			PromptTokens     int `json:"prompt_tokens"`
			CompletionTokens int `json:"completion_tokens"`
		}
	}
}

func post(t *testing.T, url string, req map[string]any) completion {
	t.Helper()
	raw, _ := json.Marshal(req)
	client := &http.Client{Timeout: 2 * time.Minute}
	resp, err := client.Post(url+"/chat/completions", "application/json", bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	c := completion{status: resp.StatusCode, raw: string(out)}
	if resp.StatusCode == 200 {
		if err := json.Unmarshal(out, &c.body); err != nil || len(c.body.Choices) != 1 {
			t.Fatalf("not a chat completion: %v: %s", err, out)
		}
	}
	return c
}

func user(text string) []map[string]any {
	return []map[string]any{{"role": "user", "content": text}}
}

var answerSchema = map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "answer", "strict": true, "schema": map[string]any{
	"type": "object", "additionalProperties": false, "required": []string{"answer"},
	"properties": map[string]any{"answer": map[string]any{"type": "string", "minLength": 1}},
}}}

// Each behaviour of the host, at the wire, and its log.
func TestHostBehaviours(t *testing.T) {
	h := realmodel.ForTest(t, realmodel.Options{ContextSize: 256, MaxTokens: 48})
	long := strings.Repeat("The tower is tall and the river is long. ", 60) // about 600 tokens

	// A grammar host answers JSON of the schema; greedy, so twice the same.
	c := post(t, h.BaseURL(realmodel.Grammar), map[string]any{"model": "stories", "messages": user("Write one sentence about a cat."), "max_tokens": 16384, "response_format": answerSchema})
	var v struct{ Answer string }
	if c.status != 200 || json.Unmarshal([]byte(c.body.Choices[0].Message.Content), &v) != nil || v.Answer == "" {
		t.Fatalf("grammar host: %d %s", c.status, c.raw)
	}
	again := post(t, h.BaseURL(realmodel.Grammar), map[string]any{"model": "stories", "messages": user("Write one sentence about a cat."), "max_tokens": 16384, "response_format": answerSchema})
	if again.body.Choices[0].Message.Content != c.body.Choices[0].Message.Content {
		t.Fatalf("the same request answered %q, then %q", c.body.Choices[0].Message.Content, again.body.Choices[0].Message.Content)
	}

	// A prose host ignores response_format; an answer cut at the bound ends "length".
	c = post(t, h.BaseURL(realmodel.Prose), map[string]any{"model": "stories", "messages": user("Tell me a story."), "max_tokens": 5, "response_format": answerSchema})
	if c.status != 200 || json.Valid([]byte(c.body.Choices[0].Message.Content)) || c.body.Choices[0].FinishReason != "length" ||
		c.body.Usage == nil || c.body.Usage.CompletionTokens != 5 {
		t.Fatalf("prose host, max_tokens 5: %d %s", c.status, c.raw)
	}

	// A refusing host answers llama-server's exact refusal.
	c = post(t, h.BaseURL(realmodel.Refuse), map[string]any{"model": "stories", "messages": user(long)})
	var refusal struct {
		Error struct {
			Code          int    `json:"code"`
			Message       string `json:"message"`
			Type          string `json:"type"`
			NPromptTokens int    `json:"n_prompt_tokens"`
			NCtx          int    `json:"n_ctx"`
		} `json:"error"`
	}
	if c.status != 400 || json.Unmarshal([]byte(c.raw), &refusal) != nil || refusal.Error.Type != "exceed_context_size_error" || refusal.Error.NCtx != 256 ||
		refusal.Error.Message != fmt.Sprintf("request (%d tokens) exceeds the available context size (256 tokens)", refusal.Error.NPromptTokens) {
		t.Fatalf("refusing host: %d %s", c.status, c.raw)
	}

	// A truncating host answers from the end of the prompt and reports what it read.
	c = post(t, h.BaseURL(realmodel.Truncate), map[string]any{"model": "stories", "messages": user(long)})
	if c.status != 200 || c.body.Usage == nil || c.body.Usage.PromptTokens >= 256 || c.body.Usage.PromptTokens+c.body.Usage.CompletionTokens > 256 {
		t.Fatalf("truncating host: %d %s", c.status, c.raw)
	}

	// A host without usage sends none.
	c = post(t, h.BaseURL(realmodel.NoUsage), map[string]any{"model": "stories", "messages": user("Hello.")})
	if c.status != 200 || c.body.Usage != nil || strings.Contains(c.raw, `"usage"`) {
		t.Fatalf("host without usage: %d %s", c.status, c.raw)
	}

	// An unknown behaviour is a 404.
	if c = post(t, h.URL+"/fast/v1", map[string]any{"model": "stories", "messages": user("Hello.")}); c.status != 404 {
		t.Fatalf("unknown host: %d %s", c.status, c.raw)
	}

	calls, err := h.Calls()
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		host   string
		status int
		check  func(realmodel.Call) bool
	}{
		{"grammar", 200, func(c realmodel.Call) bool {
			return c.Grammar && c.ResponseFormat == "answer" && c.FinishReason == "stop"
		}},
		{"grammar", 200, func(c realmodel.Call) bool { return c.Grammar }},
		{"prose", 200, func(c realmodel.Call) bool { return !c.Grammar && c.CompletionTokens == 5 && c.MaxTokens == 5 }},
		{"refuse", 400, func(c realmodel.Call) bool {
			return c.PromptTokens == 0 && c.PromptTokensSent > 256 && c.Error == "exceed_context_size_error"
		}},
		{"truncate", 200, func(c realmodel.Call) bool { return c.PromptTokensSent > 256 && c.PromptTokens < 256 && c.UsageSent }},
		{"nousage", 200, func(c realmodel.Call) bool { return !c.UsageSent && c.CompletionTokens > 0 }},
	}
	if len(calls) != len(want) {
		t.Fatalf("the log has %d calls, want %d: %+v", len(calls), len(want), calls)
	}
	for i, w := range want {
		if calls[i].Host != w.host || calls[i].Status != w.status || !w.check(calls[i]) {
			t.Errorf("call %d logged %+v", i, calls[i])
		}
	}
}
