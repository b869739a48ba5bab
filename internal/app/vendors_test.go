package app

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crosscheck/crosscheck/internal/config"
)

// vendors is one local server that speaks the four wire formats: the OpenAI
// Responses API, Chat Completions, Anthropic Messages and Gemini
// generateContent, as the official SDKs call them.
type vendors struct {
	srv  *httptest.Server
	mu   sync.Mutex
	auth map[string]string // wire format → the credential header it received
	// bodies are the request bodies each wire format received, in order.
	bodies map[string][]string
}

const synthesisJSON = `{"answer":"one answer from four vendors","conflicts":[{"topic":"key figure","positions":[{"model":"provider_a","position":"1"},{"model":"provider_b","position":"2"}],"resolution":"majority"}]}`

func newVendors(t *testing.T) *vendors {
	v := &vendors{auth: map[string]string{}, bodies: map[string][]string{}}
	v.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req map[string]any
		_ = json.Unmarshal(body, &req)
		w.Header().Set("Content-Type", "application/json")
		note := func(format, header string) {
			v.mu.Lock()
			v.auth[format] = r.Header.Get(header)
			v.bodies[format] = append(v.bodies[format], string(body))
			v.mu.Unlock()
		}
		switch {
		case strings.HasSuffix(r.URL.Path, "/responses"):
			note("responses", "Authorization")
			text := "OpenAI says: - key figure: 1"
			if format, _ := jsonPath(req, "text", "format", "type").(string); format == "json_schema" {
				text = synthesisJSON
			}
			fmt.Fprintf(w, `{"id":"resp_1","object":"response","created_at":1760000000,"status":"completed","model":%q,"output":[{"type":"message","id":"msg_1","status":"completed","role":"assistant","content":[{"type":"output_text","text":%q,"annotations":[]}]}],"usage":{"input_tokens":20,"output_tokens":30,"total_tokens":50,"input_tokens_details":{"cached_tokens":0},"output_tokens_details":{"reasoning_tokens":0}}}`, req["model"], text)
		case strings.HasSuffix(r.URL.Path, "/chat/completions"):
			note("chat", "Authorization")
			fmt.Fprintf(w, `{"id":"chatcmpl-1","object":"chat.completion","created":1760000000,"model":%q,"choices":[{"index":0,"message":{"role":"assistant","content":"Mistral says: - key figure: 1"},"finish_reason":"stop"}],"usage":{"prompt_tokens":23,"completion_tokens":33,"total_tokens":56}}`, req["model"])
		case strings.HasSuffix(r.URL.Path, "/messages"):
			note("messages", "X-Api-Key")
			fmt.Fprintf(w, `{"id":"msg_1","type":"message","role":"assistant","model":%q,"content":[{"type":"text","text":"Claude says: - key figure: 2"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":21,"output_tokens":31}}`, req["model"])
		case strings.HasSuffix(r.URL.Path, ":generateContent"):
			note("gemini", "X-Goog-Api-Key")
			fmt.Fprint(w, `{"candidates":[{"content":{"role":"model","parts":[{"text":"Gemini says: - key figure: 1"}]},"finishReason":"STOP","index":0}],"usageMetadata":{"promptTokenCount":22,"candidatesTokenCount":32,"totalTokenCount":54},"modelVersion":"gemini-2.5-flash"}`)
		default:
			http.Error(w, `{"error":{"message":"no such route"}}`, http.StatusNotFound)
		}
	}))
	t.Cleanup(v.srv.Close)
	return v
}

func writeConfig(t *testing.T, yaml string) string {
	path := filepath.Join(t.TempDir(), "crosscheck.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestUnifyOverTheFourVendorWireFormats(t *testing.T) {
	v := newVendors(t)
	t.Setenv("XC_OPENAI", "sk-openai-test")
	t.Setenv("XC_ANTHROPIC", "sk-ant-test")
	t.Setenv("XC_GEMINI", "gemini-test")
	t.Setenv("XC_MISTRAL", "mistral-test")
	t.Setenv("OPENAI_API_KEY", "must-not-be-used")
	path := writeConfig(t, fmt.Sprintf(`
providers:
  provider_a: {backend: openai, base_url: "%[1]s/v1/", api_key_env: XC_OPENAI}
  provider_b: {backend: anthropic, base_url: "%[1]s/", api_key_env: XC_ANTHROPIC}
  provider_c: {backend: gemini, base_url: "%[1]s/", api_key_env: XC_GEMINI}
  provider_d: {backend: openai-compatible, base_url: "%[1]s/v1/", api_key_env: XC_MISTRAL}
`, v.srv.URL))
	h := newHarness(t, withConfig(func(c *config.Config) { c.ConfigFile = path }))
	key := h.newKey()

	r := h.api("GET", "/v1/models", key, nil)
	for i, g := range r.json(t)["groups"].([]any)[:4] {
		must(t, jsonPath(g, "simulated") == false, "group %d is simulated although its credential is set: %v", i, g)
	}
	must(t, jsonPath(r.json(t), "groups", 0, "models", 0, "model_id") == "gpt-4.1", "provider_a's default: %s", r.body)

	id := h.submitOK(key, "How many vendors agree?")
	res := h.wait(key, id, 30*time.Second)
	must(t, res["status"] == "completed", "status %v: %v", res["status"], res["error"])
	want := []struct {
		vendor  string
		in, out float64
	}{{"OpenAI", 20, 30}, {"Claude", 21, 31}, {"Gemini", 22, 32}, {"Mistral", 23, 33}}
	for i, m := range res["models"].([]any) {
		w := want[i]
		must(t, jsonPath(m, "status") == "answered" && strings.HasPrefix(jsonPath(m, "answer").(string), w.vendor+" says"), "model %d: %v", i, m)
		must(t, jsonPath(m, "simulated") == false, "model %d labelled simulated", i)
		must(t, jsonPath(m, "usage", "input_tokens") == w.in && jsonPath(m, "usage", "output_tokens") == w.out, "model %d usage %v", i, jsonPath(m, "usage"))
		wantCredits := (w.in*500 + w.out*2000) / 1e6
		must(t, near(jsonPath(m, "credits").(float64), wantCredits), "model %d credits %v, want %v", i, jsonPath(m, "credits"), wantCredits)
	}
	must(t, jsonPath(res, "answer", "text") == "one answer from four vendors", "synthesis: %v", res["answer"])
	must(t, len(jsonPath(res, "answer", "conflicts").([]any)) == 1, "conflicts: %v", res["answer"])
	v.mu.Lock()
	defer v.mu.Unlock()
	for format, want := range map[string]string{"responses": "Bearer sk-openai-test", "messages": "sk-ant-test", "gemini": "gemini-test", "chat": "Bearer mistral-test"} {
		must(t, v.auth[format] == want, "%s credential header %q, want %q", format, v.auth[format], want)
	}
	must(t, !strings.Contains(h.logs.String(), "sk-openai-test") && !strings.Contains(h.logs.String(), "sk-ant-test"), "a vendor key appears in the logs")
}

// A provider whose credential is missing runs simulated and says so.
func TestProviderWithoutCredentialRunsSimulated(t *testing.T) {
	v := newVendors(t)
	t.Setenv("XC_OPENAI", "sk-openai-test")
	path := writeConfig(t, fmt.Sprintf(`
providers:
  provider_a: {backend: openai, base_url: "%s/v1/", api_key_env: XC_OPENAI}
  provider_b: {backend: anthropic, api_key_env: XC_UNSET_ANTHROPIC_KEY}
`, v.srv.URL))
	t.Setenv("XC_UNSET_ANTHROPIC_KEY", "")
	h := newHarness(t, withConfig(func(c *config.Config) { c.ConfigFile = path }))
	key := h.newKey()
	groups := h.api("GET", "/v1/models", key, nil).json(t)["groups"].([]any)
	must(t, jsonPath(groups[0], "simulated") == false && jsonPath(groups[1], "simulated") == true && jsonPath(groups[1], "backend") == "simulated",
		"catalog: a %v, b %v", groups[0], groups[1])
	must(t, strings.Contains(h.logs.String(), "no credential for this provider"), "the log does not say why provider_b is simulated")
	res := h.wait(key, h.submitOK(key, "who is real?"), 30*time.Second)
	models := res["models"].([]any)
	must(t, jsonPath(models[0], "simulated") == false && jsonPath(models[1], "simulated") == true, "result labels: %v %v", models[0], models[1])
	must(t, strings.Contains(jsonPath(models[1], "answer").(string), "simulated"), "the simulated answer is not labelled: %v", models[1])
}
