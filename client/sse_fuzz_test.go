package client

import (
	"io"
	"strings"
	"testing"
)

func TestSSEReader(t *testing.T) {
	raw := "retry: 2000\n\n: heartbeat\n\nid: 1\nevent: progress\ndata: {\"a\":1}\n\nid: 2\r\nevent: result\r\ndata: line1\r\ndata: line2\r\n\r\ndata: no id\n\nid: 9\nevent: progress\ndata: cut"
	r := newSSEReader(strings.NewReader(raw))
	want := []sseEvent{{"1", "progress", `{"a":1}`}, {"2", "result", "line1\nline2"}, {"2", "message", "no id"}}
	for i, w := range want {
		got, err := r.next()
		if err != nil || got != w {
			t.Fatalf("event %d = %+v, %v; want %+v", i, got, err, w)
		}
	}
	if _, err := r.next(); err != io.EOF {
		t.Fatalf("after the last whole event: %v; want io.EOF (the cut event dropped)", err)
	}
	if r.retry.Milliseconds() != 2000 {
		t.Fatalf("retry = %s", r.retry)
	}
}

func TestSSEReaderBoundsAnEvent(t *testing.T) {
	r := newSSEReader(io.MultiReader(strings.NewReader("data: "), strings.NewReader(strings.Repeat("x", maxEventBytes+1)), strings.NewReader("\n\n")))
	if _, err := r.next(); err != errEventTooLarge {
		t.Fatalf("err = %v; want errEventTooLarge", err)
	}
}

// FuzzSSEReader: any byte stream parses to events or an error, without a
// panic, and every event it returns is terminated by a blank line in the
// input.
func FuzzSSEReader(f *testing.F) {
	for _, s := range []string{
		"retry: 2000\n\nid: 1\nevent: progress\ndata: {}\n\n",
		"id: 3\r\nevent: error\r\ndata: {\"error\":{}}\r\n\r\n",
		": c\n\ndata\n\ndata:\n\n",
		"id: \x00\ndata: x\n\n",
		"retry: -5\nretry: x\n\n",
		"event: result\ndata: a\ndata: b\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r := newSSEReader(strings.NewReader(string(b)))
		for n := 0; ; n++ {
			ev, err := r.next()
			if err != nil {
				return
			}
			if ev.name == "" {
				t.Fatalf("event %d has no type", n)
			}
			if n > len(b) {
				t.Fatalf("more events than input bytes")
			}
		}
	})
}
