package lru

import "testing"

func TestCacheForgetsTheLeastRecentlyUsed(t *testing.T) {
	c := New[string, int](2)
	c.GetOrAdd("a", func() int { return 1 })
	c.GetOrAdd("b", func() int { return 2 })
	c.GetOrAdd("a", func() int { return -1 }) // a is now the most recent
	c.GetOrAdd("c", func() int { return 3 })  // forgets b
	if got := c.Len(); got != 2 {
		t.Fatalf("Len = %d, want 2", got)
	}
	if got := c.GetOrAdd("a", func() int { return -1 }); got != 1 {
		t.Errorf("a = %d, want 1 (kept)", got)
	}
	if got := c.GetOrAdd("b", func() int { return 20 }); got != 20 {
		t.Errorf("b = %d, want 20 (forgotten, then added again)", got)
	}
	c.Delete("b")
	if got := c.Len(); got != 1 {
		t.Errorf("Len after Delete = %d, want 1", got)
	}
}
