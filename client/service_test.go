package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/crosscheck/crosscheck/apiv1"
	"github.com/crosscheck/crosscheck/client"
	"github.com/crosscheck/crosscheck/internal/app/apptest"
)

// service is a crosscheck process the tests and examples of this package
// share; serviceURL and apiKey are its address and an account's key.
var (
	service    *apptest.Server
	serviceURL string
	apiKey     string
)

func TestMain(m *testing.M) {
	apptest.RunChildIfAsked()
	var err error
	if service, err = apptest.Start(apptest.WithSimLatency(20 * time.Millisecond)); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	serviceURL, apiKey = service.URL, service.Key
	code := m.Run()
	service.Close()
	os.Exit(code)
}

func newClient(t *testing.T) *client.Client {
	t.Helper()
	c, err := client.New(serviceURL, apiKey)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func TestSubmitAndWait(t *testing.T) {
	c, ctx := newClient(t), ctxFor(t)
	acc, err := c.Submit(ctx, apiv1.QueryRequest{Mode: "unify", Prompt: "Is the sky blue?"})
	if err != nil {
		t.Fatal(err)
	}
	if acc.RequestID == "" || acc.Status != client.StatusQueued || acc.IdempotentReplayed {
		t.Fatalf("accepted %+v", acc)
	}
	q, err := c.Wait(ctx, acc.RequestID)
	if err != nil || q.Status != client.StatusCompleted || q.Answer == nil || q.Answer.Text == "" || len(q.Models) == 0 {
		t.Fatalf("Wait = %+v, %v; want a completed query with an answer", q, err)
	}
	got, err := c.Get(ctx, acc.RequestID)
	if err != nil || got.RequestID != acc.RequestID || got.Status != client.StatusCompleted {
		t.Fatalf("Get = %+v, %v", got, err)
	}
}

func TestSubmitWithTheSameKeyIsReplayed(t *testing.T) {
	c, ctx := newClient(t), ctxFor(t)
	req := apiv1.QueryRequest{Mode: "unify", Prompt: "replay me"}
	key := client.NewIdempotencyKey()
	first, err := c.Submit(ctx, req, client.WithIdempotencyKey(key))
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.Submit(ctx, req, client.WithIdempotencyKey(key))
	if err != nil || again.RequestID != first.RequestID || !again.IdempotentReplayed {
		t.Fatalf("resubmit = %+v, %v; want %s replayed", again, err, first.RequestID)
	}
	req.Prompt = "another body"
	if _, err := c.Submit(ctx, req, client.WithIdempotencyKey(key)); !client.HasCode(err, client.CodeIdempotencyConflict) {
		t.Fatalf("same key, other body: %v; want idempotency_conflict", err)
	}
}

func TestErrorsAreTyped(t *testing.T) {
	c, ctx := newClient(t), ctxFor(t)
	cases := []struct {
		name   string
		call   func() error
		status int
		code   string
	}{
		{"unknown query", func() error { _, err := c.Get(ctx, "req_nope"); return err }, 404, client.CodeNotFound},
		{"bad mode", func() error {
			_, err := c.Submit(ctx, apiv1.QueryRequest{Mode: "guess", Prompt: "p"})
			return err
		}, 400, client.CodeInvalidMode},
		{"bad key", func() error {
			bad, _ := client.New(serviceURL, "xchk_00000000"+strings.Repeat("0", 32))
			_, err := bad.Models(ctx)
			return err
		}, 401, client.CodeInvalidAPIKey},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var e *client.Error
			err := tc.call()
			if !errors.As(err, &e) || e.Status != tc.status || e.Code != tc.code || e.Message == "" {
				t.Fatalf("err = %#v; want an *Error %d %s with a message", err, tc.status, tc.code)
			}
			if strings.Contains(err.Error(), apiKey[13:]) {
				t.Fatalf("the error %q shows the key's secret", err)
			}
		})
	}
}

func TestEstimateAndModels(t *testing.T) {
	c, ctx := newClient(t), ctxFor(t)
	est, err := c.Estimate(ctx, apiv1.QueryRequest{Mode: "justify", Prompt: "How old is the universe?"})
	if err != nil || est.Mode != "justify" || est.EstimatedCredits <= 0 || len(est.Calls) == 0 || !est.Sufficient {
		t.Fatalf("Estimate = %+v, %v", est, err)
	}
	cat, err := c.Models(ctx)
	if err != nil || len(cat.Groups) < 2 || len(cat.Groups[0].Models) == 0 || !cat.Groups[0].Simulated {
		t.Fatalf("Models = %+v, %v", cat, err)
	}
}

func TestUploadAndAttach(t *testing.T) {
	c, ctx := newClient(t), ctxFor(t)
	f, err := c.Upload(ctx, "notes.json", strings.NewReader(`{"note": "the meeting moved to Tuesday"}`))
	if err != nil || f.FileID == "" || f.Name != "notes.json" || f.Kind == "" {
		t.Fatalf("Upload = %+v, %v", f, err)
	}
	acc, err := c.Submit(ctx, apiv1.QueryRequest{Mode: "unify", Prompt: "When is the meeting?", Files: []string{f.FileID}})
	if err != nil {
		t.Fatal(err)
	}
	q, err := c.Stream(ctx, acc.RequestID, nil)
	if err != nil || len(q.Files) != 1 || q.Files[0].FileID != f.FileID {
		t.Fatalf("query = %+v, %v; want the file attached", q, err)
	}
}

// cutTransport ends the first cuts streams it carries after limit bytes,
// as a dropped connection would, mid-event.
type cutTransport struct {
	limit int
	cuts  atomic.Int32
	left  atomic.Int32
}

func (t *cutTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err == nil && strings.HasSuffix(r.URL.Path, "/stream") && t.left.Add(-1) >= 0 {
		t.cuts.Add(1)
		resp.Body = &cutBody{ReadCloser: resp.Body, left: t.limit}
	}
	return resp, err
}

type cutBody struct {
	io.ReadCloser
	left int
}

func (b *cutBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		b.ReadCloser.Close()
		return 0, io.ErrUnexpectedEOF
	}
	if len(p) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= n
	return n, err
}

func TestStreamResumesAfterADroppedConnection(t *testing.T) {
	c, ctx := newClient(t), ctxFor(t)
	acc, err := c.Submit(ctx, apiv1.QueryRequest{Mode: "justify", Prompt: "Which is the longest river?"})
	if err != nil {
		t.Fatal(err)
	}
	cut := &cutTransport{limit: 500}
	cut.left.Store(3)
	flaky := newClient(t)
	flaky.HTTP = &http.Client{Transport: cut}
	flaky.ReconnectDelay = 10 * time.Millisecond
	var got []client.Event
	q, err := flaky.Stream(ctx, acc.RequestID, func(ev client.Event) { got = append(got, ev) })
	if err != nil || q.Status != client.StatusCompleted {
		t.Fatalf("Stream = %+v, %v", q, err)
	}
	if cut.cuts.Load() != 3 {
		t.Fatalf("%d connections cut, want 3", cut.cuts.Load())
	}
	// The whole stream, read again in one go after the end, is the truth.
	var want []client.Event
	if _, err := c.Stream(ctx, acc.RequestID, func(ev client.Event) { want = append(want, ev) }); err != nil {
		t.Fatal(err)
	}
	ids := func(evs []client.Event) []string {
		var out []string
		for _, ev := range evs {
			out = append(out, ev.Type+"#"+ev.ID)
		}
		return out
	}
	if !slices.Equal(ids(got), ids(want)) {
		t.Fatalf("events across the drops:\n%v\nthe whole stream:\n%v", ids(got), ids(want))
	}
	if last := got[len(got)-1]; last.Type != client.EventResult || last.Result.RequestID != acc.RequestID {
		t.Fatalf("last event %+v: want the result", last)
	}
}

func TestStreamOfAnUnknownQueryIsTyped(t *testing.T) {
	c, ctx := newClient(t), ctxFor(t)
	if _, err := c.Stream(ctx, "req_nope", nil); !client.HasCode(err, client.CodeNotFound) {
		t.Fatalf("Stream of an unknown query = %v; want not_found", err)
	}
}
