package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/crosscheck/crosscheck/apiv1"
	"github.com/crosscheck/crosscheck/client"
)

// contractServer speaks the contract of GET /v1/queries and POST
// /v1/queries/{id}/cancel for the queries of two keys: the newest first,
// pages cut by limit, after the previous page's next_after.
type contractServer struct {
	queries map[string][]apiv1.QuerySummary // by key, newest first
	seen    []string                        // the query strings of the list calls
}

func (s *contractServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	mine := s.queries[key]
	fail := func(status int, code string) {
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(apiv1.ErrorBody{Error: apiv1.ErrorDetail{Code: code, Message: code}})
	}
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/v1/queries":
		s.seen = append(s.seen, r.URL.RawQuery)
		v := r.URL.Query()
		limit := 20
		if l := v.Get("limit"); l != "" {
			limit, _ = strconv.Atoi(l)
		}
		page := apiv1.QueryList{Object: "list", Data: []apiv1.QuerySummary{}}
		started := v.Get("after") == ""
		for _, q := range mine {
			if !started {
				started = q.RequestID == v.Get("after")
				continue
			}
			if (v.Get("status") != "" && q.Status != v.Get("status")) || (v.Get("mode") != "" && q.Mode != v.Get("mode")) {
				continue
			}
			if len(page.Data) == limit {
				page.HasMore = true
				last := page.Data[limit-1].RequestID
				page.NextAfter = &last
				break
			}
			page.Data = append(page.Data, q)
		}
		_ = json.NewEncoder(w).Encode(page)
	case r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, "/v1/queries/") && strings.HasSuffix(r.URL.Path, "/cancel"):
		id := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/v1/queries/"), "/cancel")
		for _, q := range mine {
			if q.RequestID == id {
				if client.Terminal(q.Status) {
					fail(http.StatusConflict, client.CodeQueryEnded)
					return
				}
				w.WriteHeader(http.StatusAccepted)
				_ = json.NewEncoder(w).Encode(apiv1.Query{RequestID: id, Object: "query", Mode: q.Mode, Status: q.Status})
				return
			}
		}
		fail(http.StatusNotFound, client.CodeNotFound)
	default:
		fail(http.StatusNotFound, client.CodeNotFound)
	}
}

func newContractServer(t *testing.T) (*contractServer, *httptest.Server) {
	s := &contractServer{queries: map[string][]apiv1.QuerySummary{}}
	modes := []string{"unify", "justify", "verify"}
	for i := range 7 {
		st := client.StatusCompleted
		if i == 0 {
			st = client.StatusRunning
		}
		s.queries["xchk_a"] = append(s.queries["xchk_a"], apiv1.QuerySummary{RequestID: "req_a" + strconv.Itoa(i), Object: "query", Mode: modes[i%3], Status: st, CreatedAt: time.Unix(int64(100-i), 0)})
	}
	s.queries["xchk_b"] = []apiv1.QuerySummary{{RequestID: "req_b0", Mode: "unify", Status: client.StatusRunning}}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return s, srv
}

func TestListPagesAndFilters(t *testing.T) {
	s, srv := newContractServer(t)
	c, _ := client.New(srv.URL, "xchk_a")
	ctx := context.Background()

	page, err := c.List(ctx, client.ListOptions{Limit: 3})
	if err != nil || len(page.Data) != 3 || !page.HasMore || page.NextAfter == nil || *page.NextAfter != "req_a2" {
		t.Fatalf("first page = %+v, %v", page, err)
	}
	var ids []string
	for q, err := range c.All(ctx, client.ListOptions{Limit: 3}) {
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, q.RequestID)
	}
	if got := strings.Join(ids, ","); got != "req_a0,req_a1,req_a2,req_a3,req_a4,req_a5,req_a6" {
		t.Fatalf("All = %s: want every query once, newest first", got)
	}
	var unify []string
	for q, err := range c.All(ctx, client.ListOptions{Mode: "unify", Status: client.StatusCompleted}) {
		if err != nil {
			t.Fatal(err)
		}
		unify = append(unify, q.RequestID)
	}
	if got := strings.Join(unify, ","); got != "req_a3,req_a6" {
		t.Fatalf("unify, completed = %s; want req_a3,req_a6 (req_a0 is unify but running)", got)
	}
	if last := s.seen[len(s.seen)-1]; last != "mode=unify&status=completed" {
		t.Fatalf("query string %q: want the filters as the contract names them", last)
	}
}

func TestCancel(t *testing.T) {
	_, srv := newContractServer(t)
	c, _ := client.New(srv.URL, "xchk_a")
	ctx := context.Background()
	q, err := c.Cancel(ctx, "req_a0")
	if err != nil || q.RequestID != "req_a0" {
		t.Fatalf("Cancel running = %+v, %v", q, err)
	}
	var e *client.Error
	if _, err := c.Cancel(ctx, "req_a1"); !errors.As(err, &e) || e.Code != client.CodeQueryEnded || e.Status != http.StatusConflict {
		t.Fatalf("Cancel ended = %v; want 409 query_ended", err)
	}
	if _, err := c.Cancel(ctx, "req_b0"); !client.HasCode(err, client.CodeNotFound) {
		t.Fatalf("Cancel of another account's query = %v; want not_found", err)
	}
}
