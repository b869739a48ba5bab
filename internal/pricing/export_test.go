package pricing

import "github.com/pkoukk/tiktoken-go"

// ObserveEncode calls seen with every piece of text tiktoken encodes until
// the returned function restores the encoder. Tests that use it do not run
// in parallel.
func ObserveEncode(seen func(piece string)) (restore func()) {
	prev := encode
	encode = func(enc *tiktoken.Tiktoken, piece string) int {
		seen(piece)
		return prev(enc, piece)
	}
	return func() { encode = prev }
}

// CountTokens is countTokens, for tests.
var CountTokens = countTokens

// CountWhole counts text's tokens with encoding in one piece, as counting did
// before it was split; benchmarks compare with it.
func CountWhole(encoding, text string) int {
	countTokens(encoding, "") // loads the encoding
	enc, _ := encodings.Load(encoding)
	return len(enc.(*tiktoken.Tiktoken).Encode(text, nil, nil))
}
