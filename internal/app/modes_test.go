package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/crosscheck/crosscheck/internal/catalog"
	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/providers"
	"github.com/crosscheck/crosscheck/internal/providers/simulated"
	"github.com/crosscheck/crosscheck/internal/search"
)

// The scenario tests run justify and verify through the HTTP API on the
// simulated backend, which plants disagreements (a dissenting key figure,
// a two-against-two recommendation) and false claims (one provider states a
// wrong value for a fact, on a third of the questions two do), and score
// what the pipeline finds.

var justifyPrompts = []string{
	"Should a small bakery open a second shop this year?",
	"Is it worth learning Go in 2027?",
	"How should a city reduce traffic in its centre?",
	"What is a fair price for a used bicycle?",
	"Should I refinance my mortgage now?",
	"How many people does a four-day hike need to plan for?",
	"Which is better for a first pet, a cat or a dog?",
	"How much should a startup spend on marketing?",
}

var verifyPrompts = []string{
	"Tell me about Mount Everest, the Danube and the Eiffel Tower.",
	"How fast do sound and light travel?",
	"When did the Berlin Wall fall, and when did Marie Curie win her Nobel prize?",
	"How far away is the Moon, and when did astronauts first land there?",
	"How many bones are in the human skeleton, and how long is a marathon?",
	"At what temperature does water boil, and what is the atomic number of gold?",
	"How far does Earth orbit from the Sun?",
	"What should I know before I buy a house?",
}

// stancesOf reads the "- topic: position" lines of a simulated answer.
func stancesOf(answer string) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(answer, "\n") {
		if topic, pos, ok := strings.Cut(strings.TrimPrefix(line, "- "), ": "); ok && strings.HasPrefix(line, "- ") {
			out[topic] = pos
		}
	}
	return out
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

// Every disagreement planted in the first round is found, with each model's
// position before and after, resolved exactly when the revised answers
// agree; the answer's conflicts are the disagreements.
func TestJustifyFindsPlantedDisagreements(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	key := h.newKey()
	var planted, found, correct int
	resolved, unresolved := 0, 0
	for _, prompt := range justifyPrompts {
		id := h.submit(key, map[string]any{"mode": "justify", "prompt": prompt}).json(t)["request_id"].(string)
		res := h.wait(key, id, 30*time.Second)
		must(t, res["status"] == "completed", "%q: status %v", prompt, res["status"])
		must(t, res["verify"] == nil, "a justify result has a verify block")
		j := asMap(res["justify"])
		rounds := asList(j["rounds"])
		must(t, len(rounds) == 2, "%q: %d rounds, want 2", prompt, len(rounds))
		before, after := map[string]map[string]string{}, map[string]map[string]string{}
		for i, round := range rounds {
			answers := asList(asMap(round)["answers"])
			must(t, len(answers) == 4, "%q: round %d has %d answers", prompt, i+1, len(answers))
			for _, a := range answers {
				a := asMap(a)
				target := before
				if i == 1 {
					target = after
					must(t, a["changed"] != nil, "a round-2 answer says whether it changed")
				}
				target[a["model"].(string)] = stancesOf(a["answer"].(string))
			}
		}
		// The planted disagreements: topics whose first-round positions differ.
		want := map[string]bool{}
		for topic := range before["provider_a"] {
			positions := map[string]bool{}
			for _, s := range before {
				positions[s[topic]] = true
			}
			if len(positions) > 1 {
				want[topic] = true
			}
		}
		planted += len(want)
		got := asList(j["disagreements"])
		found += len(got)
		reported := map[string]bool{}
		conflicts := asList(jsonPath(res, "answer", "conflicts"))
		must(t, len(conflicts) == len(got), "%q: %d conflicts for %d disagreements", prompt, len(conflicts), len(got))
		for i, d := range got {
			d := asMap(d)
			topic := d["topic"].(string)
			must(t, !reported[topic], "%q: topic %q reported twice", prompt, topic)
			reported[topic] = true
			if want[topic] {
				correct++
			}
			must(t, asMap(conflicts[i])["topic"] == topic && asMap(conflicts[i])["resolution"] == d["resolution"],
				"%q: conflict %d is %v, the disagreement %v", prompt, i, conflicts[i], d)
			finals := map[string]bool{}
			for _, p := range asList(d["positions"]) {
				p := asMap(p)
				model := p["model"].(string)
				must(t, p["before"] == before[model][topic] && p["after"] == after[model][topic],
					"%q %s: %s before %v after %v; the rounds say %q and %q", prompt, topic, model, p["before"], p["after"], before[model][topic], after[model][topic])
				finals[p["after"].(string)] = true
			}
			must(t, d["resolved"] == (len(finals) == 1), "%q %s: resolved %v with final positions %v", prompt, topic, d["resolved"], finals)
			if d["resolved"] == true {
				resolved++
			} else {
				unresolved++
			}
		}
	}
	recall := float64(correct) / float64(planted)
	precision := float64(correct) / float64(max(found, 1))
	t.Logf("justify: %d planted disagreements, %d found, %d correct: recall %.2f, precision %.2f (%d resolved, %d unresolved)",
		planted, found, correct, recall, precision, resolved, unresolved)
	must(t, planted >= len(justifyPrompts), "only %d disagreements were planted in %d queries", planted, len(justifyPrompts))
	must(t, recall == 1 && precision == 1, "recall %.2f, precision %.2f; want 1 and 1", recall, precision)
	must(t, resolved > 0 && unresolved > 0, "want both resolved and unresolved disagreements: %d, %d", resolved, unresolved)
}

// Every planted false claim ends refuted or disputed and no true claim ends
// refuted; each claim is grounded in the sample corpus and judged by the
// models that did not make it.
func TestVerifyCatchesPlantedFalseClaims(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	key := h.newKey()
	var tp, fp, fn, tn, falseClaims int
	for _, prompt := range verifyPrompts {
		id := h.submit(key, map[string]any{"mode": "verify", "prompt": prompt}).json(t)["request_id"].(string)
		res := h.wait(key, id, 30*time.Second)
		must(t, res["status"] == "completed", "%q: status %v", prompt, res["status"])
		must(t, res["justify"] == nil, "a verify result has a justify block")
		v := asMap(res["verify"])
		claims := asList(v["claims"])
		must(t, len(claims) > 0, "%q: no claims", prompt)
		refutedInAnswer := 0
		for _, c := range claims {
			c := asMap(c)
			text, verdict := c["text"].(string), c["verdict"]
			isTrue, known := simulated.Planted(text)
			must(t, known, "%q: claim %q is not one the simulated answers make", prompt, text)
			flagged := verdict == "refuted" || verdict == "disputed"
			switch {
			case !isTrue && flagged:
				tp++
			case !isTrue:
				fn++
				t.Errorf("%q: the false claim %q ended %v", prompt, text, verdict)
			case flagged:
				fp++
				must(t, verdict != "refuted", "%q: the true claim %q was refuted: %v", prompt, text, c["assessments"])
			default:
				tn++
			}
			if !isTrue {
				falseClaims++
			}
			if verdict == "refuted" {
				refutedInAnswer++
			}
			conf, _ := c["confidence"].(float64)
			must(t, conf >= 0 && conf <= 1, "confidence %v", c["confidence"])
			must(t, len(asList(c["sources"])) > 0, "%q: claim %q has no sources", prompt, text)
			for _, s := range asList(c["sources"]) {
				must(t, strings.HasPrefix(asMap(s)["url"].(string), "corpus://sample/"), "source %v", s)
			}
			asserted := asList(c["asserted_by"])
			for _, a := range asList(c["assessments"]) {
				judge := asMap(a)["model"]
				must(t, len(asserted) == 4 || !slices.Contains(asserted, judge), "%q: %v judged its own claim %q", prompt, judge, text)
			}
		}
		conflicts := asList(jsonPath(res, "answer", "conflicts"))
		must(t, len(conflicts) >= refutedInAnswer, "%q: %d conflicts for %d refuted claims", prompt, len(conflicts), refutedInAnswer)
		answer := jsonPath(res, "answer", "text").(string)
		for _, c := range claims {
			c := asMap(c)
			if c["verdict"] == "refuted" {
				must(t, !strings.Contains(answer, "- "+c["text"].(string)+"\n"), "%q: the answer states the refuted claim %q", prompt, c["text"])
			}
		}
	}
	recall := float64(tp) / float64(max(tp+fn, 1))
	precision := float64(tp) / float64(max(tp+fp, 1))
	t.Logf("verify: %d claims, %d planted false: recall %.2f, precision %.2f (tp %d fp %d fn %d tn %d)",
		tp+fp+fn+tn, falseClaims, recall, precision, tp, fp, fn, tn)
	must(t, falseClaims >= len(verifyPrompts), "only %d false claims were planted in %d queries", falseClaims, len(verifyPrompts))
	must(t, recall == 1, "recall %.2f: a planted false claim went through", recall)
}

// The stream of a verify query shows its stages in order, with progress
// that never goes backwards, and ends with the result and its claims.
func TestVerifyStreamStages(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	key := h.newKey()
	id := h.submit(key, map[string]any{"mode": "verify", "prompt": verifyPrompts[0]}).json(t)["request_id"].(string)
	h.wait(key, id, 30*time.Second)
	resp := h.openStream(key, id, nil)
	defer resp.Body.Close()
	evs, _ := readStream(t, resp.Body)
	var stages []string
	last := -1
	for _, ev := range evs {
		var data map[string]any
		must(t, json.Unmarshal([]byte(ev.data), &data) == nil, "event data %s", ev.data)
		if ev.name != "progress" {
			continue
		}
		p := int(data["progress_percent"].(float64))
		must(t, p >= last, "progress went from %d to %d", last, p)
		last = p
		if s := data["stage"].(string); len(stages) == 0 || stages[len(stages)-1] != s {
			stages = append(stages, s)
		}
	}
	want := []string{"researching", "extracting_claims", "cross_checking", "aggregating"}
	var seen []string
	for _, s := range stages {
		if slices.Contains(want, s) && !slices.Contains(seen, s) {
			seen = append(seen, s)
		}
	}
	must(t, slices.Equal(seen, want), "stages %v, want %v in that order", stages, want)
	final := evs[len(evs)-1]
	must(t, final.name == "result" && strings.Contains(final.data, `"verdict":"refuted"`), "last event %s: %.200s", final.name, final.data)
}

// A model failing mid-round and a model returning malformed structured
// output: the query completes with what it has and says what is missing.
func TestJustifyCompletesWithoutAFailedStep(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withProviders(func() providers.Set {
		set, _ := testProviders(func(key string, p *testProvider) {
			switch key {
			case catalog.ProviderC:
				p.fail, p.failPurpose = &providers.Error{Class: providers.ClassHostError, Status: 500, Message: "upstream down"}, events.StepRevise
			case catalog.ProviderA:
				p.garble = events.StepFindDisagreements
			}
		})
		return set
	}))
	key := h.newKey()
	id := h.submit(key, map[string]any{"mode": "justify", "prompt": justifyPrompts[0]}).json(t)["request_id"].(string)
	res := h.wait(key, id, 30*time.Second)
	must(t, res["status"] == "completed", "status %v: %v", res["status"], res["error"])
	j := asMap(res["justify"])
	must(t, len(asList(asMap(asList(j["rounds"])[1])["answers"])) == 3, "round 2 should hold the three revisions")
	missing := fmt.Sprint(j["missing"])
	must(t, strings.Contains(missing, "provider_c did not revise") && strings.Contains(missing, "host_error"), "missing %s", missing)
	must(t, strings.Contains(missing, "provider_a could not extract the disagreements") && strings.Contains(missing, "not_json"), "missing %s", missing)
	must(t, len(asList(j["disagreements"])) == 0 && len(asList(jsonPath(res, "answer", "conflicts"))) == 0, "no disagreements without the extraction")
	must(t, jsonPath(res, "answer", "text") != "", "no answer")
}

// failingSearch is a search backend that always fails, or finds nothing.
type failingSearch struct {
	empty bool
	calls atomic.Int64
}

func (f *failingSearch) Name() string { return "searxng" }

func (f *failingSearch) Search(context.Context, string, int) ([]search.Result, error) {
	f.calls.Add(1)
	if f.empty {
		return []search.Result{}, nil
	}
	return nil, errors.New("searxng: HTTP 502 Bad Gateway")
}

// A search backend that fails or finds nothing: the claims are judged from
// the models' own knowledge, with half the confidence, and the result says
// what was missing; planted false claims are still caught.
func TestVerifyWithoutEvidence(t *testing.T) {
	t.Parallel()
	for _, empty := range []bool{false, true} {
		t.Run(fmt.Sprintf("empty=%v", empty), func(t *testing.T) {
			t.Parallel()
			backend := &failingSearch{empty: empty}
			h := newHarness(t, withSearch(backend))
			key := h.newKey()
			id := h.submit(key, map[string]any{"mode": "verify", "prompt": verifyPrompts[0]}).json(t)["request_id"].(string)
			res := h.wait(key, id, 30*time.Second)
			must(t, res["status"] == "completed", "status %v: %v", res["status"], res["error"])
			must(t, backend.calls.Load() > 1, "the backend was searched %d times", backend.calls.Load())
			v := asMap(res["verify"])
			missing := fmt.Sprint(v["missing"])
			if empty {
				must(t, strings.Contains(missing, "no source was found for claim c1"), "missing %s", missing)
			} else {
				must(t, strings.Contains(missing, "the research search (searxng) failed") && strings.Contains(missing, "502"), "missing %s", missing)
			}
			for _, c := range asList(v["claims"]) {
				c := asMap(c)
				isTrue, _ := simulated.Planted(c["text"].(string))
				must(t, len(asList(c["sources"])) == 0, "sources without a search")
				must(t, c["confidence"].(float64) <= 0.5, "confidence %v without sources", c["confidence"])
				if !isTrue {
					must(t, c["verdict"] == "refuted" || c["verdict"] == "disputed", "false claim %q ended %v", c["text"], c["verdict"])
				}
			}
		})
	}
}

// Malformed structured output in verify: a model whose extraction is not
// JSON loses its claims, a failed merge falls back to merging the same text,
// and a model whose cross-check is not JSON leaves the verdicts to the
// others.
func TestVerifyCompletesWithMalformedOutput(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withProviders(func() providers.Set {
		set, _ := testProviders(func(key string, p *testProvider) {
			switch key {
			case catalog.ProviderA:
				p.garble = events.StepMergeClaims
			case catalog.ProviderB:
				p.garble = events.StepExtractClaims
			case catalog.ProviderC:
				p.garble = events.StepAssessClaims
			}
		})
		return set
	}))
	key := h.newKey()
	id := h.submit(key, map[string]any{"mode": "verify", "prompt": verifyPrompts[0]}).json(t)["request_id"].(string)
	res := h.wait(key, id, 30*time.Second)
	must(t, res["status"] == "completed", "status %v: %v", res["status"], res["error"])
	v := asMap(res["verify"])
	missing := fmt.Sprint(v["missing"])
	for _, want := range []string{"provider_b could not extract", "could not merge the claims", "provider_c could not cross-check"} {
		must(t, strings.Contains(missing, want), "missing %s; want %q", missing, want)
	}
	claims := asList(v["claims"])
	must(t, len(claims) > 0, "no claims")
	for _, c := range claims {
		c := asMap(c)
		must(t, !slices.Contains(asList(c["asserted_by"]), any("provider_b")), "provider_b's claims were not extracted: %v", c)
		must(t, c["verdict"] != nil, "claim without a verdict")
	}
	merged := h.eventsOf(id, "claims_merged")
	must(t, len(merged) == 1 && merged[0].Event.(events.ClaimsMerged).Method == events.MergedByExactText, "merge method")
}

// eventsOf returns the events named name of query id.
func (h *harness) eventsOf(id, name string) []events.Record {
	var out []events.Record
	for _, r := range h.streamRecords("QUERIES") {
		if r.Envelope.Subject == events.Subject(events.AggregateQuery, id, name) {
			out = append(out, r)
		}
	}
	return out
}

// A worker killed while the claims are cross-checked: after the restart the
// query completes, no step before the cross-check runs again, every call is
// charged once and the audit passes.
func TestVerifyResumesAfterACrash(t *testing.T) {
	t.Parallel()
	held, crash := holdUntilCrash(t, func(key string, p *testProvider, hold chan struct{}) {
		p.hold, p.holdPurpose = hold, events.StepAssessClaims
	})
	h := newHarness(t, held)
	acct := h.accountWith("free", 50)
	key := h.key(acct)
	id := h.submit(key, map[string]any{"mode": "verify", "prompt": verifyPrompts[1]}).json(t)["request_id"].(string)
	eventually(t, 30*time.Second, "every search to be recorded", func() bool {
		merged := h.eventsOf(id, "claims_merged")
		if len(merged) != 1 {
			return false
		}
		want := 1 // the research search
		for _, c := range merged[0].Event.(events.ClaimsMerged).Claims {
			want += len(c.Queries)
		}
		return h.countEvents(id, "evidence_retrieved") == want
	})
	searches := h.countEvents(id, "evidence_retrieved")
	crash(h)
	res := h.wait(key, id, 60*time.Second)
	must(t, res["status"] == "completed", "status %v", res["status"])
	for name, want := range map[string]int{"model_answered": 4, "claims_extracted": 4, "claims_merged": 1, "claims_assessed": 4, "verdicts_given": 1, "synthesized": 1} {
		must(t, h.countEvents(id, name) == want, "%s appended %d times, want %d", name, h.countEvents(id, name), want)
	}
	must(t, h.countEvents(id, "evidence_retrieved") == searches, "searches ran again: %d, then %d", searches, h.countEvents(id, "evidence_retrieved"))
	calls, _ := h.chargedCalls(acct)
	must(t, len(calls) == 4+4+1+4+1, "%d calls charged, want 14", len(calls))
	for call, n := range calls {
		must(t, n == 1, "call %s charged %d times", call, n)
	}
	h.closeAndAudit()
}

// The default prices make four standard models cost about 1 credit in
// unify, 2.5 in justify and 5 in verify with the simulated backend's usage,
// and the pre-flight estimate covers the charge. Each mode's block is
// populated in its mode only: unify populates neither.
func TestModeCostsAreCalibrated(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	key := h.newKey()
	for mode, want := range map[string]float64{"unify": 1, "justify": 2.5, "verify": 5} {
		id := h.submit(key, map[string]any{"mode": mode, "prompt": verifyPrompts[0]}).json(t)["request_id"].(string)
		res := h.wait(key, id, 30*time.Second)
		charged := jsonPath(res, "credits", "charged").(float64)
		estimated := jsonPath(res, "credits", "estimated").(float64)
		t.Logf("%s: charged %.3f, estimated %.3f", mode, charged, estimated)
		for _, block := range []string{"justify", "verify"} {
			v, present := res[block]
			must(t, present, "%s: the result has no %s key", mode, block)
			must(t, (v != nil) == (block == mode), "%s: %s block %v", mode, block, v)
		}
		must(t, charged > 0.75*want && charged < 1.25*want, "%s charged %.3f, want about %.1f", mode, charged, want)
		must(t, estimated >= charged, "%s estimated %.3f below the charge %.3f", mode, estimated, charged)
	}
}

// A worker killed during the deliberation: after the restart no model
// answers or revises twice, and the query completes.
func TestJustifyResumesAfterACrash(t *testing.T) {
	t.Parallel()
	held, crash := holdUntilCrash(t, func(key string, p *testProvider, hold chan struct{}) {
		if key == catalog.ProviderD {
			p.hold, p.holdPurpose = hold, events.StepRevise
		}
	})
	h := newHarness(t, held)
	key := h.newKey()
	id := h.submit(key, map[string]any{"mode": "justify", "prompt": justifyPrompts[2]}).json(t)["request_id"].(string)
	eventually(t, 30*time.Second, "three revisions", func() bool { return h.countEvents(id, "model_revised") == 3 })
	crash(h)
	res := h.wait(key, id, 60*time.Second)
	must(t, res["status"] == "completed", "status %v", res["status"])
	for name, want := range map[string]int{"model_answered": 4, "model_revised": 4, "disagreements_found": 1, "synthesized": 1} {
		must(t, h.countEvents(id, name) == want, "%s appended %d times, want %d", name, h.countEvents(id, name), want)
	}
	rounds := asList(jsonPath(res, "justify", "rounds"))
	must(t, len(rounds) == 2 && len(asList(asMap(rounds[1])["answers"])) == 4, "rounds %v", rounds)
}

// The final answer failing ends justify and verify with aggregation_failed,
// after their steps; a model failing its research leaves the others to go on.
func TestFinalAnswerFailureAndAFailedResearch(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withProviders(func() providers.Set {
		set, _ := testProviders(func(key string, p *testProvider) {
			switch key {
			case catalog.ProviderA:
				p.fail, p.failPurpose = &providers.Error{Class: providers.ClassHostError, Status: 503, Message: "overloaded"}, events.StepRewrite
			case catalog.ProviderD:
				p.fail, p.failPurpose = &providers.Error{Class: providers.ClassHostError, Status: 401, Message: "bad key"}, events.StepResearch
			}
		})
		return set
	}))
	key := h.newKey()
	for _, mode := range []string{"justify", "verify"} {
		id := h.submit(key, map[string]any{"mode": mode, "prompt": verifyPrompts[0]}).json(t)["request_id"].(string)
		res := h.wait(key, id, 60*time.Second)
		must(t, res["status"] == "failed" && jsonPath(res, "error", "code") == "aggregation_failed", "%s: %v %v", mode, res["status"], res["error"])
		must(t, res[mode] != nil, "%s: the block is kept on failure", mode)
		if mode == "verify" {
			must(t, jsonPath(res, "models").([]any)[3].(map[string]any)["status"] == "failed", "provider_d's research failed")
			for _, c := range asList(jsonPath(res, "verify", "claims")) {
				must(t, !slices.Contains(asList(asMap(c)["asserted_by"]), any("provider_d")), "a claim of provider_d, which did not answer")
				must(t, asMap(c)["verdict"] != nil, "claims are judged before the final answer")
			}
		}
	}
}

// A step that failed stays failed when the job is resumed: the extraction
// of the disagreements is not tried again after a crash.
func TestJustifyResumeKeepsAFailedStep(t *testing.T) {
	t.Parallel()
	held, crash := holdUntilCrash(t, func(key string, p *testProvider, hold chan struct{}) {
		if key == catalog.ProviderA {
			p.garble = events.StepFindDisagreements
			p.hold, p.holdPurpose = hold, events.StepRewrite
		}
	})
	h := newHarness(t, held)
	key := h.newKey()
	id := h.submit(key, map[string]any{"mode": "justify", "prompt": justifyPrompts[1]}).json(t)["request_id"].(string)
	eventually(t, 30*time.Second, "the failed extraction", func() bool { return h.countEvents(id, "step_failed") == 1 })
	crash(h)
	res := h.wait(key, id, 60*time.Second)
	must(t, res["status"] == "completed", "status %v", res["status"])
	must(t, h.countEvents(id, "step_failed") == 1 && h.countEvents(id, "disagreements_found") == 0,
		"step_failed %d, disagreements_found %d", h.countEvents(id, "step_failed"), h.countEvents(id, "disagreements_found"))
	must(t, len(asList(jsonPath(res, "justify", "missing"))) == 1, "missing %v", jsonPath(res, "justify", "missing"))
}
