package handlers

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
)

// parseFrames splits SSE output into events as a browser's EventSource does:
// blocks separated by a blank line, fields "id", "event", "data".
func parseFrames(raw string) []map[string]string {
	var out []map[string]string
	for _, block := range strings.Split(raw, "\n\n") {
		if block == "" {
			continue
		}
		ev := map[string]string{}
		for _, line := range strings.Split(block, "\n") {
			name, value, _ := strings.Cut(line, ":")
			ev[name] += strings.TrimPrefix(value, " ")
		}
		out = append(out, ev)
	}
	return out
}

// FuzzSSEFrame: whatever text an event carries (model output echoed in a
// progress message, for example), it is framed as exactly one SSE event whose
// data decodes back to the same value.
func FuzzSSEFrame(f *testing.F) {
	f.Add(uint64(1), "provider_a answered")
	f.Add(uint64(7), "line\nbreak\r\nand\n\ndouble")
	f.Add(uint64(1<<63), "data: injected\n\nevent: result")
	f.Fuzz(func(t *testing.T, seq uint64, msg string) {
		w := httptest.NewRecorder()
		writeEvent(w, seq, sseEvent{"progress", Progress{RequestID: "req_x", Stage: "running_models", ProgressPercent: 5, Message: msg}})
		frames := parseFrames(w.Body.String())
		if len(frames) != 1 {
			t.Fatalf("one event became %d frames: %q", len(frames), w.Body.String())
		}
		fr := frames[0]
		if fr["event"] != "progress" {
			t.Fatalf("event name %q", fr["event"])
		}
		var p Progress
		if err := json.Unmarshal([]byte(fr["data"]), &p); err != nil {
			t.Fatalf("data does not decode: %v: %q", err, fr["data"])
		}
		// JSON carries text: invalid UTF-8 arrives as U+FFFD, as encoding/json sends it.
		raw, _ := json.Marshal(msg)
		var want string
		_ = json.Unmarshal(raw, &want)
		if p.Message != want {
			t.Fatalf("message changed in transit: %q != %q", p.Message, want)
		}
	})
}
