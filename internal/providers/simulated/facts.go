package simulated

import (
	"regexp"
	"strings"
)

// fact is one statement the simulated research answers make: True with the
// right value, False with a planted wrong one. The sample search corpus
// states the right values.
type fact struct {
	// Keywords are the words of a question that call for the fact.
	Keywords    []string
	True, False string
}

var facts = []fact{
	{[]string{"water", "boil", "boils", "boiling"}, "Water boils at 100 degrees Celsius at sea level.", "Water boils at 90 degrees Celsius at sea level."},
	{[]string{"everest", "mountain", "tallest"}, "Mount Everest is 8,849 metres tall.", "Mount Everest is 8,611 metres tall."},
	{[]string{"moon", "lunar"}, "The Moon is on average 384,400 kilometres from Earth.", "The Moon is on average 284,400 kilometres from Earth."},
	{[]string{"bones", "skeleton", "body"}, "An adult human skeleton has 206 bones.", "An adult human skeleton has 212 bones."},
	{[]string{"eiffel", "paris", "tower"}, "The Eiffel Tower was completed in 1889.", "The Eiffel Tower was completed in 1901."},
	{[]string{"moon", "apollo", "landing", "astronaut", "astronauts"}, "The first crewed Moon landing took place in 1969.", "The first crewed Moon landing took place in 1972."},
	{[]string{"sound", "acoustic"}, "Sound travels at about 343 metres per second in dry air at 20 degrees Celsius.", "Sound travels at about 443 metres per second in dry air at 20 degrees Celsius."},
	{[]string{"berlin", "wall", "germany", "cold"}, "The Berlin Wall fell in 1989.", "The Berlin Wall fell in 1991."},
	{[]string{"curie", "nobel"}, "Marie Curie was awarded the Nobel Prize in Chemistry in 1911.", "Marie Curie was awarded the Nobel Prize in Chemistry in 1921."},
	{[]string{"marathon", "running", "race"}, "A marathon is 42.195 kilometres long.", "A marathon is 40.195 kilometres long."},
	{[]string{"gold", "element", "atomic"}, "Gold has the atomic number 79.", "Gold has the atomic number 47."},
	{[]string{"sun", "orbit", "earth"}, "Earth orbits the Sun at an average distance of about 149.6 million kilometres.", "Earth orbits the Sun at an average distance of about 129.6 million kilometres."},
	{[]string{"light", "speed", "vacuum"}, "Light travels at 299,792 kilometres per second in a vacuum.", "Light travels at 199,792 kilometres per second in a vacuum."},
	{[]string{"danube", "river", "europe"}, "The Danube flows through 10 countries.", "The Danube flows through 7 countries."},
}

// Planted reports whether claim is one of the statements the simulated
// research answers make, and if so whether it is true. Scenario tests use
// it to score the verdicts.
func Planted(claim string) (isTrue, known bool) {
	n := normalise(claim)
	for _, f := range facts {
		switch n {
		case normalise(f.True):
			return true, true
		case normalise(f.False):
			return false, true
		}
	}
	return false, false
}

// relevant returns the facts a question calls for, at most four, in table
// order; a question that names none gets three chosen by its hash.
func relevant(question string) []fact {
	words := map[string]bool{}
	for _, w := range wordsOf(question) {
		words[w] = true
	}
	var out []fact
	for _, f := range facts {
		for _, k := range f.Keywords {
			if words[k] {
				out = append(out, f)
				break
			}
		}
		if len(out) == 4 {
			return out
		}
	}
	if len(out) == 0 {
		h := int(hash(question))
		for i := range 3 {
			out = append(out, facts[(h+5*i)%len(facts)])
		}
	}
	return out
}

var (
	numberRe   = regexp.MustCompile(`\d[\d,]*(?:\.\d+)?`)
	wordRe     = regexp.MustCompile(`[\pL]+`)
	citationRe = regexp.MustCompile(`\s*\[\d{1,2}\]`)
	stopwords  = map[string]bool{"the": true, "a": true, "an": true, "of": true, "in": true, "at": true, "is": true, "was": true, "and": true, "on": true, "to": true, "has": true, "about": true, "per": true, "by": true, "for": true, "its": true, "it": true, "with": true, "from": true, "what": true, "how": true, "tell": true, "me": true, "are": true}
)

// numbers returns the numbers in s, commas removed.
func numbers(s string) []string {
	var out []string
	for _, n := range numberRe.FindAllString(s, -1) {
		out = append(out, strings.ReplaceAll(n, ",", ""))
	}
	return out
}

// wordsOf returns the lower-case words of s, stopwords left out.
func wordsOf(s string) []string {
	var out []string
	for _, w := range wordRe.FindAllString(strings.ToLower(s), -1) {
		if !stopwords[w] {
			out = append(out, w)
		}
	}
	return out
}

// overlap counts the words of a that b also has.
func overlap(a, b string) int {
	in := map[string]bool{}
	for _, w := range wordsOf(b) {
		in[w] = true
	}
	n := 0
	seen := map[string]bool{}
	for _, w := range wordsOf(a) {
		if in[w] && !seen[w] {
			n++
			seen[w] = true
		}
	}
	return n
}

func normalise(s string) string {
	s = citationRe.ReplaceAllString(strings.ToLower(s), "")
	return strings.Join(strings.Fields(strings.Trim(s, " .")), " ")
}
