package simulated

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/crosscheck/crosscheck/internal/events"
)

// The steps of justify and verify, played from the prompts the modes write.
// Each reads the parts of its prompt it needs; a prompt without them gets
// an empty but schema-valid reply.

// section returns the text after the line head, up to the first of ends.
func section(s, head string, ends ...string) string {
	i := strings.Index(s, head)
	if i < 0 {
		return ""
	}
	s = s[i+len(head):]
	for _, e := range ends {
		if j := strings.Index(s, e); j >= 0 {
			s = s[:j]
		}
	}
	return s
}

// stances reads "- topic: position" lines.
func stances(text string) (topics []string, pos map[string]string) {
	pos = map[string]string{}
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		topic, p, ok := strings.Cut(strings.TrimPrefix(line, "- "), ": ")
		if !strings.HasPrefix(line, "- ") || !ok {
			continue
		}
		if _, seen := pos[topic]; !seen {
			topics = append(topics, topic)
		}
		pos[topic] = p
	}
	return topics, pos
}

// blocks splits text at "### <label>" lines.
func blocks(text string) (labels []string, bodies map[string]string) {
	bodies = map[string]string{}
	label := ""
	for _, line := range strings.Split(text, "\n") {
		if l, ok := strings.CutPrefix(strings.TrimSpace(line), "### "); ok {
			label = l
			labels = append(labels, label)
			continue
		}
		if label != "" {
			bodies[label] += line + "\n"
		}
	}
	return labels, bodies
}

type revision struct {
	Answer  string `json:"answer"`
	Changed bool   `json:"changed"`
}

// revise keeps each of its positions unless a strict majority of all the
// answers holds another, which it then adopts.
func (c *Client) revise(prompt string) revision {
	topics, own := stances(section(prompt, "Your first answer:\n", "\nThe other answers"))
	_, others := blocks(section(prompt, "The other answers, anonymised and in random order:\n"))
	var b strings.Builder
	fmt.Fprintf(&b, "[simulated revision by %s]\n", c.Provider)
	changed := false
	for _, t := range topics {
		count := map[string]int{own[t]: 1}
		total := 1
		for _, body := range others {
			if _, p := stances(body); p[t] != "" {
				count[p[t]]++
				total++
			}
		}
		pos := own[t]
		for p, n := range count {
			if n*2 > total && p != pos {
				pos, changed = p, true
			}
		}
		fmt.Fprintf(&b, "- %s: %s\n", t, pos)
	}
	return revision{Answer: b.String(), Changed: changed}
}

type disagreements struct {
	Disagreements []events.Disagreement `json:"disagreements"`
}

// findDisagreements compares the "### <model> round 1" and "round 2" blocks.
func findDisagreements(prompt string) disagreements {
	labels, bodies := blocks(prompt)
	var models []string
	before, after := map[string]map[string]string{}, map[string]map[string]string{}
	var topics []string
	for _, l := range labels {
		model, round, ok := strings.Cut(l, " round ")
		if !ok {
			continue
		}
		ts, pos := stances(bodies[l])
		if round == "1" {
			models = append(models, model)
			before[model] = pos
			for _, t := range ts {
				if !slices.Contains(topics, t) {
					topics = append(topics, t)
				}
			}
		} else {
			after[model] = pos
		}
	}
	out := disagreements{Disagreements: []events.Disagreement{}}
	for _, t := range topics {
		distinct := map[string]bool{}
		for _, m := range models {
			distinct[before[m][t]] = true
		}
		if len(distinct) < 2 {
			continue
		}
		d := events.Disagreement{Topic: t}
		finals := map[string]bool{}
		for _, m := range models {
			a := after[m][t]
			if a == "" {
				a = before[m][t]
			}
			finals[a] = true
			d.Positions = append(d.Positions, events.Stance{Model: m, Before: before[m][t], After: a})
		}
		if d.Resolved = len(finals) == 1; d.Resolved {
			d.Resolution = fmt.Sprintf("resolved in round 2: every model now holds %q", d.Positions[0].After)
		} else {
			held := make([]string, 0, len(finals))
			for p := range finals {
				held = append(held, fmt.Sprintf("%q", p))
			}
			sort.Strings(held)
			d.Resolution = "unresolved: after revision the models still hold " + strings.Join(held, " and ")
		}
		out.Disagreements = append(out.Disagreements, d)
	}
	return out
}

type answer struct {
	Answer string `json:"answer"`
}

// rewrite writes a verify answer from its checked claims, or a justify
// answer from the revised answers.
func rewrite(prompt string) answer {
	if checked := section(prompt, "\nChecked claims:\n"); checked != "" {
		var b strings.Builder
		b.WriteString("[simulated answer, rewritten to agree with the verdicts]\n")
		for _, line := range strings.Split(checked, "\n") {
			verdict, claim, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), "- ["), "] ")
			if !ok {
				continue
			}
			switch verdict {
			case events.VerdictSupported:
				fmt.Fprintf(&b, "- %s\n", claim)
			case events.VerdictRefuted:
				fmt.Fprintf(&b, "- Left out, refuted by the cross-check: %s\n", claim)
			default:
				fmt.Fprintf(&b, "- %s (%s)\n", claim, verdict)
			}
		}
		return answer{Answer: b.String()}
	}
	syn := synthesize(section(prompt, "Revised answers:\n", "\nDisagreements:\n"))
	return answer{Answer: strings.Replace(syn.Answer, "[simulated synthesis]", "[simulated answer after deliberation]", 1)}
}

// research states the facts the question calls for, each citing the first
// search result that speaks of it. One provider (by the question's hash)
// states the first fact with a planted wrong value; on a third of the
// questions a second provider does so for the second fact.
//
// It states the sentences of the attached files that speak of the
// question as well, each citing its file among the results (file://<id>).
func (c *Client) research(model, prompt string, docs []doc) string {
	question := section(prompt, "Question:\n", "\n\nSearch results:")
	if question == "" {
		question = prompt
	}
	results := strings.Split(section(prompt, "\n\nSearch results:\n"), "\n\n")
	h := hash(question)
	idx := strings.IndexByte("abcd", c.Provider[len(c.Provider)-1])
	liar, second := int(h%4), -1
	if h%3 == 0 {
		second = (liar + 1 + int(h/3%3)) % 4
	}
	var b strings.Builder
	fmt.Fprintf(&b, "[simulated research answer by %s/%s]\n", c.Provider, model)
	for i, f := range relevant(question) {
		s := f.True
		if (i == 0 && idx == liar) || (i == 1 && idx == second) {
			s = f.False
		}
		for n, r := range results {
			if strings.TrimSpace(r) != "" && overlap(f.True, r) >= 3 {
				s = strings.TrimSuffix(s, ".") + fmt.Sprintf(". [%d]", n+1)
				break
			}
		}
		fmt.Fprintf(&b, "- %s\n", s)
	}
	for _, f := range fromFiles(question, docs) {
		line := f.sentence
		for n, r := range results {
			if f.doc.id != "" && strings.Contains(r, "file://"+f.doc.id) {
				line = strings.TrimSuffix(line, ".") + fmt.Sprintf(". [%d]", n+1)
				break
			}
		}
		fmt.Fprintf(&b, "- %s\n", line)
	}
	b.WriteString("- Advice: compare several sources before relying on a single figure.\n")
	return b.String()
}

type claims struct {
	Claims []events.ExtractedClaim `json:"claims"`
}

// extractClaims takes each "- " line of the answer as a claim; one with a
// number in it is check-worthy.
func extractClaims(prompt string) claims {
	out := claims{Claims: []events.ExtractedClaim{}}
	for _, line := range strings.Split(section(prompt, "\nAnswer:\n"), "\n") {
		text, ok := strings.CutPrefix(strings.TrimSpace(line), "- ")
		if !ok {
			continue
		}
		text = strings.TrimSpace(citationRe.ReplaceAllString(text, ""))
		out.Claims = append(out.Claims, events.ExtractedClaim{Text: text, CheckWorthy: len(numbers(text)) > 0})
	}
	return out
}

type merged struct {
	Claims []mergedClaim `json:"claims"`
}

type mergedClaim struct {
	Text       string   `json:"text"`
	AssertedBy []string `json:"asserted_by"`
	Queries    []string `json:"queries"`
}

// mergeClaims merges "- (model) claim" lines with the same normalised text;
// each claim is searched as stated and by its words alone.
func mergeClaims(prompt string) merged {
	out := merged{Claims: []mergedClaim{}}
	index := map[string]int{}
	for _, line := range strings.Split(prompt, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "- (")
		if !ok {
			continue
		}
		model, text, ok := strings.Cut(rest, ") ")
		if !ok {
			continue
		}
		key := normalise(text)
		i, seen := index[key]
		if !seen {
			i = len(out.Claims)
			index[key] = i
			out.Claims = append(out.Claims, mergedClaim{Text: text, AssertedBy: []string{}, Queries: []string{text, strings.Join(wordsOf(text), " ")}})
		}
		out.Claims[i].AssertedBy = append(out.Claims[i].AssertedBy, model)
	}
	return out
}

type assessments struct {
	Assessments []events.Assessment `json:"assessments"`
}

// assess judges each claim against the evidence that shares most words
// with it: supported when that evidence states every number of the claim,
// refuted when it states other numbers. Without such evidence it judges
// from the facts it knows.
func (c *Client) assess(prompt string) assessments {
	out := assessments{Assessments: []events.Assessment{}}
	for _, part := range strings.Split(prompt, "\nClaim ")[1:] {
		head, evidence, _ := strings.Cut(part, "\nEvidence:\n")
		id, claim, ok := strings.Cut(head, ": ")
		if !ok {
			continue
		}
		out.Assessments = append(out.Assessments, judge(id, claim, evidence))
	}
	return out
}

func judge(id, claim, evidence string) events.Assessment {
	want := numbers(claim)
	best, bestN, bestAt := "", 0, 0
	for n, r := range strings.Split(evidence, "\n\n") {
		if k := overlap(claim, r); k >= 3 && k > bestN {
			best, bestN, bestAt = r, k, n+1
		}
	}
	verdict := func(v, why string) events.Assessment {
		return events.Assessment{ClaimID: id, Verdict: v, Rationale: why}
	}
	if best != "" {
		have := numbers(best)
		switch {
		case len(have) == 0:
			return verdict(events.VerdictUnverifiable, fmt.Sprintf("the evidence [%d] speaks of it but gives no figure", bestAt))
		case containsAll(have, want):
			return verdict(events.VerdictSupported, fmt.Sprintf("the evidence [%d] states the same figure", bestAt))
		default:
			return verdict(events.VerdictRefuted, fmt.Sprintf("the evidence [%d] gives a different figure", bestAt))
		}
	}
	for _, f := range facts {
		if overlap(claim, f.True) >= 3 {
			if containsAll(numbers(f.True), want) {
				return verdict(events.VerdictSupported, "no evidence was found; it agrees with what this model knows")
			}
			return verdict(events.VerdictRefuted, "no evidence was found; it contradicts what this model knows")
		}
	}
	return verdict(events.VerdictUnverifiable, "no evidence was found and this model cannot tell")
}

func containsAll(have, want []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}
