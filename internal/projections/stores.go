package projections

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/eventstore"
)

// RunningDocEvery is how often at most the service stores the document of
// a query that has not ended (QueryStatus.Every): a poll sees a running
// query's progress up to this late (a poll or a list of a query whose
// document is not stored yet folds it from the query's events, so a
// submission shows at once), and its end at once. Each store is a write to
// the query_status stream (an fsync under fsync always), and a query's
// events come one by one: stored with every batch, a document took ~9
// writes per query under load, as many as the query's own events.
const RunningDocEvery = 250 * time.Millisecond

// QueryStatus projects QUERIES into the query_status bucket, and each
// account's index of its queries into the query_list bucket (written once
// per query, at its submission; GET /v1/queries reads each listed query's
// document). It keeps the documents of unfinished queries in memory, as it
// is their only writer, and writes each query changed by a batch of events
// once; with Every set, a running query's document less often (see Every).
type QueryStatus struct {
	Store *eventstore.Store
	// Every, when set, is how long a change to the document of a query
	// that has not ended may be held in memory before it is stored: each
	// document is then written at most once per Every until its query
	// ends, and when it ends, instead of once per batch that touches it (a
	// query that ends within Every of its submission is written once). A
	// poll reads a running query's progress up to Every late (the event
	// stream, which SSE follows, is never late); its end at once. Held
	// changes are stored through Flush (the runner's Deferred).
	Every time.Duration

	cache map[string]*QueryDoc // used by the runner's goroutine only
	// held are the queries whose cached document has changes not stored
	// yet.
	held heldSet
	// tails are the ends of the accounts' indexes as this run stored them
	// (used by the runner's goroutine only).
	tails map[string]indexTail
	run   any // the run the cache was filled in
	// fresh is whether the bucket was empty when this run began (a
	// rebuild): then nothing is stored for a query but what this run wrote.
	fresh bool
	// writing are the documents the last batch stored, while their
	// acknowledgements may be on the way: the next batch is applied
	// meanwhile (see settle).
	writing *docWrites
}

// docWrites are the documents one batch stored, each with the oldest event
// of the change written.
type docWrites struct {
	puts *eventstore.Puts
	at   time.Time // when they were written
	docs map[string]uint64
	// oldest is the oldest of the docs' events: the checkpoint stays
	// before it until every write is acknowledged.
	oldest uint64
}

// HandleBatch applies query events in stream order.
func (p *QueryStatus) HandleBatch(ctx context.Context, recs []events.Record) error {
	if run := runOf(ctx); p.cache == nil || run != p.run {
		// Another process may have run the projection since this run's
		// predecessor filled the cache: the stored documents are the truth.
		p.cache, p.run, p.tails = map[string]*QueryDoc{}, run, map[string]indexTail{}
		p.held, p.writing = heldSet{every: p.Every}, nil
		empty, err := p.Store.QueryStatus.Empty(ctx)
		if err != nil {
			p.run = nil // asked again with the batch's retry
			return err
		}
		p.fresh = empty
		if err := p.completeIndex(ctx); err != nil {
			p.run = nil
			return err
		}
	}
	changed := map[string]*QueryDoc{}
	var order []string
	// from is, for each changed document, the first event of the batch
	// applied to it: where its change is held from.
	from := map[string]uint64{}
	var add []indexed
	for _, r := range recs {
		id := events.AggregateID(r.Envelope.Subject)
		doc := changed[id]
		if doc == nil {
			cur, err := p.load(ctx, id, r)
			if err != nil {
				return err
			}
			if r.Seq <= cur.Seq {
				// Applied already. Its submission joins the index again if
				// the index lost it: a query_list bucket older than the
				// documents, as a power cut under an fsync interval can
				// leave them (the heads' sequences keep it from joining
				// twice).
				if e, ok := r.Event.(events.QuerySubmitted); ok && r.Replayed && e.AccountID != "" && e.RequestID != "" {
					add = append(add, indexed{accountID: e.AccountID, requestID: id, seq: r.Seq, applied: true})
				}
				continue
			}
			doc = cur.clone()
			changed[id] = doc
			order = append(order, id)
			from[id] = r.Seq
		}
		// The submission of a query this document had not applied joins
		// its account's index (unless the index took it before a crash: by
		// sequence).
		if e, ok := r.Event.(events.QuerySubmitted); ok && doc.Result.RequestID == "" && e.AccountID != "" && e.RequestID != "" {
			add = append(add, indexed{accountID: e.AccountID, requestID: id, seq: r.Seq})
		}
		doc.Apply(r)
	}
	// The index pages are stored first, then the index heads, then the
	// documents: a batch retried after a crash adds to the
	// index every submission whose document was not stored, and the heads'
	// sequences keep it from adding one twice.
	pages, heads, tails, err := p.indexEntries(ctx, add)
	if err != nil {
		return err
	}
	if err := p.Store.QueryList.PutAll(ctx, pages); err != nil {
		p.keepTails(nil)
		return err
	}
	if err := p.Store.QueryList.PutAll(ctx, heads); err != nil {
		p.keepTails(nil)
		return err
	}
	p.keepTails(tails)
	// A document is stored now unless its query has not ended and it may
	// wait (see Every).
	now := time.Now()
	entries := make([]eventstore.Entry, 0, len(order))
	var hold []string
	for _, id := range order {
		doc := changed[id]
		if p.Every > 0 && !doc.Result.Terminal() {
			hold = append(hold, id)
			continue
		}
		data, err := doc.Encode()
		if err != nil {
			return err
		}
		entries = append(entries, eventstore.Entry{Key: id, Value: data})
	}
	// The documents of the batch before are stored by now, or held again.
	if err := p.settle(ctx, true); err != nil {
		return err
	}
	puts, err := p.Store.QueryStatus.PutAsync(ctx, entries)
	if err != nil {
		return err
	}
	maps.Copy(p.cache, changed)
	if len(entries) > 0 {
		w := &docWrites{puts: puts, at: now, docs: make(map[string]uint64, len(entries))}
		for _, e := range entries {
			// A document held since an earlier batch (its write failed)
			// is written now with every change since then.
			seq := from[e.Key]
			if h, ok := p.held.from(e.Key); ok {
				seq = min(seq, h)
			}
			w.docs[e.Key] = seq
			w.oldest = earlier(w.oldest, seq)
			p.held.unhold(e.Key)
		}
		p.writing = w
	}
	for _, id := range hold {
		p.held.hold(id, from[id], now)
	}
	return nil
}

// settle learns the outcome of the last batch's document writes, waiting
// for it when wait is set; without wait, a write still on its way leaves
// them as they are. A stored document of an ended query leaves the cache
// (the next event of the query, if any, reads the stored one); a document
// that was not stored is held again, due at once, so that Flush stores it
// (its query's newest version, whatever the batch after applied), and the
// runner's checkpoint stays before its events.
func (p *QueryStatus) settle(ctx context.Context, wait bool) error {
	w := p.writing
	if w == nil {
		return nil
	}
	var err error
	if wait {
		err = w.puts.Wait(ctx)
	} else {
		var done bool
		if done, err = w.puts.Done(); !done {
			return nil
		}
	}
	if err != nil && ctx.Err() != nil {
		return err // not settled: asked again
	}
	p.writing = nil
	for id, seq := range w.docs {
		if err != nil {
			p.held.hold(id, seq, time.Time{})
		} else if _, held := p.held.from(id); !held && ended(p.cache[id]) {
			delete(p.cache, id)
		}
	}
	return nil
}

// Flush stores the documents whose changes were held for Every (all of
// them when all is set); see Deferring. Changes held by an earlier run are
// dropped, not stored: another process may have run the projection since,
// and this run applies their events again from its checkpoint. The last
// batch's documents count as held until their writes are acknowledged, due
// settleAfter after they were written: a Flush from then on waits for the
// acknowledgements.
func (p *QueryStatus) Flush(ctx context.Context, all bool) (uint64, time.Time, error) {
	if runOf(ctx) != p.run {
		p.held, p.writing = heldSet{every: p.Every}, nil
		return 0, time.Time{}, nil
	}
	// A settle that failed (ctx ended while it waited) leaves the writes
	// counted as held.
	var serr error
	if w := p.writing; w != nil {
		serr = p.settle(ctx, all || time.Since(w.at) >= settleAfter)
	}
	held, due, err := p.held.flush(ctx, p.Store.QueryStatus, all, func(id string) ([]byte, error) { return p.cache[id].Encode() }, func(id string) {
		if ended(p.cache[id]) {
			delete(p.cache, id) // an ended query whose write had failed
		}
	})
	if w := p.writing; w != nil {
		held, due = earlier(held, w.oldest), w.at.Add(settleAfter)
	}
	return held, due, errors.Join(serr, err)
}

// ended reports whether doc is the document of an ended query.
func ended(doc *QueryDoc) bool { return doc != nil && doc.Result.Terminal() }

// settleAfter is how long after a batch writes its documents a runner that
// has no next batch waits for their acknowledgements (a next batch waits for
// them before it writes its own).
const settleAfter = 2 * time.Millisecond

// load returns the current document of id, to which r applies next:
// cached, stored, or empty. A submitted event starts its query, so nothing
// can be stored for it yet when this run sees it: unless it was stored
// before this run started and the bucket was not empty then, when an earlier
// run may have applied it.
func (p *QueryStatus) load(ctx context.Context, id string, r events.Record) (*QueryDoc, error) {
	if doc := p.cache[id]; doc != nil {
		return doc, nil
	}
	doc := &QueryDoc{}
	if _, first := r.Event.(events.QuerySubmitted); first && (!r.Replayed || p.fresh) {
		return doc, nil
	}
	raw, err := p.Store.QueryStatus.GetLatest(ctx, id)
	if err != nil {
		return nil, err
	}
	if raw != nil {
		if err := json.Unmarshal(raw, doc); err != nil {
			return nil, fmt.Errorf("decode %s: %w", id, err)
		}
	}
	return doc, nil
}

// clone copies d deeply enough for Apply to change the copy only: a batch
// that fails and is retried must start from the document as it was.
func (d *QueryDoc) clone() *QueryDoc {
	next := *d
	next.Result.Models = append([]ModelResult(nil), d.Result.Models...)
	if j := d.Result.Justify; j != nil {
		c := *j
		c.Rounds = make([]Round, len(j.Rounds))
		for i, r := range j.Rounds {
			c.Rounds[i] = Round{Round: r.Round, Answers: slices.Clone(r.Answers)}
		}
		c.Disagreements, c.Missing = slices.Clone(j.Disagreements), slices.Clone(j.Missing)
		next.Result.Justify = &c
	}
	if v := d.Result.Verify; v != nil {
		c := *v
		c.Claims = make([]VerifiedClaim, len(v.Claims))
		for i, cl := range v.Claims {
			cl.Sources, cl.Assessments = slices.Clone(cl.Sources), slices.Clone(cl.Assessments)
			c.Claims[i] = cl
		}
		c.Missing = slices.Clone(v.Missing)
		next.Result.Verify = &c
	}
	return &next
}

// Keys projects ACCOUNTS into the keys bucket: each key's state by fingerprint.
type Keys struct {
	Store *eventstore.Store
}

// get reads a key's state as this projection last wrote it (from the
// bucket's leader); nil when unknown.
func (p *Keys) get(ctx context.Context, fingerprint string) (*KeyDoc, error) {
	raw, err := p.Store.Keys.GetLatest(ctx, fingerprint)
	if err != nil || raw == nil {
		return nil, err
	}
	var k KeyDoc
	if err := json.Unmarshal(raw, &k); err != nil {
		return nil, fmt.Errorf("decode key %s: %w", fingerprint, err)
	}
	return &k, nil
}

// Accounts applies a batch of account events to both account projections:
// keys first, so a new key is usable as soon as possible, then balances.
func Accounts(keys *Keys, balances *Balances) BatchHandler {
	return func(ctx context.Context, recs []events.Record) error {
		for _, r := range recs {
			if err := keys.Handle(ctx, r); err != nil {
				return err
			}
		}
		return balances.HandleBatch(ctx, recs)
	}
}

// Handle applies one account event; events other than key events are ignored.
func (p *Keys) Handle(ctx context.Context, r events.Record) error {
	switch e := r.Event.(type) {
	case events.KeyCreated:
		// Replayed after a crash, the creation must not undo a later
		// transition already applied (a revoked key shown active).
		if r.Replayed {
			if k, err := p.get(ctx, e.Fingerprint); err != nil || (k != nil && k.Seq >= r.Seq) {
				return err
			}
		}
		k := KeyDoc{
			Fingerprint: e.Fingerprint, AccountID: events.AggregateID(r.Envelope.Subject), Name: e.Name,
			SecretHash: e.SecretHash, State: events.StateActive, CreatedAt: r.Envelope.Time, Seq: r.Seq,
		}
		return p.put(ctx, &k)
	default:
		ch, ok := events.StateChange(r.Event)
		if !ok {
			return nil
		}
		k, err := p.get(ctx, ch.Fingerprint)
		if err != nil {
			return err
		}
		if k == nil || r.Seq <= k.Seq {
			return nil
		}
		key := k.key()
		events.ApplyKeyChange(key, ch, r.Seq)
		doc := KeyDocOf(key)
		return p.put(ctx, &doc)
	}
}

func (p *Keys) put(ctx context.Context, k *KeyDoc) error {
	data, err := json.Marshal(k)
	if err != nil {
		return err
	}
	if _, err := p.Store.Keys.Put(ctx, k.Fingerprint, data); err != nil {
		return fmt.Errorf("put key %s: %w", k.Fingerprint, err)
	}
	return nil
}

// GetKey reads one key's projected state; nil when the key is unknown.
func GetKey(ctx context.Context, kv *eventstore.Bucket, fingerprint string) (*KeyDoc, error) {
	entry, err := kv.Get(ctx, fingerprint)
	if errors.Is(err, eventstore.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get key %s: %w", fingerprint, err)
	}
	var k KeyDoc
	if err := json.Unmarshal(entry.Value, &k); err != nil {
		return nil, fmt.Errorf("decode key %s: %w", fingerprint, err)
	}
	return &k, nil
}
