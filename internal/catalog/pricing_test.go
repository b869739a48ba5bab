package catalog

import (
	"math"
	"testing"
)

// A call's cost is exact within an int64, and saturates instead of wrapping
// around past it.
func TestMicroCreditsNeverWraps(t *testing.T) {
	p := Pricing{InputPerMillion: 500, OutputPerMillion: 2000}
	maxInt := int(^uint(0) >> 1)
	for _, c := range []struct {
		in, out int
		want    int64
	}{
		{1000, 600, 1000*500 + 600*2000},
		{0, 0, 0},
		{-5, 10, 20000},
		{maxInt, 0, math.MaxInt64},
		{maxInt / 1000, maxInt / 1000, math.MaxInt64},
		{0, maxInt/2000 + 1, math.MaxInt64},
	} {
		if got := p.MicroCredits(c.in, c.out); got != c.want {
			t.Errorf("MicroCredits(%d, %d) = %d, want %d", c.in, c.out, got, c.want)
		}
	}
}
