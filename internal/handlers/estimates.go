package handlers

import (
	"fmt"
	"math"
	"time"

	"golang.org/x/time/rate"

	"github.com/crosscheck/crosscheck/internal/accounts"
	"github.com/crosscheck/crosscheck/internal/apperr"
	"github.com/crosscheck/crosscheck/internal/lru"
)

// Bounds of the estimates (POST /v1/estimate-cost), which are free: the
// time an estimate takes (tokenizing its prompt and tools for each
// selected model, up to about 0.14 s of CPU) is spent from a bucket per API
// key that refills at Server.EstimateRate per second and holds
// estimateBurst seconds of it, and from one per account that holds
// estimateAccountKeys keys' worth; an estimate finding either in debt is
// refused. At most MaxEstimatesPerKey of a key's run at a time
// (estimateAccountKeys times that of an account's).
const (
	MaxEstimatesPerKey  = 2
	estimateAccountKeys = 4
	estimateBurst       = 10
	// maxEstimateBuckets bounds the buckets a process keeps; a forgotten
	// one starts full again.
	maxEstimateBuckets = 10000
)

// estimateBudgets are the buckets of estimate time, in microseconds, by
// key fingerprint and by account.
type estimateBudgets struct {
	keys, accounts *lru.Cache[string, *rate.Limiter]
}

func newEstimateBudgets() *estimateBudgets {
	return &estimateBudgets{keys: lru.New[string, *rate.Limiter](maxEstimateBuckets), accounts: lru.New[string, *rate.Limiter](maxEstimateBuckets)}
}

// startEstimate takes one of c's running estimates and checks that c's key
// and account have estimate time left; it returns the function to call
// when the estimate is done, with the time its work took, which spends it
// from both buckets, or the refusal (429 rate_limited, with the seconds
// until the bucket is out of debt).
func (s *Server) startEstimate(c accounts.Caller) (done func(spent time.Duration), refused *apperr.Error) {
	if s.EstimateRate <= 0 {
		return func(time.Duration) {}, nil
	}
	release, e := s.estimating.take(c, slotBounds{perKey: MaxEstimatesPerKey, perAccount: MaxEstimatesPerKey * estimateAccountKeys})
	if e != nil {
		return nil, e
	}
	perSecond := float64(s.EstimateRate.Microseconds())
	bucket := func(cache *lru.Cache[string, *rate.Limiter], id string, keys int) *rate.Limiter {
		return cache.GetOrAdd(id, func() *rate.Limiter {
			return rate.NewLimiter(rate.Limit(perSecond*float64(keys)), int(perSecond)*estimateBurst*keys)
		})
	}
	key, account := bucket(s.budgets.keys, c.Fingerprint, 1), bucket(s.budgets.accounts, c.AccountID, estimateAccountKeys)
	now := time.Now()
	for _, b := range []struct {
		lim   *rate.Limiter
		whose string
		rate  time.Duration
	}{{key, "this API key", s.EstimateRate}, {account, "the API keys of this account", s.EstimateRate * estimateAccountKeys}} {
		if left := b.lim.TokensAt(now); left <= 0 {
			release()
			wait := int(math.Ceil(-left/float64(b.lim.Limit()))) + 1
			return nil, &apperr.Error{Code: apperr.RateLimited, RetryAfter: wait,
				Message: fmt.Sprintf("%s spent its time for estimates (%s a second, %d seconds' worth at once); estimate again in %d s, or submit the query", b.whose, b.rate, estimateBurst, wait)}
		}
	}
	return func(spent time.Duration) {
		release()
		now := time.Now()
		for _, lim := range []*rate.Limiter{key, account} {
			// Into debt: the next estimate waits until it is paid back.
			lim.ReserveN(now, min(int(spent.Microseconds()), lim.Burst()))
		}
	}, nil
}
