package queries

import (
	"fmt"
	"testing"
)

func TestEndedReadsTheQueryStatusNotAModels(t *testing.T) {
	for _, c := range []struct {
		raw  string
		want bool
	}{
		{`{"request_id":"r","status":"completed","models":[]}`, true},
		{`{"request_id":"r","status":"failed","models":[]}`, true},
		{`{"request_id":"r","status":"running","models":[{"status":"failed"}]}`, false},
		{`{"request_id":"r","status":"queued"}`, false},
		{`{"request_id":"r"}`, false},
	} {
		if got := ended([]byte(c.raw)); got != c.want {
			t.Errorf("ended(%s) = %v, want %v", c.raw, got, c.want)
		}
	}
}

func TestFinishedForgetsOldestFirst(t *testing.T) {
	var f finished
	for i := range finishedCap + 10 {
		f.put(fmt.Sprint(i), "a", []byte("{}"))
	}
	if _, ok := f.get("0"); ok {
		t.Error("the oldest entry was kept past the cap")
	}
	if _, ok := f.get(fmt.Sprint(finishedCap + 9)); !ok {
		t.Error("the newest entry is missing")
	}
	if len(f.byID) != finishedCap {
		t.Errorf("%d entries, want %d", len(f.byID), finishedCap)
	}
}
