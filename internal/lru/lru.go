// Package lru holds a bounded map that forgets its least recently used
// entry first: the per-process caches of aggregates and slot sets.
package lru

import (
	"container/list"
	"sync"
)

// Cache maps keys to values, holding at most its size of them. It is safe
// for concurrent use.
type Cache[K comparable, V any] struct {
	mu    sync.Mutex
	size  int
	order *list.List // front: most recently used; elements hold *entry[K, V]
	byKey map[K]*list.Element
}

type entry[K comparable, V any] struct {
	key K
	val V
}

// New returns a cache of at most size entries (at least 1).
func New[K comparable, V any](size int) *Cache[K, V] {
	return &Cache[K, V]{size: max(size, 1), order: list.New(), byKey: map[K]*list.Element{}}
}

// GetOrAdd returns the value of key, adding the one make returns when there
// is none (make runs under the cache's lock: keep it cheap). Adding to a
// full cache forgets the least recently used entry.
func (c *Cache[K, V]) GetOrAdd(key K, make func() V) V {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byKey[key]; ok {
		c.order.MoveToFront(el)
		return el.Value.(*entry[K, V]).val
	}
	v := make()
	c.byKey[key] = c.order.PushFront(&entry[K, V]{key: key, val: v})
	if c.order.Len() > c.size {
		last := c.order.Back()
		c.order.Remove(last)
		delete(c.byKey, last.Value.(*entry[K, V]).key)
	}
	return v
}

// Delete forgets key.
func (c *Cache[K, V]) Delete(key K) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byKey[key]; ok {
		c.order.Remove(el)
		delete(c.byKey, key)
	}
}

// Len returns the number of entries held.
func (c *Cache[K, V]) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}
