package app

import (
	"bytes"
	"context"
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

	"github.com/crosscheck/crosscheck/internal/byom"
	"github.com/crosscheck/crosscheck/internal/config"
	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/modes"
	"github.com/crosscheck/crosscheck/internal/providers"
	"github.com/crosscheck/crosscheck/internal/providers/simulated"
)

// byomHost is a customer's model host that speaks every BYOM kind's wire
// format (Chat Completions, the Responses API, Anthropic Messages, Gemini
// generateContent) and plays each mode step with the simulated backend. It
// accepts one key and one model; it echoes a wrong key in its error, as
// some hosts do.
type byomHost struct {
	srv   *httptest.Server
	key   string
	model string

	mu sync.Mutex
	// keys are the credentials received, by wire format.
	keys map[string][]string
	// headers are the values of X-Customer received.
	headers []string
	// apiVersions are the api-version parameters received.
	apiVersions []string
	// calls counts the completions answered or failed after the test call.
	calls int
	// fail makes every completion fail with 500.
	fail bool
	// echo makes a failed completion's error message repeat the key and
	// the X-Customer header it received, then 600 more characters.
	echo bool
	// bodies are the request bodies received, by model.
	bodies map[string][]string
	// pad, when set, is how many bytes a Chat Completions answer without
	// structured output is padded to.
	pad int
}

func newBYOMHost(t *testing.T, key, model string) *byomHost {
	h := &byomHost{key: key, model: model, keys: map[string][]string{}, bodies: map[string][]string{}}
	h.srv = httptest.NewServer(h)
	t.Cleanup(h.srv.Close)
	return h
}

// received returns the credentials the host received in format.
func (h *byomHost) received(format string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.keys[format]...)
}

func (h *byomHost) setFail(fail bool) {
	h.mu.Lock()
	h.fail = fail
	h.mu.Unlock()
}

func (h *byomHost) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var req map[string]any
	_ = json.Unmarshal(body, &req)
	w.Header().Set("Content-Type", "application/json")
	var format, key string
	model, _ := req["model"].(string)
	switch {
	case strings.HasSuffix(r.URL.Path, "/chat/completions"):
		format, key = "chat", strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		if r.Header.Get("api-key") != "" {
			format, key = "azure", r.Header.Get("api-key")
			if strings.Contains(r.URL.Path, "/deployments/") {
				model = h.model // the deployment names the model
			}
		}
	case strings.HasSuffix(r.URL.Path, "/responses"):
		format, key = "responses", strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	case strings.HasSuffix(r.URL.Path, "/messages"):
		format, key = "messages", r.Header.Get("X-Api-Key")
	case strings.HasSuffix(r.URL.Path, ":generateContent"):
		format, key = "gemini", r.Header.Get("X-Goog-Api-Key")
		model = strings.TrimSuffix(r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:], ":generateContent")
	default:
		http.Error(w, `{"error":{"message":"no such route"}}`, http.StatusNotFound)
		return
	}
	h.mu.Lock()
	h.keys[format] = append(h.keys[format], key)
	h.bodies[model] = append(h.bodies[model], string(body))
	h.headers = append(h.headers, r.Header.Get("X-Customer"))
	h.apiVersions = append(h.apiVersions, r.URL.Query().Get("api-version"))
	fail, echo, pad := h.fail, h.echo, h.pad
	if key == h.key && model == h.model {
		h.calls++
	}
	h.mu.Unlock()
	switch {
	case key != h.key:
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprintf(w, `{"error":{"message":"Incorrect API key provided: %s. You can find your API key at https://example.com","type":"invalid_request_error","code":"invalid_api_key"}}`, key)
		return
	case model != h.model:
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprintf(w, `{"error":{"message":"The model %s does not exist","type":"invalid_request_error","code":"model_not_found"}}`, model)
		return
	case fail && echo:
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprintf(w, `{"error":{"message":"the GPU caught fire; key %s header %s %s","type":"server_error"}}`,
			key, r.Header.Get("X-Customer"), strings.Repeat("y", 600))
		return
	case fail:
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprint(w, `{"error":{"message":"the GPU caught fire","type":"server_error"}}`)
		return
	}
	switch format {
	case "chat", "azure":
		out := playStep(req)
		if pad > len(out.Text) && req["response_format"] == nil {
			out.Text += strings.Repeat("x", pad-len(out.Text))
		}
		fmt.Fprintf(w, `{"id":"chatcmpl-1","object":"chat.completion","created":1760000000,"model":%q,"choices":[{"index":0,"message":{"role":"assistant","content":%q},"finish_reason":"stop"}],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`,
			model, out.Text, out.Usage.InputTokens, out.Usage.OutputTokens, out.Usage.InputTokens+out.Usage.OutputTokens)
	case "responses":
		fmt.Fprintf(w, `{"id":"resp_1","object":"response","created_at":1760000000,"status":"completed","model":%q,"output":[{"type":"message","id":"msg_1","status":"completed","role":"assistant","content":[{"type":"output_text","text":"BYOM via Responses says hello","annotations":[]}]}],"usage":{"input_tokens":20,"output_tokens":30,"total_tokens":50,"input_tokens_details":{"cached_tokens":0},"output_tokens_details":{"reasoning_tokens":0}}}`, model)
	case "messages":
		fmt.Fprintf(w, `{"id":"msg_1","type":"message","role":"assistant","model":%q,"content":[{"type":"text","text":"BYOM via Messages says hello"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":21,"output_tokens":31}}`, model)
	case "gemini":
		fmt.Fprint(w, `{"candidates":[{"content":{"role":"model","parts":[{"text":"BYOM via Gemini says hello"}]},"finishReason":"STOP","index":0}],"usageMetadata":{"promptTokenCount":22,"candidatesTokenCount":32,"totalTokenCount":54}}`)
	}
}

// stepOfSchema is the mode step each structured-output schema serves.
var stepOfSchema = map[string]string{
	modes.SchemaSynthesis: events.StepSynthesis, modes.SchemaRevision: events.StepRevise,
	modes.SchemaDisagreements: events.StepFindDisagreements, modes.SchemaAnswer: events.StepRewrite,
	modes.SchemaClaims: events.StepExtractClaims, modes.SchemaMerged: events.StepMergeClaims,
	modes.SchemaAssessments: events.StepAssessClaims,
}

// playStep answers a Chat Completions request as the simulated backend
// plays the step it serves: the step from the schema name, or research
// from its instructions.
func playStep(req map[string]any) providers.Response {
	var msgs []providers.Message
	for _, m := range req["messages"].([]any) {
		role, _ := jsonPath(m, "role").(string)
		var text string
		switch c := jsonPath(m, "content").(type) {
		case string:
			text = c
		case []any:
			for _, p := range c {
				if s, ok := jsonPath(p, "text").(string); ok {
					text += s
				}
			}
		}
		msgs = append(msgs, providers.Message{Role: role, Content: text})
	}
	purpose := events.StepAnswer
	if name, ok := jsonPath(req, "response_format", "json_schema", "name").(string); ok {
		purpose = stepOfSchema[name]
	} else if len(msgs) > 0 && strings.HasPrefix(msgs[0].Content, "Answer the question accurately.") {
		purpose = events.StepResearch
	}
	model, _ := req["model"].(string)
	resp, _ := simulated.New("custom", 0).Complete(context.Background(), &providers.Request{Model: model, Purpose: purpose, Messages: msgs})
	return *resp
}

// connect connects a model to the account and returns the response.
func (h *harness) connect(accountID string, body map[string]any) response {
	h.t.Helper()
	return h.admin("POST", "/admin/v1/accounts/"+accountID+"/models", body)
}

// connectOK connects an openai-compatible model of host and returns its id.
func (h *harness) connectOK(accountID string, host *byomHost) string {
	h.t.Helper()
	r := h.connect(accountID, map[string]any{"name": "local llama", "kind": "openai-compatible", "base_url": host.srv.URL + "/v1",
		"model": host.model, "api_key": host.key, "capabilities": map[string]any{"structured_output": true, "context_window": 8192}})
	if r.status != 201 {
		h.t.Fatalf("connect: %d %s", r.status, r.body)
	}
	return r.json(h.t)["model_id"].(string)
}

const byomKey = "sk-byom-7f3a9c1e5d2b8a4f6e0c"

// byomAccount starts a service and a host of model, and connects the
// model to a new account; it returns the account, a key of it and the
// model's id.
func byomAccount(t *testing.T, model string) (h *harness, host *byomHost, acct, key, id string) {
	host = newBYOMHost(t, byomKey, model)
	h = newHarness(t)
	acct = h.account()
	key = h.key(acct)
	return h, host, acct, key, h.connectOK(acct, host)
}

func TestBYOMConnect(t *testing.T) {
	host := newBYOMHost(t, byomKey, "llama3.1:8b")
	h := newHarness(t)
	acct := h.account()
	key := h.key(acct)
	base := map[string]any{"name": "local llama", "kind": "openai-compatible", "base_url": host.srv.URL + "/v1", "model": "llama3.1:8b", "api_key": byomKey,
		"capabilities": map[string]any{"images": false, "pdf": false, "web_search": false, "structured_output": true, "context_window": 8192},
		"headers":      map[string]any{"X-Customer": "acme"}}
	with := func(k string, v any) map[string]any {
		out := map[string]any{}
		for kk, vv := range base {
			out[kk] = vv
		}
		out[k] = v
		return out
	}

	// A wrong key is refused, saying the key was rejected, without echoing it.
	r := h.connect(acct, with("api_key", "sk-wrong-0123456789"))
	must(t, r.status == 400 && r.errCode(t) == "connection_failed", "wrong key: %d %s", r.status, r.body)
	must(t, strings.Contains(string(r.body), "rejected the API key") && !strings.Contains(string(r.body), "sk-wrong"), "wrong key message: %s", r.body)
	// A model the host does not have is refused, naming the model.
	r = h.connect(acct, with("model", "llama9"))
	must(t, r.status == 400 && r.errCode(t) == "connection_failed" && strings.Contains(string(r.body), `\"llama9\"`), "missing model: %d %s", r.status, r.body)
	// An unreachable host is refused, or saved unverified when asked.
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	r = h.connect(acct, with("base_url", closed.URL+"/v1"))
	must(t, r.status == 400 && r.errCode(t) == "connection_failed" && strings.Contains(string(r.body), "cannot be reached"), "unreachable: %d %s", r.status, r.body)
	unreachable := with("base_url", closed.URL+"/v1")
	unreachable["allow_unverified"] = true
	r = h.connect(acct, unreachable)
	must(t, r.status == 201 && r.json(t)["state"] == "unverified", "unverified: %d %s", r.status, r.body)
	// Bad requests.
	for _, c := range []struct {
		field string
		value any
	}{{"kind", "bedrock"}, {"base_url", "file:///etc/passwd"}, {"base_url", "http://169.254.169.254/v1"}, {"name", ""}, {"model", ""},
		{"headers", map[string]any{"Host": "evil"}}, {"capabilities", map[string]any{"context_window": -1}}} {
		r = h.connect(acct, with(c.field, c.value))
		must(t, r.status == 400 && r.errCode(t) == "invalid_request", "%s=%v: %d %s", c.field, c.value, r.status, r.body)
	}
	r = h.connect(acct, map[string]any{"name": "x", "kind": "anthropic", "base_url": host.srv.URL, "model": "m"})
	must(t, r.status == 400 && strings.Contains(string(r.body), "api_key is required"), "anthropic without a key: %d %s", r.status, r.body)

	// The right connection is saved: the fixed names, and never the key.
	r = h.connect(acct, base)
	must(t, r.status == 201, "connect: %d %s", r.status, r.body)
	got := r.json(t)
	id, _ := got["model_id"].(string)
	must(t, strings.HasPrefix(id, "byom_") && got["name"] == "local llama" && got["kind"] == "openai-compatible" && got["base_url"] == host.srv.URL+"/v1" &&
		got["model"] == "llama3.1:8b" && got["state"] == "active" && got["created_at"] != nil && jsonPath(got, "capabilities", "structured_output") == true,
		"connect response: %s", r.body)
	must(t, !strings.Contains(string(r.body), byomKey) && !strings.Contains(string(r.body), "acme"), "the response holds the key or a header value: %s", r.body)
	must(t, slicesContain(host.received("chat"), byomKey), "the host received %v, not the key", host.received("chat"))
	host.mu.Lock()
	must(t, host.headers[len(host.headers)-1] == "acme", "the declared header did not reach the host: %v", host.headers)
	host.mu.Unlock()

	r = h.admin("GET", "/admin/v1/accounts/"+acct+"/models", nil)
	must(t, r.status == 200 && len(r.json(t)["models"].([]any)) == 2, "list: %d %s", r.status, r.body)
	r = h.admin("GET", "/admin/v1/accounts/"+acct+"/models/"+id, nil)
	must(t, r.status == 200 && r.json(t)["model_id"] == id, "get: %d %s", r.status, r.body)
	for _, path := range []string{"/admin/v1/accounts/acct_00000000000000000000000000/models", "/admin/v1/accounts/nope/models"} {
		r = h.admin("GET", path, nil)
		must(t, r.status == 404 && r.errCode(t) == "not_found", "%s: %d %s", path, r.status, r.body)
	}
	r = h.admin("GET", "/admin/v1/accounts/"+acct+"/models/byom_01aaaaaaaaaaaaaaaaaaaaaaaa", nil)
	must(t, r.status == 404 && r.errCode(t) == "not_found", "get unknown: %d %s", r.status, r.body)
	r = h.admin("POST", "/admin/v1/accounts/"+acct+"/models/"+id+"/test", nil)
	must(t, r.status == 200 && jsonPath(r.json(t), "last_test", "ok") == true, "test: %d %s", r.status, r.body)

	// The custom group lists the account's models, and only to it.
	r = h.api("GET", "/v1/models", key, nil)
	groups := r.json(t)["groups"].([]any)
	custom := groups[len(groups)-1]
	must(t, jsonPath(custom, "name") == "custom" && len(jsonPath(custom, "models").([]any)) == 2, "custom group: %v", custom)
	must(t, jsonPath(custom, "models", 1, "model_id") == id && jsonPath(custom, "models", 1, "billing") == "customer" &&
		jsonPath(custom, "models", 1, "kind") == "openai-compatible", "custom model: %v", custom)
	other := h.newKey()
	r = h.api("GET", "/v1/models", other, nil)
	groups = r.json(t)["groups"].([]any)
	must(t, len(jsonPath(groups[len(groups)-1], "models").([]any)) == 0, "another account sees the models: %s", r.body)
	must(t, !strings.Contains(h.logs.String(), byomKey), "the key is in the logs")
}

func slicesContain(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// modelEntry returns the result's entry of a model key (provider or BYOM id).
func modelEntry(res map[string]any, key string) map[string]any {
	for _, m := range res["models"].([]any) {
		mm := m.(map[string]any)
		if mm["custom_model"] == key || mm["custom_model"] == nil && mm["provider"] == key {
			return mm
		}
	}
	return nil
}

func TestBYOMInEveryMode(t *testing.T) {
	h, host, acct, key, id := byomAccount(t, "llama3.1:8b")
	balance := func() float64 {
		return h.admin("GET", "/admin/v1/accounts/"+acct, nil).json(t)["balance"].(float64)
	}
	for _, mode := range []string{"unify", "justify", "verify"} {
		t.Run(mode+"/alone", func(t *testing.T) {
			before := balance()
			r := h.api("POST", "/v1/estimate-cost", key, map[string]any{"mode": mode, "prompt": "When was the Eiffel Tower completed?", "models": map[string]any{}, "custom_models": []string{id}})
			must(t, r.status == 200, "estimate: %d %s", r.status, r.body)
			must(t, jsonPath(r.json(t), "estimated_credits") == 0.0, "the estimate of a BYOM-only query is not 0: %s", r.body)
			r = h.submit(key, map[string]any{"mode": mode, "prompt": "When was the Eiffel Tower completed?", "models": map[string]any{}, "custom_models": []string{id}})
			must(t, r.status == 202, "submit: %d %s", r.status, r.body)
			res := h.wait(key, r.json(t)["request_id"].(string), 60*time.Second)
			must(t, res["status"] == "completed", "status %v: %v", res["status"], res["error"])
			must(t, len(res["models"].([]any)) == 1, "models: %v", res["models"])
			m := modelEntry(res, id)
			must(t, m != nil && m["provider"] == "custom" && m["status"] == "answered" && m["credits"] == 0.0, "BYOM entry: %v", m)
			must(t, jsonPath(m, "usage", "output_tokens").(float64) > 0, "BYOM usage not reported: %v", m)
			must(t, jsonPath(res, "credits", "charged") == 0.0, "a BYOM-only query was charged: %v", res["credits"])
			must(t, balance() == before, "the balance moved from %v to %v", before, balance())
			if mode == "verify" {
				must(t, len(jsonPath(res, "verify", "claims").([]any)) > 0, "no claims: %v", res["verify"])
			}
			// The BYOM synthesizes a BYOM-only query, free.
			must(t, jsonPath(res, "synthesis", "provider") == "custom" && jsonPath(res, "synthesis", "custom_model") == id &&
				jsonPath(res, "synthesis", "credits") == 0.0, "synthesis: %v", res["synthesis"])
		})
		t.Run(mode+"/mixed", func(t *testing.T) {
			r := h.submit(key, map[string]any{"mode": mode, "prompt": "When was the Eiffel Tower completed?", "custom_models": []string{id}})
			must(t, r.status == 202, "submit: %d %s", r.status, r.body)
			res := h.wait(key, r.json(t)["request_id"].(string), 60*time.Second)
			must(t, res["status"] == "completed", "status %v: %v", res["status"], res["error"])
			must(t, len(res["models"].([]any)) == 5, "models: %v", res["models"])
			m := modelEntry(res, id)
			must(t, m != nil && m["provider"] == "custom" && m["custom_model"] == id && m["status"] == "answered" && m["credits"] == 0.0, "BYOM entry: %v", m)
			must(t, modelEntry(res, "provider_a")["credits"].(float64) > 0, "first-party entry free: %v", modelEntry(res, "provider_a"))
			if mode == "justify" {
				must(t, len(jsonPath(res, "justify", "rounds").([]any)) == 2, "rounds: %v", res["justify"])
			}
		})
	}
	must(t, slicesContain(host.received("chat"), byomKey), "the host never received the key")
	for _, k := range host.received("chat") {
		must(t, k == byomKey, "the host received another credential: %q", k)
	}
}

func TestBYOMRefusedOnQueries(t *testing.T) {
	h, host, acct, key, id := byomAccount(t, "llama3.1:8b")
	otherAcct := h.account()
	otherKey := h.key(otherAcct)
	otherID := h.connectOK(otherAcct, host)
	q := func(k string, ids ...string) response {
		return h.submit(k, map[string]any{"mode": "unify", "prompt": "hi", "models": map[string]any{}, "custom_models": ids})
	}
	r := q(key, otherID)
	must(t, r.status == 400 && r.errCode(t) == "invalid_model" && strings.Contains(string(r.body), otherID), "another account's model: %d %s", r.status, r.body)
	r = q(otherKey, id)
	must(t, r.status == 400 && r.errCode(t) == "invalid_model", "another account's model: %d %s", r.status, r.body)
	r = q(key, "byom_nope")
	must(t, r.status == 400 && r.errCode(t) == "invalid_model" && strings.Contains(string(r.body), "byom_nope"), "unknown: %d %s", r.status, r.body)
	r = q(key, "llama")
	must(t, r.status == 400 && r.errCode(t) == "invalid_models", "malformed: %d %s", r.status, r.body)
	r = q(key, id, id)
	must(t, r.status == 400 && r.errCode(t) == "invalid_models", "twice: %d %s", r.status, r.body)

	r = h.admin("POST", "/admin/v1/accounts/"+acct+"/models/"+id+"/disable", nil)
	must(t, r.status == 200 && r.json(t)["state"] == "disabled", "disable: %d %s", r.status, r.body)
	r = q(key, id)
	must(t, r.status == 400 && r.errCode(t) == "invalid_model" && strings.Contains(string(r.body), "disabled"), "disabled: %d %s", r.status, r.body)
	r = h.api("GET", "/v1/models", key, nil)
	must(t, !strings.Contains(string(r.body), id), "a disabled model is listed: %s", r.body)
	r = h.admin("POST", "/admin/v1/accounts/"+acct+"/models/"+id+"/enable", nil)
	must(t, r.status == 200 && r.json(t)["state"] == "active", "enable: %d %s", r.status, r.body)
	r = q(key, id)
	must(t, r.status == 202, "enabled: %d %s", r.status, r.body)
	h.wait(key, r.json(t)["request_id"].(string), 30*time.Second)
	r = h.admin("DELETE", "/admin/v1/accounts/"+acct+"/models/"+id, nil)
	must(t, r.status == 200 && r.json(t)["state"] == "deleted", "delete: %d %s", r.status, r.body)
	r = q(key, id)
	must(t, r.status == 400 && r.errCode(t) == "invalid_model", "deleted: %d %s", r.status, r.body)
	r = h.admin("GET", "/admin/v1/accounts/"+acct+"/models/"+id, nil)
	must(t, r.status == 404, "a deleted model is found: %d %s", r.status, r.body)

	// Every lifecycle change is an event on the account.
	var names []string
	for _, rec := range h.streamRecords("ACCOUNTS") {
		if strings.HasPrefix(rec.Envelope.Subject, "ev.account."+acct+".byom_") {
			names = append(names, rec.Envelope.Type)
		}
	}
	want := "account.byom_connected account.byom_disabled account.byom_enabled account.byom_deleted"
	must(t, strings.Join(names, " ") == want, "events %v, want %s", names, want)
}

// A failing BYOM fails alone, with its class in the result; nothing runs
// in its place.
func TestBYOMFailureNoFallback(t *testing.T) {
	h, host, _, key, id := byomAccount(t, "llama3.1:8b")
	host.setFail(true)

	r := h.submit(key, map[string]any{"mode": "unify", "prompt": "hi", "custom_models": []string{id}})
	must(t, r.status == 202, "submit: %d %s", r.status, r.body)
	res := h.wait(key, r.json(t)["request_id"].(string), 30*time.Second)
	must(t, res["status"] == "completed", "mixed: %v", res)
	m := modelEntry(res, id)
	must(t, m["status"] == "failed" && jsonPath(m, "error", "class") == "host_error", "BYOM entry: %v", m)
	must(t, len(res["models"].([]any)) == 5, "models: %v", res["models"])

	r = h.submit(key, map[string]any{"mode": "unify", "prompt": "hi", "models": map[string]any{}, "custom_models": []string{id}})
	res = h.wait(key, r.json(t)["request_id"].(string), 30*time.Second)
	must(t, res["status"] == "failed" && jsonPath(res, "error", "code") == "provider_error", "alone: %v", res)
	must(t, len(res["models"].([]any)) == 1 && modelEntry(res, id)["status"] == "failed", "a model ran in the BYOM's place: %v", res["models"])
	must(t, jsonPath(res, "credits", "charged") == 0.0, "charged: %v", res["credits"])
}

// A customer-owned model's answer longer than byom.MaxAnswerBytes fails
// that model, and the query goes on without it: unbounded, an answer too
// large to be stored as an event held the query running (and its
// reservation open) through every redelivery, and a long one fed every
// first-party call that reads it.
func TestBYOMAnswerTooLong(t *testing.T) {
	h, host, _, key, id := byomAccount(t, "llama3.1:8b")
	for _, tc := range []struct {
		pad    int
		status string
		bound  int // the bound the message names
	}{{byom.MaxAnswerBytes, "answered", 0}, {byom.MaxAnswerBytes + 1, "failed", byom.MaxAnswerBytes}, {9 << 20, "failed", byom.MaxResponseBytes}} {
		host.mu.Lock()
		host.pad = tc.pad
		host.mu.Unlock()
		r := h.submit(key, map[string]any{"mode": "unify", "prompt": "hi", "custom_models": []string{id}})
		must(t, r.status == 202, "submit: %d %s", r.status, r.body)
		res := h.wait(key, r.json(t)["request_id"].(string), 30*time.Second)
		must(t, res["status"] == "completed", "an answer of %d bytes: %v", tc.pad, res["status"])
		m := modelEntry(res, id)
		must(t, m["status"] == tc.status, "an answer of %d bytes: the BYOM %v, want %s", tc.pad, m["status"], tc.status)
		if tc.status == "failed" {
			msg, _ := jsonPath(m, "error", "message").(string)
			must(t, jsonPath(m, "error", "class") == "host_error" && strings.Contains(msg, fmt.Sprint(tc.bound)),
				"an answer of %d bytes: %v", tc.pad, m["error"])
		} else {
			must(t, len(m["answer"].(string)) == tc.pad, "an answer of %d bytes stored as %d", tc.pad, len(m["answer"].(string)))
		}
	}
}

// readTree returns every file under dir.
func readTree(t *testing.T, dir string) map[string][]byte {
	out := map[string][]byte{}
	err := filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err == nil {
			out[path] = b
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// The provider key is only ciphertext at rest; rotation seals it under a
// new key with queries before and after, and across a restart.
func TestBYOMKeyAtRestAndRotation(t *testing.T) {
	h, _, acct, key, id := byomAccount(t, "llama3.1:8b")
	ask := func(what string) {
		t.Helper()
		r := h.submit(key, map[string]any{"mode": "unify", "prompt": "hi", "models": map[string]any{}, "custom_models": []string{id}})
		must(t, r.status == 202, "%s: submit %d %s", what, r.status, r.body)
		res := h.wait(key, r.json(t)["request_id"].(string), 30*time.Second)
		must(t, res["status"] == "completed", "%s: %v", what, res["error"])
	}
	ask("before the rotation")
	before := h.admin("GET", "/admin/v1/accounts/"+acct+"/models/"+id, nil).json(t)["key_id"]
	r := h.admin("POST", "/admin/v1/master-key/rotate", nil)
	must(t, r.status == 200 && jsonPath(r.json(t), "rotated") == 1.0, "rotate: %d %s", r.status, r.body)
	after := h.admin("GET", "/admin/v1/accounts/"+acct+"/models/"+id, nil).json(t)["key_id"]
	must(t, before != after && after == jsonPath(r.json(t), "key_id"), "key id %v → %v (%s)", before, after, r.body)
	ask("after the rotation")
	h.restart(false)
	ask("after a restart")

	info, err := os.Stat(filepath.Join(h.dir, "master-keys"))
	must(t, err == nil && info.Mode().Perm() == 0o600, "master-keys: %v %v", err, info)
	h.m.Close()
	for path, b := range readTree(t, h.dir) {
		must(t, !strings.Contains(string(b), byomKey), "the plaintext key is in %s", path)
	}
	must(t, !strings.Contains(h.logs.String(), byomKey), "the key is in the logs")

	// crosscheck keys rotate, offline; the audit and the export see the
	// events, never the key.
	var out bytes.Buffer
	must(t, RotateKeys(context.Background(), h.cfg, &out) == nil && strings.Contains(out.String(), "1 secrets sealed again"), "keys rotate: %s", out.String())
	var export, errOut bytes.Buffer
	must(t, Events(context.Background(), h.cfg, []string{"export", "-stream", "accounts"}, &export, &errOut) == 0, "export: %s", errOut.String())
	must(t, strings.Count(export.String(), `"type":"account.byom_key_rotated"`) == 2 && strings.Contains(export.String(), `"type":"account.byom_connected"`),
		"the export lacks the BYOM events: %s", export.String())
	must(t, !strings.Contains(export.String(), byomKey), "the export holds the key")
	h.start()
	ask("after the offline rotation")
	h.closeAndAudit()
}

// A process without the key that sealed a model's secret fails that model
// with a clear error and serves the rest.
func TestBYOMUndecryptable(t *testing.T) {
	h, _, _, key, id := byomAccount(t, "llama3.1:8b")
	h.m.Close()
	h.cfg.MasterKey = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="
	h.start()
	r := h.submit(key, map[string]any{"mode": "unify", "prompt": "hi", "custom_models": []string{id}})
	must(t, r.status == 202, "submit: %d %s", r.status, r.body)
	res := h.wait(key, r.json(t)["request_id"].(string), 30*time.Second)
	must(t, res["status"] == "completed", "the rest is not served: %v", res)
	m := modelEntry(res, id)
	must(t, m["status"] == "failed" && strings.Contains(jsonPath(m, "error", "message").(string), "cannot be decrypted"), "BYOM entry: %v", m)
	must(t, strings.Contains(h.logs.String(), "cannot be decrypted"), "no log line says why")
}

// Each host kind is called through its own wire format with the key it expects.
func TestBYOMKinds(t *testing.T) {
	host := newBYOMHost(t, byomKey, "their-model")
	h := newHarness(t)
	acct := h.account()
	key := h.key(acct)
	for _, c := range []struct {
		kind, base, format, text string
		extra                    map[string]any
	}{
		{"openai", host.srv.URL + "/v1", "responses", "BYOM via Responses says hello", nil},
		{"anthropic", host.srv.URL, "messages", "BYOM via Messages says hello", nil},
		{"gemini", host.srv.URL, "gemini", "BYOM via Gemini says hello", nil},
		{"azure-openai", host.srv.URL + "/openai/deployments/dep1", "azure", "", map[string]any{"api_version": "2024-10-21"}},
	} {
		t.Run(c.kind, func(t *testing.T) {
			body := map[string]any{"name": c.kind, "kind": c.kind, "base_url": c.base, "model": "their-model", "api_key": byomKey,
				"capabilities": map[string]any{}}
			for k, v := range c.extra {
				body[k] = v
			}
			r := h.connect(acct, body)
			must(t, r.status == 201, "connect: %d %s", r.status, r.body)
			id := r.json(t)["model_id"].(string)
			r = h.submit(key, map[string]any{"mode": "unify", "prompt": "hi", "models": map[string]any{}, "custom_models": []string{id}})
			must(t, r.status == 202, "submit: %d %s", r.status, r.body)
			res := h.wait(key, r.json(t)["request_id"].(string), 30*time.Second)
			must(t, res["status"] == "completed", "status: %v", res)
			if c.text != "" {
				must(t, jsonPath(res, "answer", "text") == c.text, "answer: %v", res["answer"])
			}
			got := host.received(c.format)
			must(t, len(got) >= 2, "the host received %d calls in %s", len(got), c.format)
			for _, k := range got {
				must(t, k == byomKey, "%s received %q", c.format, k)
			}
		})
	}
	host.mu.Lock()
	must(t, slicesContain(host.apiVersions, "2024-10-21"), "azure: no api-version: %v", host.apiVersions)
	host.mu.Unlock()
}

// The embedded default allows loopback only; metadata addresses are
// refused even when the operator allows private and link-local ranges.
func TestBYOMSSRF(t *testing.T) {
	h := newHarness(t, withConfig(func(c *config.Config) {
		c.BYOMAllow, c.BYOMAllowSet = "10.0.0.0/8,169.254.0.0/16,127.0.0.0/8", true
	}))
	acct := h.account()
	for _, u := range []string{"http://169.254.169.254/v1", "http://[fd00:ec2::254]/v1", "http://metadata.google.internal/v1",
		"http://192.168.1.1/v1", "http://[::1]:11434/v1", "ftp://example.com/v1", "http://127.0.0.1:11434/v1/..%2f..%2fadmin/v1"} {
		r := h.connect(acct, map[string]any{"name": "x", "kind": "openai-compatible", "base_url": u, "model": "m", "allow_unverified": true})
		must(t, r.status == 400 && r.errCode(t) == "invalid_request" && strings.Contains(string(r.body), "base_url is refused"), "%s: %d %s", u, r.status, r.body)
	}
	r := h.connect(acct, map[string]any{"name": "x", "kind": "openai-compatible", "base_url": "http://10.255.255.1:9/v1", "model": "m", "allow_unverified": true})
	must(t, r.status != 400 || r.errCode(t) != "invalid_request", "an allowed private address is refused: %s", r.body)
}

// Files reach a BYOM as its declared capabilities allow: natively when it
// declares it reads the kind, else as their text (an image: a note).
func TestBYOMFilesShapedToCapabilities(t *testing.T) {
	host := newBYOMHost(t, byomKey, "llama3.1:8b")
	store := &memFiles{}
	h := newHarness(t, withFiles(store))
	acct := h.account()
	key := h.key(acct)
	pdf, img, _ := attachSamples(t, store, acct, h.clock.Now())
	connect := func(caps map[string]any) string {
		r := h.connect(acct, map[string]any{"name": "m", "kind": "openai-compatible", "base_url": host.srv.URL + "/v1", "model": "llama3.1:8b",
			"api_key": byomKey, "capabilities": caps})
		must(t, r.status == 201, "connect: %d %s", r.status, r.body)
		return r.json(t)["model_id"].(string)
	}
	vision := connect(map[string]any{"images": true, "pdf": true})
	plain := connect(map[string]any{})
	r := h.submit(key, map[string]any{"mode": "unify", "prompt": "At what temperature does the Kestrel reactor run?", "models": map[string]any{},
		"custom_models": []string{vision, plain}, "files": []string{pdf, img}})
	must(t, r.status == 202, "submit: %d %s", r.status, r.body)
	res := h.wait(key, r.json(t)["request_id"].(string), 30*time.Second)
	must(t, res["status"] == "completed", "status %v: %v", res["status"], res["error"])
	seen := map[string]string{}
	for _, m := range res["models"].([]any) {
		for _, f := range jsonPath(m, "files").([]any) {
			seen[jsonPath(m, "custom_model").(string)+"/"+jsonPath(f, "file_id").(string)] = jsonPath(f, "seen").(string)
		}
	}
	for k, want := range map[string]string{vision + "/" + pdf: "native", vision + "/" + img: "native", plain + "/" + pdf: "text", plain + "/" + img: "none"} {
		must(t, seen[k] == want, "%s seen %q, want %q", k, seen[k], want)
	}
	host.mu.Lock()
	var withImage, withText int
	for _, b := range host.bodies["llama3.1:8b"] {
		if strings.Contains(b, `"image_url"`) {
			withImage++
		}
		if strings.Contains(b, "## File: manual.pdf") {
			withText++
		}
	}
	host.mu.Unlock()
	must(t, withImage >= 1 && withText >= 1, "the host received %d calls with the image, %d with the PDF's text", withImage, withText)
}
