package queries

import (
	"bytes"
	"encoding/json"
	"sync"
)

// finishedCap bounds the results the finished cache keeps.
const finishedCap = 20000

// finished keeps the results of ended queries in memory. An ended query has
// no later event, so its stored result never changes: a poll of it needs no
// read of the bucket. It forgets the oldest entry first.
type finished struct {
	mu    sync.RWMutex
	byID  map[string]finishedEntry
	order []string
	next  int
}

type finishedEntry struct {
	accountID string
	result    json.RawMessage
}

func (f *finished) get(id string) (finishedEntry, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	e, ok := f.byID[id]
	return e, ok
}

func (f *finished) put(id, accountID string, result json.RawMessage) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.byID == nil {
		f.byID = make(map[string]finishedEntry, finishedCap)
		f.order = make([]string, finishedCap)
	}
	if _, ok := f.byID[id]; ok {
		return
	}
	if old := f.order[f.next]; old != "" {
		delete(f.byID, old)
	}
	f.order[f.next] = id
	f.next = (f.next + 1) % finishedCap
	f.byID[id] = finishedEntry{accountID: accountID, result: bytes.Clone(result)}
}

// ended reports whether a stored result's status is terminal. The result's
// own status is its first "status" key: the encoder writes it before models.
func ended(result []byte) bool {
	const key = `"status":"`
	i := bytes.Index(result, []byte(key))
	if i < 0 {
		return false
	}
	rest := result[i+len(key):]
	return bytes.HasPrefix(rest, []byte(`completed"`)) || bytes.HasPrefix(rest, []byte(`failed"`))
}
