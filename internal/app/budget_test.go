package app

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crosscheck/crosscheck/internal/config"
)

// TestPromptsFitTheHostsContextWindow: provider_a's catalog row declares a
// window larger than its host has. Its long answer makes the synthesis
// prompt too long for the host, which refuses it as llama.cpp's server
// does (400 exceed_context_size_error); the synthesis is asked once more,
// cut in the middle to the window the host named, and the query completes.
// No request asks for more output than the row's maximum.
func TestPromptsFitTheHostsContextWindow(t *testing.T) {
	const hostWindow = 700 // the host's count: a token per four bytes
	var (
		mu       sync.Mutex
		refused  int
		cut      int
		maxAsked int64
	)
	host := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req struct {
			Model     string `json:"model"`
			MaxTokens int64  `json:"max_tokens"`
			Messages  []struct {
				Content string `json:"content"`
			} `json:"messages"`
			ResponseFormat any `json:"response_format"`
		}
		_ = json.Unmarshal(body, &req)
		prompt := 0
		for _, m := range req.Messages {
			prompt += len(m.Content) / 4
		}
		mu.Lock()
		maxAsked = max(maxAsked, req.MaxTokens)
		if strings.Contains(string(body), "cut to fit the model") {
			cut++
		}
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if prompt > hostWindow {
			mu.Lock()
			refused++
			mu.Unlock()
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, `{"error":{"code":400,"message":"request (%d tokens) exceeds the available context size (%d tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":%d,"n_ctx":%d}}`, prompt, hostWindow, prompt, hostWindow)
			return
		}
		text := "The tower is 330 metres tall. " + strings.Repeat("It was built for the world's fair of 1889 and stands on the Champ de Mars. ", 40)
		if req.ResponseFormat != nil {
			text = `{"answer":"The tower is 330 metres tall.","conflicts":[]}`
		}
		fmt.Fprintf(w, `{"id":"chatcmpl-1","object":"chat.completion","created":1760000000,"model":%q,"choices":[{"index":0,"message":{"role":"assistant","content":%q},"finish_reason":"stop"}],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`,
			req.Model, text, prompt, len(text)/4, prompt+len(text)/4)
	}))
	t.Cleanup(host.Close)
	t.Setenv("XC_LOCAL", "local-test")
	path := writeConfig(t, fmt.Sprintf(`
providers:
  provider_a:
    backend: openai-compatible
    base_url: "%s/v1/"
    api_key_env: XC_LOCAL
    models:
      - {model_id: local-small, tier: standard, default: true, input_per_million: 100, output_per_million: 100, context_window: 4096, max_output_tokens: 256}
`, host.URL))
	h := newHarness(t, withConfig(func(c *config.Config) { c.ConfigFile = path }))
	key := h.newKey()
	r := h.submit(key, map[string]any{"mode": "unify", "prompt": "How tall is the Eiffel Tower?", "models": map[string]any{"provider_a": "local-small", "provider_d": "mistral-medium-latest"}})
	must(t, r.status == 202, "submit: %d %s", r.status, r.body)
	res := h.wait(key, r.json(t)["request_id"].(string), 60*time.Second)
	must(t, res["status"] == "completed", "status %v: %v", res["status"], res["error"])
	must(t, jsonPath(res, "synthesis", "provider") == "provider_a", "synthesis by %v", jsonPath(res, "synthesis"))
	mu.Lock()
	defer mu.Unlock()
	must(t, refused == 1, "the host refused %d prompts, want the synthesis's first", refused)
	must(t, cut == 1, "%d prompts were cut, want the synthesis's retry", cut)
	must(t, maxAsked > 0 && maxAsked <= 256, "a request asked for %d output tokens, want at most the row's 256", maxAsked)
}
