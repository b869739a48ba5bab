package projections

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/crosscheck/crosscheck/internal/eventstore"
)

// A projection's read models can resume from its checkpoint only if they
// and the checkpoint reflect its stream as it is. A store whose streams and
// buckets are synced each on its own timer (an fsync interval) can come
// back from a power cut with some of them older than others: a stream that
// lost events the read models had applied (documents reflecting events
// that are gone, a checkpoint past the stream's end, so that the events
// appended next, at those sequences, are skipped), or a bucket that lost
// writes its checkpoint counted on (documents left behind for good). Check
// finds each case; Rebuild starts the projection over.

// positionsKey is the key, in the projections bucket, of where a
// projection's read models ended when its checkpoint was last written: a
// JSON object of bucket name to last sequence. The checkpoint itself stays
// a plain sequence, which every build reads.
func positionsKey(name string) string { return name + ".read_models" }

// docsMargin is how long before the stream's last event the documents
// written are read for ones ahead of it: more than the time between an
// event and the write of its document.
const docsMargin = 10 * time.Second

// savePositions records where the runner's read models end.
func (r *Runner) savePositions(ctx context.Context) error {
	if len(r.ReadModels) == 0 {
		return nil
	}
	pos := make(map[string]uint64, len(r.ReadModels))
	for _, b := range r.ReadModels {
		seq, err := b.LastSeq(ctx)
		if err != nil {
			return err
		}
		pos[b.Name()] = seq
	}
	data, _ := json.Marshal(pos)
	_, err := r.Checkpoints.Put(ctx, positionsKey(r.Name), data)
	return err
}

// Check reports why the projection's read models cannot resume from its
// checkpoint; "" when they can. It must run before anything appends to the
// stream: an event appended after a loss takes the sequence of a lost one.
// It finds a checkpoint past the stream's last event, a read model's bucket
// that ends before where it ended when the checkpoint was written, and a
// document written since shortly before the stream's last event that
// reflects an event past it.
func (r *Runner) Check(ctx context.Context) (string, error) {
	pos, err := Checkpoint(ctx, r.Checkpoints, r.Name)
	if errors.Is(err, ErrUnreadableCheckpoint) {
		// Not a question of what survived a power cut: the projection's
		// runs report it, and are retried until an operator repairs it.
		return "", nil
	}
	if err != nil {
		return "", err
	}
	state, err := r.Stream.State(ctx)
	if err != nil {
		return "", fmt.Errorf("check %s: %w", r.Name, err)
	}
	if pos > state.LastSeq {
		return fmt.Sprintf("its checkpoint is at event %d of %s, which ends at %d", pos, r.Stream.Name(), state.LastSeq), nil
	}
	saved := map[string]uint64{}
	switch e, err := r.Checkpoints.Get(ctx, positionsKey(r.Name)); {
	case errors.Is(err, eventstore.ErrNotFound):
	case err != nil:
		return "", fmt.Errorf("check %s: %w", r.Name, err)
	default:
		if err := json.Unmarshal(e.Value, &saved); err != nil {
			return "", fmt.Errorf("check %s: read model positions %q: %w", r.Name, e.Value, err)
		}
	}
	since := time.Time{}
	if state.LastSeq > 0 {
		since = state.LastTime.Add(-docsMargin)
	}
	for _, b := range r.ReadModels {
		last, err := b.LastSeq(ctx)
		if err != nil {
			return "", fmt.Errorf("check %s: %w", r.Name, err)
		}
		if want := saved[b.Name()]; last < want {
			return fmt.Sprintf("bucket %s ends at write %d, but it was at %d when the checkpoint was written", b.Name(), last, want), nil
		}
		var ahead string
		err = b.Since(ctx, since, func(key string, value []byte) error {
			if seq, ok := DocSeq(value); ok && seq > state.LastSeq {
				ahead = fmt.Sprintf("document %s of bucket %s reflects event %d of %s, which ends at %d", key, b.Name(), seq, r.Stream.Name(), state.LastSeq)
				return errAhead
			}
			return nil
		})
		if errors.Is(err, errAhead) {
			return ahead, nil
		}
		if err != nil {
			return "", fmt.Errorf("check %s: %w", r.Name, err)
		}
	}
	return "", nil
}

var errAhead = errors.New("a document is ahead of its stream")

// Rebuild forgets the projection's checkpoint and empties its read models:
// its next Run applies every event of the stream from the first. The
// checkpoint goes first: stopped between the two, the next start replays
// every event onto the old documents (and Check finds again those ahead).
func (r *Runner) Rebuild(ctx context.Context) error {
	if err := Rewind(ctx, r.Checkpoints, r.Name); err != nil {
		return err
	}
	for _, b := range r.ReadModels {
		if err := b.PurgeAll(ctx); err != nil {
			return fmt.Errorf("rebuild %s: %w", r.Name, err)
		}
	}
	return nil
}

// DocSeq returns the "seq" of a stored document, the stream sequence of the
// last event it reflects; false for a value that is not a JSON object with
// one (an index page).
func DocSeq(value []byte) (uint64, bool) {
	var d struct {
		Seq *uint64 `json:"seq"`
	}
	if json.Unmarshal(value, &d) != nil || d.Seq == nil {
		return 0, false
	}
	return *d.Seq, true
}
