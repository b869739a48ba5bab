package app

import (
	"strings"
	"testing"
	"time"
)

// A BYOM call's error reaches the result as a short excerpt without the
// key or a header value, like the connection test's, so neither is stored
// in an event or the status bucket.
func TestBYOMCallErrorScrubbed(t *testing.T) {
	const headerSecret = "hdr-secret-5e1f9a77c0"
	host := newBYOMHost(t, byomKey, "llama3.1:8b")
	h := newHarness(t)
	acct := h.account()
	key := h.key(acct)
	r := h.connect(acct, map[string]any{"name": "local llama", "kind": "openai-compatible", "base_url": host.srv.URL + "/v1",
		"model": host.model, "api_key": host.key, "headers": map[string]any{"X-Customer": headerSecret}})
	must(t, r.status == 201, "connect: %d %s", r.status, r.body)
	id := r.json(t)["model_id"].(string)
	host.mu.Lock()
	host.fail, host.echo = true, true
	host.mu.Unlock()

	r = h.submit(key, map[string]any{"mode": "unify", "prompt": "hi", "models": map[string]any{}, "custom_models": []string{id}})
	must(t, r.status == 202, "submit: %d %s", r.status, r.body)
	res := h.wait(key, r.json(t)["request_id"].(string), 30*time.Second)
	msg, _ := jsonPath(modelEntry(res, id), "error", "message").(string)
	must(t, strings.Contains(msg, "the GPU caught fire"), "the error lost the host's message: %q", msg)
	must(t, !strings.Contains(msg, byomKey) && !strings.Contains(msg, headerSecret), "a secret is in the result: %q", msg)
	must(t, len([]rune(msg)) <= 200, "the host's body is echoed at length (%d characters): %q", len([]rune(msg)), msg)

	h.m.Close()
	for path, b := range readTree(t, h.dir) {
		must(t, !strings.Contains(string(b), headerSecret), "a header value is in %s", path)
	}
	must(t, !strings.Contains(h.logs.String(), headerSecret), "a header value is in the logs")
}
