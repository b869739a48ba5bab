package eventstore

import (
	"context"
)

// LastSeqs returns the last sequence of every stream the store's
// connection sees (the event streams and the buckets' and the object
// store's streams alike), by stream name. The growth of their sum over a
// while is how many messages were written meanwhile, each one a write the
// server may fsync.
func (s *Store) LastSeqs(ctx context.Context) (map[string]uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	out := map[string]uint64{}
	list := s.js.ListStreams(ctx)
	for info := range list.Info() {
		out[info.Config.Name] = info.State.LastSeq
	}
	if err := list.Err(); err != nil {
		return nil, classify("list streams", err)
	}
	return out, nil
}
