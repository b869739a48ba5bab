package client_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/crosscheck/crosscheck/apiv1"
	"github.com/crosscheck/crosscheck/client"
	"github.com/crosscheck/crosscheck/internal/app/apptest"
)

// keyClient is a client of the shared service with key.
func keyClient(t *testing.T, url, key string) *client.Client {
	t.Helper()
	c, err := client.New(url, key)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// eventually calls check until it returns nil or the deadline passes, and
// fails the test with check's last error then.
func eventually(t *testing.T, within time.Duration, check func() error) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// List against the real service: the account's queries newest first, in
// pages that All walks with next_after, filtered by mode and status; another
// account's queries are never listed.
func TestListAgainstTheService(t *testing.T) {
	ctx := ctxFor(t)
	_, key, err := service.NewAccount()
	if err != nil {
		t.Fatal(err)
	}
	_, otherKey, err := service.NewAccount()
	if err != nil {
		t.Fatal(err)
	}
	c, other := keyClient(t, serviceURL, key), keyClient(t, serviceURL, otherKey)
	theirs, err := other.Submit(ctx, apiv1.QueryRequest{Mode: "unify", Prompt: "not yours"})
	if err != nil {
		t.Fatal(err)
	}
	modes := []string{"unify", "verify", "unify", "justify", "unify"}
	var ids []string // newest first
	for i, m := range modes {
		acc, err := c.Submit(ctx, apiv1.QueryRequest{Mode: m, Prompt: "list me " + string(rune('a'+i))})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Stream(ctx, acc.RequestID, nil); err != nil {
			t.Fatal(err)
		}
		ids = append([]string{acc.RequestID}, ids...)
	}

	// The read model catches up: every query listed, completed.
	eventually(t, 30*time.Second, func() error {
		page, err := c.List(ctx, client.ListOptions{Status: client.StatusCompleted, Limit: 100})
		if err != nil {
			return err
		}
		if len(page.Data) != len(ids) {
			return errors.New("the list has not caught up yet")
		}
		return nil
	})

	// Pages of two, walked by hand and by All, give every id once, newest first.
	var paged []string
	opts := client.ListOptions{Limit: 2}
	for pages := 0; ; pages++ {
		if pages > len(ids) {
			t.Fatalf("more pages than queries: %v", paged)
		}
		page, err := c.List(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		if page.Object != "list" || len(page.Data) > 2 {
			t.Fatalf("page %+v", page)
		}
		for _, q := range page.Data {
			paged = append(paged, q.RequestID)
			if q.Status != client.StatusCompleted || q.CompletedAt == nil || q.Credits.Charged == nil || q.CreatedAt.IsZero() {
				t.Fatalf("row %+v: want a completed query with its times and charge", q)
			}
		}
		if !page.HasMore {
			break
		}
		if page.NextAfter == nil {
			t.Fatalf("has_more without next_after: %+v", page)
		}
		opts.After = *page.NextAfter
	}
	if !slices.Equal(paged, ids) {
		t.Fatalf("pages of 2 list %v, want %v", paged, ids)
	}
	var all []string
	for q, err := range c.All(ctx, client.ListOptions{Limit: 3}) {
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, q.RequestID)
	}
	if !slices.Equal(all, ids) {
		t.Fatalf("All lists %v, want %v", all, ids)
	}

	// Filters.
	var unify []string
	for i, m := range modes {
		if m == "unify" {
			unify = append([]string{ids[len(ids)-1-i]}, unify...)
		}
	}
	var got []string
	for q, err := range c.All(ctx, client.ListOptions{Mode: "unify", Limit: 1}) {
		if err != nil {
			t.Fatal(err)
		}
		if q.Mode != "unify" {
			t.Fatalf("mode filter listed %+v", q)
		}
		got = append(got, q.RequestID)
	}
	if !slices.Equal(got, unify) {
		t.Fatalf("mode unify lists %v, want %v", got, unify)
	}
	page, err := c.List(ctx, client.ListOptions{Status: client.StatusFailed})
	if err != nil || len(page.Data) != 0 || page.HasMore {
		t.Fatalf("status failed lists %+v, %v; want nothing", page, err)
	}

	// A bad filter or cursor is a typed invalid_request.
	var e *client.Error
	for _, o := range []client.ListOptions{{Status: "cancelled"}, {Mode: "summarize"}, {After: "not-a-cursor"}, {Limit: 101}} {
		if _, err := c.List(ctx, o); !errors.As(err, &e) || e.Code != client.CodeInvalidRequest || e.Status != 400 {
			t.Fatalf("List(%+v) = %v; want 400 invalid_request", o, err)
		}
	}

	// The other account sees its own query only.
	eventually(t, 30*time.Second, func() error {
		page, err := other.List(ctx, client.ListOptions{})
		if err != nil {
			return err
		}
		if len(page.Data) != 1 || page.Data[0].RequestID != theirs.RequestID {
			return errors.New("the other account's list is not its one query yet")
		}
		return nil
	})
}

// Cancel against the real service: a running justify query on a slow
// simulated backend ends failed with code cancelled, its stream ends with
// that error, it is charged less than its estimate, a second cancel of the
// ended query is query_ended, and another account's cancel is not_found.
func TestCancelAgainstTheService(t *testing.T) {
	slow, err := apptest.Start(apptest.WithSimLatency(2 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	ctx := ctxFor(t)
	c := keyClient(t, slow.URL, slow.Key)
	acc, err := c.Submit(ctx, apiv1.QueryRequest{Mode: "justify", Prompt: "Should we shard the orders table?"})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() error {
		q, err := c.Get(ctx, acc.RequestID)
		if err != nil {
			return err
		}
		if q.Status != client.StatusRunning {
			return errors.New("the query is not running yet: " + q.Status)
		}
		return nil
	})

	_, otherKey, err := slow.NewAccount()
	if err != nil {
		t.Fatal(err)
	}
	var e *client.Error
	if _, err := keyClient(t, slow.URL, otherKey).Cancel(ctx, acc.RequestID); !errors.As(err, &e) || e.Code != client.CodeNotFound || e.Status != 404 {
		t.Fatalf("another account's Cancel = %v; want 404 not_found", err)
	}

	q, err := c.Cancel(ctx, acc.RequestID)
	if err != nil {
		t.Fatal(err)
	}
	if q.RequestID != acc.RequestID || client.Terminal(q.Status) {
		t.Fatalf("Cancel = %+v; want the query as it stood, not ended", q)
	}

	streamCtx, stop := context.WithTimeout(ctx, 30*time.Second)
	defer stop()
	end, err := c.Stream(streamCtx, acc.RequestID, nil)
	if !errors.As(err, &e) || e.Code != client.CodeCancelled {
		t.Fatalf("Stream after Cancel = %v; want the query's error cancelled", err)
	}
	if end == nil || end.Status != client.StatusFailed {
		t.Fatalf("ended %+v; want failed", end)
	}
	// The stream can end before the read model shows the settlement (Stream
	// then reports the end the stream told): the charge is read once it does.
	eventually(t, 30*time.Second, func() error {
		q, err := c.Get(ctx, acc.RequestID)
		if err != nil {
			return err
		}
		if q.Status != client.StatusFailed || q.Credits.Charged == nil {
			return errors.New("the query's settlement is not shown yet")
		}
		if *q.Credits.Charged >= q.Credits.Estimated {
			t.Fatalf("charged %v of an estimate of %v; want less: only the finished calls", *q.Credits.Charged, q.Credits.Estimated)
		}
		return nil
	})

	if _, err := c.Cancel(ctx, acc.RequestID); !errors.As(err, &e) || e.Code != client.CodeQueryEnded || e.Status != 409 {
		t.Fatalf("Cancel of an ended query = %v; want 409 query_ended", err)
	}
	if _, err := c.Cancel(ctx, "req_01M85RK2C87DY7K320H2RBD4VZ"); !errors.As(err, &e) || e.Code != client.CodeNotFound {
		t.Fatalf("Cancel of an unknown id = %v; want not_found", err)
	}

	eventually(t, 30*time.Second, func() error {
		page, err := c.List(ctx, client.ListOptions{Status: client.StatusFailed})
		if err != nil {
			return err
		}
		if len(page.Data) != 1 || page.Data[0].Error == nil || page.Data[0].Error.Code != client.CodeCancelled {
			return errors.New("the list does not show the cancelled query yet")
		}
		return nil
	})
}
