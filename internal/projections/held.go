package projections

import (
	"context"
	"time"

	"github.com/crosscheck/crosscheck/internal/eventstore"
)

// heldSet tracks the documents of a projection whose changes are held in
// memory, unstored, for up to every (see Deferring): from which event each
// change is held and since when. It keeps the oldest held event and when
// the next held change falls due, so that a runner's question after each
// batch needs no walk over the set while nothing is due. It is used by the
// runner's goroutine only.
type heldSet struct {
	every time.Duration
	docs  map[string]heldDoc
	// oldest and next are the oldest held event and when the next held
	// change falls due, unless stale (an entry left since they were
	// computed).
	oldest uint64
	next   time.Time
	stale  bool
}

// heldDoc is a document's change held unstored: since its event seq,
// applied at since.
type heldDoc struct {
	seq   uint64
	since time.Time
}

// hold adds id, changed from the event at seq on, at now; a document held
// already stays held from its first change.
func (h *heldSet) hold(id string, seq uint64, now time.Time) {
	if h.docs == nil {
		h.docs = map[string]heldDoc{}
	}
	if _, ok := h.docs[id]; ok {
		return
	}
	d := heldDoc{seq: seq, since: now}
	h.docs[id] = d
	if h.stale {
		return
	}
	if h.oldest == 0 || d.seq < h.oldest {
		h.oldest = d.seq
	}
	if at := d.since.Add(h.every); h.next.IsZero() || at.Before(h.next) {
		h.next = at
	}
}

// from returns the event from which id's change is held, and whether it
// is held.
func (h *heldSet) from(id string) (uint64, bool) {
	d, ok := h.docs[id]
	return d.seq, ok
}

// earlier returns the older of two events, 0 standing for none.
func earlier(a, b uint64) uint64 {
	if a == 0 || (b != 0 && b < a) {
		return b
	}
	return a
}

// unhold takes id out of the set: its document was stored.
func (h *heldSet) unhold(id string) {
	if _, ok := h.docs[id]; ok {
		delete(h.docs, id)
		h.stale = true
	}
}

// flush stores through bucket the documents that are due at now (all of
// them when all is set), each encoded by encode, calls stored (when not
// nil) for each one stored, and returns what the runner asks of a
// Deferring: the oldest event still held and when the next held change
// falls due.
func (h *heldSet) flush(ctx context.Context, bucket *eventstore.Bucket, all bool, encode func(id string) ([]byte, error), stored func(id string)) (uint64, time.Time, error) {
	now := time.Now()
	if !all && !h.stale && now.Before(h.next) {
		return h.oldest, h.next, nil // nothing due: no walk over the set
	}
	var entries []eventstore.Entry
	var err error
	for id, d := range h.docs {
		if !all && now.Sub(d.since) < h.every {
			continue
		}
		var data []byte
		if data, err = encode(id); err != nil {
			break
		}
		entries = append(entries, eventstore.Entry{Key: id, Value: data})
	}
	if err == nil {
		if err = bucket.PutAll(ctx, entries); err == nil {
			for _, e := range entries {
				h.unhold(e.Key)
				if stored != nil {
					stored(e.Key)
				}
			}
		}
	}
	h.oldest, h.next = h.oldestHeld()
	h.stale = false
	return h.oldest, h.next, err
}

// oldestHeld is the oldest event whose change is held and when the next
// held change falls due.
func (h *heldSet) oldestHeld() (uint64, time.Time) {
	var seq uint64
	var due time.Time
	for _, d := range h.docs {
		if seq == 0 || d.seq < seq {
			seq = d.seq
		}
		if at := d.since.Add(h.every); due.IsZero() || at.Before(due) {
			due = at
		}
	}
	return seq, due
}
