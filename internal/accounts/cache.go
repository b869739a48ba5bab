package accounts

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/crosscheck/crosscheck/internal/projections"
)

// keyCache holds the keys bucket in memory, so authenticating a request reads
// no bucket. It is fed by a watch of the bucket, which carries every
// process's changes within milliseconds, and by this process's own commands at
// once; an entry only ever moves to a later sequence.
type keyCache struct {
	mu   sync.RWMutex
	keys map[string]*projections.KeyDoc
}

func (c *keyCache) get(fingerprint string) *projections.KeyDoc {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.keys[fingerprint]
}

func (c *keyCache) put(k *projections.KeyDoc) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.keys == nil {
		c.keys = map[string]*projections.KeyDoc{}
	}
	if cur := c.keys[k.Fingerprint]; cur == nil || cur.Seq < k.Seq {
		cp := *k
		c.keys[k.Fingerprint] = &cp
	}
}

// WatchKeys keeps the key cache in step with the keys bucket until ctx ends.
func (s *Service) WatchKeys(ctx context.Context, log zerolog.Logger) {
	for ctx.Err() == nil {
		err := s.Store.Keys.Watch(ctx, func(_ string, value []byte) {
			var k projections.KeyDoc
			if err := json.Unmarshal(value, &k); err == nil {
				s.cache.put(&k)
			}
		})
		if err != nil {
			log.Warn().Err(err).Msg("key cache: watch")
			sleep(ctx, time.Second)
		}
	}
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
