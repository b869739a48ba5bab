package modes

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/providers"
	"github.com/crosscheck/crosscheck/internal/providers/simulated"
)

// callLog counts the calls a mode's run makes, by step and provider.
type callLog struct {
	mu    sync.Mutex
	calls map[string]int // "step provider" → calls
	// bounds counts the calls by the output bound they sent.
	bounds map[int]int
}

func (l *callLog) add(req *providers.Request, provider string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls[req.Purpose+" "+provider]++
	l.bounds[req.MaxOutputTokens]++
}

// planned counts the calls Plan lists for mode over refs: a step every model
// makes once per model, the others once by the first.
func planned(mode string, refs []events.ModelRef) map[string]int {
	out := map[string]int{}
	for _, s := range Plan(mode, len(refs)) {
		callers := refs[:1]
		if s.Each {
			callers = refs
		}
		for _, r := range callers {
			out[s.Role+" "+r.Provider]++
		}
	}
	return out
}

// runMode runs mode over n simulated models, the one named failing failing
// every call, and returns the calls made and the run's outcome.
func runMode(t *testing.T, mode string, n int, failing string) (map[string]int, []events.ModelRef, events.Event) {
	t.Helper()
	log, refs, end := runLogged(t, mode, n, failing)
	return log.calls, refs, end
}

// runLogged is runMode returning the whole log of the calls.
func runLogged(t *testing.T, mode string, n int, failing string) (*callLog, []events.ModelRef, events.Event) {
	t.Helper()
	log := &callLog{calls: map[string]int{}, bounds: map[int]int{}}
	set := providers.Set{}
	var refs []events.ModelRef
	for i := range n {
		key := fmt.Sprintf("provider_%c", 'a'+i)
		refs = append(refs, events.ModelRef{Provider: key, ModelID: "sim-" + key})
		sim := simulated.New(key, 0)
		set[key] = providers.ProviderFunc(func(ctx context.Context, req *providers.Request) (*providers.Response, error) {
			log.add(req, key)
			if key == failing {
				return &providers.Response{}, &providers.Error{Class: providers.ClassHostError, Status: 500, Message: "upstream down"}
			}
			return sim.Complete(ctx, req)
		})
	}
	models := Models{Providers: set}
	runners := map[string]interface {
		Run(context.Context, *events.Query, Emit) (events.Event, error)
	}{
		events.ModeUnify:   &Unify{Models: models},
		events.ModeJustify: &Justify{Models: models},
		events.ModeVerify:  &Verify{Models: models, Search: fixedSearch{}},
	}
	q := &events.Query{}
	q.Apply(events.Record{Event: events.QuerySubmitted{RequestID: "req_1", Mode: mode, Prompt: "How tall is Mount Everest?", Models: refs}})
	end, err := runners[mode].Run(context.Background(), q, func(context.Context, events.Event) error { return nil })
	if err != nil {
		t.Fatalf("%s over %d models: %v", mode, n, err)
	}
	return log, refs, end
}

// TestEveryCallBoundsItsOutput: every call of every mode asks its model
// for at most MaxOutputTokens, so no answer's length (and cost) is left
// to a vendor's default, which for some models is their whole window.
func TestEveryCallBoundsItsOutput(t *testing.T) {
	for _, mode := range []string{events.ModeUnify, events.ModeJustify, events.ModeVerify} {
		log, _, _ := runLogged(t, mode, 3, "")
		if len(log.bounds) != 1 || log.bounds[MaxOutputTokens] == 0 {
			t.Errorf("%s: calls by output bound %v, want every call at %d", mode, log.bounds, MaxOutputTokens)
		}
	}
}

// TestPlanIsTheCallsRunMakes: the estimate prices Plan, so with every call
// succeeding Plan lists exactly the calls each mode's Run makes, model by
// model, for one model and for several.
func TestPlanIsTheCallsRunMakes(t *testing.T) {
	for _, mode := range []string{events.ModeUnify, events.ModeJustify, events.ModeVerify} {
		for _, n := range []int{1, 2, 3} {
			t.Run(fmt.Sprintf("%s/%d", mode, n), func(t *testing.T) {
				got, refs, end := runMode(t, mode, n, "")
				if _, ok := end.(events.QueryCompleted); !ok {
					t.Fatalf("outcome %#v, want completed", end)
				}
				if want := planned(mode, refs); !maps.Equal(got, want) {
					t.Fatalf("calls made:\n%v\nplanned:\n%v", sorted(got), sorted(want))
				}
			})
		}
	}
}

// TestPlanBoundsTheCallsOfAFailingModel: with one model failing every call,
// a run makes no call the plan does not list (the estimate, and so the
// reservation, covers it), whichever model fails.
func TestPlanBoundsTheCallsOfAFailingModel(t *testing.T) {
	for _, mode := range []string{events.ModeUnify, events.ModeJustify, events.ModeVerify} {
		for _, failing := range []string{"provider_a", "provider_b"} {
			t.Run(mode+"/"+failing, func(t *testing.T) {
				got, refs, _ := runMode(t, mode, 3, failing)
				want := planned(mode, refs)
				byStep := func(calls map[string]int) map[string]int {
					out := map[string]int{}
					for k, v := range calls {
						step, _, _ := strings.Cut(k, " ")
						out[step] += v
					}
					return out
				}
				g, w := byStep(got), byStep(want)
				for step, calls := range g {
					if calls > w[step] {
						t.Errorf("%d %s calls made, %d planned", calls, step, w[step])
					}
				}
				if t.Failed() {
					t.Logf("calls made:\n%v\nplanned:\n%v", sorted(got), sorted(want))
				}
			})
		}
	}
}

func sorted(calls map[string]int) []string {
	var out []string
	for k, v := range calls {
		out = append(out, fmt.Sprintf("%s ×%d", k, v))
	}
	slices.Sort(out)
	return out
}
